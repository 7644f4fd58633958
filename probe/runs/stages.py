"""The stages of a task run, each a short function over one :class:`RunState`.

:func:`probe.runs.task_run.run_task` tells the story: :func:`select` (the items, ``--limit``), :func:`plan`
(the requests, the plan printed before any work), :func:`generate` (chain-of-thought generations, then the
requests that follow them), :func:`score` (the records; the sample log), :func:`parse` (the parsed answer's
distribution, when the task enumerates one), :func:`agree` (greedy agreement, when asked), :func:`aggregate`
(the task's summary and tables) and :func:`write` (the run directory's files). A stage that wrote a
``--shard I/N`` share of an unfinished set returns a :class:`~probe.runs.sharding.ShardPending`.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from probe.errors import ProbeError
from probe.io import read_records, write_json_atomic
from probe.progress import maybe, stage
from probe.runs.agreement import agreement_rows, agreement_summary
from probe.runs.limit import check_smaller_limit, resolve_limit, select_coverage
from probe.runs.limit import plain as _plain
from probe.runs import plan as plans  # the estimates; `plan` is this module's stage
from probe.runs.options import RunOptions
from probe.runs.plan_check import Planned
from probe.runs.provenance import provenance
from probe.runs.record import records_to_frame
from probe.runs.results import result_rows, results_frame, write_run_report
from probe.runs.samples import SAMPLES_FILE, SampleLog
from probe.runs.sharding import ShardPending
from probe.scoring.engine.memory import generation_batch_size
from probe.scoring.generate import GenerationRequest
from probe.tasks.base import Aggregate, Task

if TYPE_CHECKING:
    import pandas as pd

    from probe.runs.runner import Runner


__all__ = ["RunState", "Selection", "agree", "aggregate", "generate", "parse", "plan", "score", "select", "write"]


@dataclass(frozen=True)
class Selection:
    """The items a run scores (``select``): the task's ``items`` narrowed by ``--limit``."""

    items: Sequence[Any]
    #: the limit as a number of items (a fraction resolved), and as it was asked
    limit: int | None
    asked: int | float | None
    #: what a stratified ``--limit`` covered and left out (``summary.json``'s ``coverage``), else None
    coverage: dict[str, Any] | None


@dataclass
class RunState:
    """One task run as its stages fill it in (:func:`probe.runs.task_run.run_task` tells the story)."""

    task: Task
    config: Any
    out: Path | None
    options: RunOptions
    selection: Selection
    runner: "Runner" = None  # type: ignore[assignment] - set once the model is loaded, before the first stage
    #: the chain-of-thought generations the task asks for first (none: the task scores directly)
    gen_requests: Sequence[Any] = ()
    generations: Mapping[str, str] | None = None
    #: the scoring requests (None until the generations they follow exist)
    requests: Sequence[Any] | None = None
    records: Sequence[Any] = ()
    #: with ``log_samples``: one dict per request, then the generations no request follows
    samples: list[dict[str, Any]] | None = None
    parse_requests: Sequence[Any] = ()
    parsed: Mapping[str, dict] = field(default_factory=dict)
    agreement: dict[str, Any] | None = None
    #: the captured activations in record order (``--capture``), and the records' frame, once aggregated
    acts: Any = None
    frame: Any = None

    @property
    def items(self) -> Sequence[Any]:
        return self.selection.items

    def path(self, name: str) -> Path | None:
        """``OUT/name``, or None for a run in memory."""
        return self.out / name if self.out is not None else None


# --------------------------------------------------------------------------- the stages


def select(task: Task, config: Any, limit: int | float | None, out: Path | None, options: RunOptions) -> Selection:
    """The task's items narrowed by ``limit`` (stratified); a smaller limit than a finished run's in ``out``
    refused here, before the model loads."""
    with stage(f"{task.name}: reading the items", announce_after=2.0):
        pool = task.items(config)
    asked, limit = limit, resolve_limit(task, config, limit, pool)
    items = task.selection.select(config, pool, limit)
    if not items:
        raise ProbeError(f"task {task.name!r}: no items selected (check the data, the limit and the config)")
    coverage = select_coverage(task, config, pool, items, limit, asked)
    if out is not None and not options.shard:
        check_smaller_limit(task, config, limit, out, pool, items)  # before the model loads
    return Selection(items, limit, asked, coverage)


def plan(run: RunState) -> None:
    """The requests (the generations first, when the task generates), and the plan printed before any work."""
    task, config, tok = run.task, run.config, run.runner.lm.tokenizer
    n = len(run.items)
    with maybe(run.runner.procs.is_main, f"{task.name}: building the requests", total=n, unit="item(s)",
               announce_after=0.0 if n > ANNOUNCE_REQUESTS else 2.0):
        run.gen_requests = task.paper.generation_requests(config, run.items, tok)
        run.requests = None if run.gen_requests else task.requests(config, run.items, tok, None)
    if run.runner.procs.is_main:
        for line in _plan(task, config, run.items, run.gen_requests, run.requests, run.runner, run.out):
            print(line, file=sys.stderr)


def generate(run: RunState) -> ShardPending | None:
    """The task's generations (resumed from ``generations.jsonl``), then the scoring requests that follow
    them; checked against the records a resumed output already holds."""
    runner, task = run.runner, run.task
    if run.gen_requests:
        if runner.procs.distributed and run.out is None:
            raise ProbeError("several processes need an output directory to share generations")
        generations = runner.generate(run.gen_requests, run.path("generations.jsonl"), task=task.name)
        if isinstance(generations, ShardPending):
            return generations
        run.generations = generations
        run.requests = task.requests(run.config, run.items, runner.lm.tokenizer, generations)
    if not run.requests:
        raise ProbeError(f"task {task.name!r}: the selected items gave no requests")
    if run.out is not None and runner.procs.is_main and runner.shard is None:
        _check_no_extra_records(run.out / "records.jsonl", run.requests)
    if run.gen_requests and runner.procs.is_main:
        print(f"{task.name}: {len(run.requests)} request(s) to score after the generations", file=sys.stderr)
    return None


def score(run: RunState) -> ShardPending | None:
    """The records (``records.jsonl``, resumed), scored with the task's sampling specs beside the run's; with
    ``log_samples`` the sample log, and the generations no scored request follows."""
    runner, task, requests = run.runner, run.task, list(run.requests or ())
    # --shard jobs write only their own files: the run that folds the shards logs every sample
    log = _sample_log(runner, task.name, run.out, run.gen_requests, run.generations) \
        if run.options.log_samples and runner.shard is None else None
    try:
        records = runner.score(requests, run.path("records.jsonl"), task=task.name,
                               sampling=task.paper.sampling(run.config), samples=log)
        if isinstance(records, ShardPending):
            return records
        run.records = records
        if log is not None and runner.procs.is_main:
            ids = {r.id for r in requests}
            alone = [g for g in run.gen_requests if g.id not in ids]  # generations no scored request follows
            log.write_generations(alone, run.generations or {})
            run.samples = log.samples([r.id for r in requests] + [g.id for g in alone])
    finally:
        if log is not None:
            log.close()
    return None


def parse(run: RunState) -> ShardPending | None:
    """The parsed answer's distribution under the paper's sampling (``parsed.jsonl``), when the task has one."""
    runner, task = run.runner, run.task
    run.parse_requests = task.paper.parse_requests(run.config, run.items, runner.lm.tokenizer)
    if not run.parse_requests:
        return None
    parsed = runner.parse(run.parse_requests, run.path("parsed.jsonl"), task=task.name)
    if isinstance(parsed, ShardPending):
        return parsed
    run.parsed = parsed
    if parsed and run.options.log_samples and runner.procs.is_main and runner.shard is None:
        plog = _sample_log(runner, task.name, run.out, run.gen_requests, run.generations)
        try:
            plog.write_parsed(run.parse_requests, parsed)
            if run.samples is not None:
                run.samples += plog.samples([f"{r.id}#parsed" for r in run.parse_requests])
        finally:
            plog.close()
    return None


def agree(run: RunState) -> ShardPending | None:
    """Greedy agreement (``--agreement-tokens``): decode after every label prompt and compare the label written
    with the score argmax (``agreement.jsonl``, resumed like records; :mod:`probe.runs.agreement`)."""
    n_tokens = run.options.agreement_tokens
    if not n_tokens:
        return None

    labels = [r for r in run.requests or () if r.kind == "label"]
    if not labels:
        run.agreement = {"max_new_tokens": n_tokens, "note": "no label requests in this task"}
        return None
    gen = [GenerationRequest(r.id, r.prompt, n_tokens, meta={"kind": "agreement"}) for r in labels]
    texts = run.runner.generate(gen, run.path("agreement.jsonl"), task=run.task.name)
    if isinstance(texts, ShardPending):
        return texts
    run.agreement = {"max_new_tokens": n_tokens, **agreement_summary(agreement_rows(run.records, texts))}
    return None


def aggregate(run: RunState) -> tuple[Aggregate, dict[str, Any]]:
    """The task's aggregate over the records' frame (``parsed`` added when the task enumerates one), and the
    run's summary: the task's, with the model, counts, ``--limit`` coverage and greedy agreement."""

    run.acts = _activations(run)
    frame = records_to_frame(run.records)
    if run.parsed:  # each record's parsed-answer distribution under the paper's sampling, when the task has one
        frame["parsed"] = [run.parsed.get(str(i)) for i in frame["id"]]
    result: Aggregate = run.task.aggregate(run.config, frame, run.items)
    coverage, agreement = run.selection.coverage, run.agreement
    summary = {"task": run.task.name, "model": str(getattr(run.runner.lm, "name", "")),
               "model_fingerprint": run.runner.model_id, "n_items": len(run.items), "n_records": len(run.records),
               **result.summary, **({"coverage": coverage} if coverage else {}),
               **({"greedy_agreement": agreement} if agreement else {})}
    run.frame = frame
    return result, summary


def write(run: RunState, result: Aggregate, summary: dict[str, Any], t_start: float) -> "pd.DataFrame":
    """Into the run directory: ``summary.json``, ``timing.json``, the task's report files, ``provenance.json``,
    ``results.csv`` and ``report.md``/``report.html``; returns the flat results (made in memory without one)."""

    task, config, out, runner = run.task, run.config, run.out, run.runner
    if out is not None:
        write_json_atomic(out / "summary.json", summary)
        # timing first: a task's report may project the full benchmark's time from it
        work = runner.work()  # every process's share: the ranks of a launch, the --shard jobs folded in
        write_json_atomic(out / "timing.json", _timing(out / "timing.json", work, time.perf_counter() - t_start))
        for name in ("report.md", "report.html"):  # the task's own (rewritten) or the report's below
            (out / name).unlink(missing_ok=True)
        task.reporting.write(config, Aggregate(summary, result.tables), out)
        write_json_atomic(out / "provenance.json", _provenance(run, work))
        results = write_run_report(task, config, out, summary)
        print(f"{task.name}: {len(run.records)} record(s) in {out / 'records.jsonl'}{runner.cache_note()}",
              file=sys.stderr)
    else:
        results = results_frame(result_rows(task, config, summary))
    frame = run.frame
    if len(frame) and "model_name" not in frame:  # records name the model by fingerprint; add its name
        frame.insert(frame.columns.get_loc("model") + 1 if "model" in frame else 0, "model_name", summary["model"])
    return results


def _provenance(run: RunState, work: dict[str, Any]) -> dict[str, Any]:
    """``provenance.json``: the model, the task and its config, the limit, the run options, the data files."""

    runner, asked = run.runner, run.selection.asked
    return provenance(
        runner.lm, config={"task": run.task.name, "limit": run.selection.limit, "task_config": _plain(run.config),
                           **({"limit_fraction": asked} if isinstance(asked, float) else {}),
                           "run_options": _plain(run.options)},
        data_files=run.task.data_files(run.config), world_size=runner.procs.world_size,
        model_fingerprint=runner.model_id,  # what the records' ``model`` field holds
        scoring=_batching(runner), engine=work["engine"])


def _activations(run: RunState) -> Any:
    """The captured activations in record order (the store may hold extra rows: same requests, same order)."""
    runner = run.runner
    acts = runner.activations
    if run.out is not None and runner.capture_spec() is not None:
        from probe.activations import load as load_activations

        acts = load_activations(run.out / "activations", keys=runner.capture_spec().keys)
        if acts.ids != [r.id for r in run.records]:
            index = {i: k for k, i in enumerate(acts.ids)}
            rows = [index[r.id] for r in run.records]
            acts = type(acts)([acts.ids[k] for k in rows], {k: v[rows] for k, v in acts.arrays.items()},
                              [acts.records[k] for k in rows], acts.manifest)
    return acts


def _check_no_extra_records(path: Path, requests: Sequence[Any]) -> None:
    """A resumed run directory holds records of these requests only: records of items this run does not select
    (an earlier run with a larger ``limit`` or a wider config) would leave a summary of a subset beside them."""

    if not path.is_file():
        return
    wanted = {r.id for r in requests}
    extra = [str(r.get("id")) for r in read_records(path)[0] if str(r.get("id")) not in wanted]
    if extra:
        raise ProbeError(f"{path} holds {len(extra)} record(s) of items this run does not select (e.g. "
                         f"{', '.join(map(repr, extra[:3]))}): an earlier run with a larger --limit or another "
                         "config wrote there, and this run's summary would cover a subset of them. Re-run with the "
                         "same --limit and config, or choose a new output directory")


def _plan(task: Task, config: Any, items: Sequence[Any], gen_requests: Sequence[Any],
          requests: Sequence[Any] | None, runner: "Runner", out: Path | None) -> list[str]:
    """The plan printed before any work (:mod:`probe.runs.plan`): the generations still to make and how to
    skip them, the requests and tokens still to score, and an estimated time from a short calibration."""
    tok = runner.lm.tokenizer
    gen_done = _ids_in(out / "generations.jsonl") if out is not None and gen_requests else set()
    gen_left = [g for g in gen_requests if g.id not in gen_done]
    exact = True
    if requests is None:  # scoring requests exist once the chains do: count them with empty chains
        try:
            requests = task.requests(config, items, tok, {g.id: "" for g in gen_requests})
        except Exception:  # noqa: BLE001 - the count is a courtesy; the run itself says what is wrong
            requests = []
        exact = False
    done = _ids_in(out / "records.jsonl") if out is not None else set()
    n_left = sum(r.id not in done for r in requests) if requests else 0
    chain = {g.id: int(getattr(g, "max_new_tokens", 0) or 0) for g in gen_left}
    try:
        parse = task.paper.parse_requests(config, items, tok)
    except Exception:  # noqa: BLE001 - the run itself builds them again and says what is wrong
        parse = []
    parse_done = _ids_in(out / "parsed.jsonl") if out is not None and parse else set()
    parse_left = [r for r in parse if r.id not in parse_done]
    rates = None
    if n_left or gen_left or parse_left:
        rates = getattr(runner, "plan_rates", None)
        if rates is None:
            with maybe(runner.procs.is_main, f"{task.name}: plan: timing the model on this machine", announce_after=2.0):
                rates = plans.calibrate(runner.lm, getattr(runner.scorer, "batch_size", 1) or 1)
            runner.plan_rates = rates  # one calibration per loaded model
    tokens = _count_tokens(task.name, runner, requests or [], done, chain)
    runner.planned = Planned(task.name, tokens, rates.token) if rates else None  # checked on the first chunk
    rows = generation_batch_size(runner.scorer.batching) if gen_left else 1
    prompt_tokens = lambda r: len(runner.scorer.encoder.ids(r.prompt, False))  # noqa: E731
    gen_seconds = plans.generation_seconds(rates, gen_left, prompt_tokens, rows) if rates and gen_left else 0.0
    parse_s = 0.0
    if rates and parse_left:
        with maybe(runner.procs.is_main, f"{task.name}: plan: timing the exact enumeration on a few prompts",
                   announce_after=2.0):
            per_node = plans.parse_node_seconds(runner.lm, parse_left, runner.scorer.batch_size)
        parse_s = plans.parse_seconds(rates, parse_left, prompt_tokens, per_node)
    return plans.plan_lines(task.name, len(items), len(requests or []), n_left, tokens, rates,
                           gen_total=len(gen_requests), gen_left=gen_left, gen_seconds=gen_seconds,
                           note=task.paper.generation_note(config) if gen_requests else "",
                           exact=exact or not gen_requests, parse_total=len(parse), parse_left=parse_left,
                           parse_s=parse_s)


#: requests the plan tokenizes before it says so and counts them on screen (fewer take under a few seconds)
ANNOUNCE_REQUESTS = 2000


def _count_tokens(task: str, runner: "Runner", requests: Sequence[Any], done: set[str],
                  chain: Mapping[str, int]) -> int:
    """The tokens the engine computes (:func:`probe.runs.plan.computed_tokens`), counted on screen: every request
    is tokenized once here (the scorer keeps the result), which takes minutes for a whole benchmark."""
    left = sum(r.id not in done for r in requests)
    with maybe(runner.procs.is_main, f"{task}: plan: tokenizing the requests to count their tokens",
               total=len(requests), unit="request(s)",
               announce_after=0.0 if left > ANNOUNCE_REQUESTS else 2.0) as counting:
        return plans.computed_tokens(runner.scorer, requests, done, runner.options.chunk_size, chain, counting)


def _ids_in(path: Path) -> set[str]:
    """The record ids in a JSONL output (none when it is absent or unreadable)."""

    if not path.is_file():
        return set()
    try:
        return {str(r.get("id")) for r in read_records(path)[0]}
    except (OSError, ValueError, ProbeError):
        return set()


def _sample_log(runner: "Runner", task: str, out: Path | None, gen_requests: Sequence[Any],
                generations: Mapping[str, str] | None) -> Any:
    """The run's :class:`probe.runs.samples.SampleLog` (``OUT/samples.jsonl``; in memory without ``out``)."""

    chains = {g.id: (g, generations[g.id]) for g in gen_requests if generations and g.id in generations}
    return SampleLog(out / SAMPLES_FILE if out is not None else None, task, runner.scorer.encoder, chains)


def _timing(path: Path, work: dict[str, Any], wall: float) -> dict[str, Any]:
    """This invocation's seconds per request kind and engine counts (summed over every process that worked
    for it: launcher ranks, folded ``--shard`` jobs), and the sums over every invocation that finished.

    ``engine``: forward passes, ``tokens_computed`` (what ran, prefixes shared) and ``tokens_raw`` (every
    scored sequence on its own); ``computed_ratio`` = computed / raw, the factor a GPU-time projection
    from raw token counts needs. ``processes``: each process's own share, when several worked."""

    now = work["timing"]
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        total = old.get("scored_all_invocations", {}) if isinstance(old, dict) else {}
        engine_total = old.get("engine_all_invocations", {}) if isinstance(old, dict) else {}
    except (OSError, ValueError, AttributeError):
        total, engine_total = {}, {}
    for kind, t in now.items():
        acc = total.setdefault(kind, {"n": 0, "seconds": 0.0})
        acc["n"] += t["n"]
        acc["seconds"] += t["seconds"]
    for k, v in work["engine"].items():
        if k != "computed_ratio":
            engine_total[k] = engine_total.get(k, 0) + v
    if engine_total.get("tokens_raw"):
        engine_total["computed_ratio"] = round(engine_total["tokens_computed"] / engine_total["tokens_raw"], 4)
    per = {k: v["seconds"] / v["n"] for k, v in total.items() if v.get("n")}
    out = {"wall_seconds": round(wall, 3), "scored_this_invocation": now, "scored_all_invocations": total,
           "seconds_per_request": per, "engine_this_invocation": work["engine"],
           "engine_all_invocations": engine_total}
    if "processes" in work:
        out["processes"] = work["processes"]
    return out


def _batching(runner: Any) -> dict | None:
    """The batch plan the scorer chose (``--batch-size/--token-budget auto`` resolve to numbers at load)."""
    plan = getattr(getattr(runner, "scorer", None), "batching", None)
    return plan.as_dict() if plan is not None and hasattr(plan, "as_dict") else None
