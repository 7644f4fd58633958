"""Run any task through the Runner: items -> (generations) -> requests -> records -> aggregate -> report.

Outputs in the run directory (when one is given):

- ``records.jsonl`` (+ ``records.jsonl.input.json``, the model and input check);
- ``generations.jsonl`` when the task generates first (chain-of-thought);
- ``parsed.jsonl`` when the task has the paper's sampling + parsing enumerated exactly
  (:meth:`probe.tasks.base.Task.parse_requests`): per prompt the parsed answer's
  distribution, rejected and residual mass, and the most probable generations;
- ``samples.jsonl`` with ``log_samples``: what the model saw, per request (:mod:`probe.runs.samples`);
- ``summary.json``; ``tables/*.md|csv``; the task's report files;
- ``results.csv`` (every metric, one row each), ``report.html`` and ``report.md`` (headline and warnings
  first; :mod:`probe.runs.results`), ``report/`` (the report's own tables and figures);
- ``timing.json`` (seconds per request kind) and ``provenance.json``.

Re-running into the same directory resumes; another model or changed
requests are refused, naming both models.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from probe.errors import ProbeError
from probe.runs.limit import check_limit, check_smaller_limit, resolve_limit, select_coverage  # noqa: F401
from probe.runs.limit import plain as _plain
from probe.runs.runner import RunOptions, Runner, load
from probe.tasks.base import Aggregate, Task

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Evaluation:
    """The result of one task run: ``records`` (DataFrame, ``meta`` flattened; ``model`` is the model's fingerprint,
    ``model_name`` its name), ``summary``, ``tables``, ``results`` (flat), ``output``."""

    task: str
    model: str
    records: "pd.DataFrame"
    summary: dict[str, Any]
    tables: dict[str, "pd.DataFrame"] = field(default_factory=dict)
    output: Path | None = None
    config: Any = None
    #: with ``capture``: the activations keyed by record id (probe.activations.Activations)
    activations: Any = None
    #: with ``log_samples``: one dict per request (record order), then the generations no request
    #: follows (probe.runs.samples; ``docs/samples.md``); None when off
    samples: list[dict[str, Any]] | None = None
    #: every metric as one flat table: task, model, subgroup, metric, estimator, value, ci_low, ci_high, n, n_clusters
    #: (``results.csv`` in the run directory; :mod:`probe.runs.results`)
    results: "pd.DataFrame | None" = None

    def __repr__(self) -> str:
        where = f", output={str(self.output)!r}" if self.output else ""
        return f"Evaluation(task={self.task!r}, model={self.model!r}, records={len(self.records)}{where})"


def run_task(task: Task, config: Any, model: Any, output: str | Path | None = None, limit: int | float | None = None,
             options: RunOptions | None = None, runner: Runner | None = None) -> Evaluation:
    """Run ``task`` with ``config`` on ``model`` (a name, a path or a loaded model).

    ``runner``: an already built :class:`Runner` (reuses its model and cache). ``output``: absent, empty, or
    a run directory (resumed); another process writing there, or a folder holding other files, is refused.
    """

    import contextlib

    from probe.io import OutputLock
    from probe.runs.shard import detect

    options = options or (runner.options if runner else RunOptions())
    out = Path(output) if output is not None else None
    lock: Any = contextlib.nullcontext()
    if out is not None and (runner.procs if runner else detect()).is_main:
        check_run_dir(out)
        if runner is None:
            check_models_before_load(out, model)
        # a --shard job writes only its own shard files: it holds its shard's lock, the folding run the directory's
        name = LOCK_FILE if not options.shard else f"{LOCK_FILE}.shard-{str(options.shard).replace('/', '-of-')}"
        lock = OutputLock(out / name, str(out) if not options.shard else f"{out} (shard {options.shard})")
    with lock:  # one writer per run directory (or per shard of it), held for the whole run
        return _run_task(task, config, model, out, limit, options, runner)


#: the lock file of a run directory while a run writes there (probe.io.OutputLock)
LOCK_FILE = ".probe.lock"
#: files that mark a directory as (part of) a run: a re-run resumes there
RUN_FILES = ("records.jsonl", "records.jsonl.input.json", "generations.jsonl")


def check_models_before_load(out: Path, model: Any) -> None:
    """Refuse, before ``model`` (a name or path) loads, a run directory whose records come from other weights
    (:func:`probe.runs.resume.check_model_before_load`); the full fingerprint is checked after loading."""
    from probe.runs.resume import check_model_before_load

    for name in ("records.jsonl", "generations.jsonl"):
        check_model_before_load(out / name, model, where=out)


def check_run_dir(out: Path) -> None:
    """``out`` may take a run: absent, empty, or already a run's directory (a resume). A file, or a folder
    holding other files (whose ``report.md``, ``summary.json`` or ``tables/`` a run would overwrite), is refused."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ProbeError(f"{out} exists and is not a directory; give a run directory as the output")
    names = {p.name for p in out.iterdir() if not p.name.startswith(LOCK_FILE)}
    if names and not names & set(RUN_FILES) and not any(n.startswith(("records.jsonl.", "generations.jsonl."))
                                                         for n in names):
        shown = ", ".join(sorted(names)[:3]) + (", ..." if len(names) > 3 else "")
        raise ProbeError(f"{out} holds files but no probe run ({shown}); a run there would overwrite its "
                         "report.md, summary.json and tables/. Choose a new output directory, or empty this one")


def _run_task(task: Task, config: Any, model: Any, out: Path | None, limit: int | float | None, options: RunOptions,
              runner: Runner | None) -> Evaluation:
    from probe.io import write_json_atomic
    from probe.runs.provenance import provenance
    from probe.runs.record import records_to_frame
    from probe.runs.results import result_rows, results_frame, write_run_report

    t_start = time.perf_counter()
    pool = task.items(config)
    asked, limit = limit, resolve_limit(task, config, limit, pool)
    items = task.select(config, pool, limit)
    if not items:
        raise ProbeError(f"task {task.name!r}: no items selected (check the data, the limit and the config)")
    coverage = select_coverage(task, config, pool, items, limit)
    if out is not None and not options.shard:
        check_smaller_limit(task, config, limit, out, pool, items)  # before the model loads
    own = runner is None
    runner = runner or Runner(load(model, options), options)
    try:
        lm = runner.lm
        gen_requests = task.generation_requests(config, items, lm.tokenizer)
        requests = None if gen_requests else task.requests(config, items, lm.tokenizer, None)
        if runner.procs.is_main:
            for line in _plan(task, config, items, gen_requests, requests, runner, out):
                print(line, file=sys.stderr)
        generations = None
        if gen_requests:
            if runner.procs.distributed and out is None:
                raise ProbeError("several processes need an output directory to share generations")
            generations = runner.generate(gen_requests, out / "generations.jsonl" if out else None, task=task.name)
            requests = task.requests(config, items, lm.tokenizer, generations)
        if not requests:
            raise ProbeError(f"task {task.name!r}: the selected items gave no requests")
        if out is not None and runner.procs.is_main and runner.shard is None:
            _check_no_extra_records(out / "records.jsonl", requests)
        if gen_requests and runner.procs.is_main:
            print(f"{task.name}: {len(requests)} request(s) to score after the generations", file=sys.stderr)
        # --shard jobs write only their own files: the run that folds the shards logs every sample
        log = (_sample_log(runner, task.name, out, gen_requests, generations)
               if options.log_samples and runner.shard is None else None)
        try:
            records = runner.score(requests, out / "records.jsonl" if out else None, task=task.name,
                                   sampling=task.sampling(config), samples=log)
            samples = None
            if log is not None and runner.procs.is_main:
                ids = {r.id for r in requests}
                alone = [g for g in gen_requests if g.id not in ids]  # generations no scored request follows
                log.write_generations(alone, generations or {})
                samples = log.samples([r.id for r in requests] + [g.id for g in alone])
        finally:
            if log is not None:
                log.close()
        parse_requests = task.parse_requests(config, items, lm.tokenizer)
        parsed = runner.parse(parse_requests, out / "parsed.jsonl" if out else None, task=task.name) \
            if parse_requests else {}
        if parsed and options.log_samples and runner.procs.is_main and runner.shard is None:
            plog = _sample_log(runner, task.name, out, gen_requests, generations)
            try:
                plog.write_parsed(parse_requests, parsed)
                if samples is not None:
                    samples += plog.samples([f"{r.id}#parsed" for r in parse_requests])
            finally:
                plog.close()
        agreement = _greedy_agreement(runner, requests, records, out, task.name, options.agreement_tokens)
        if runner.shard is not None:  # every shard set is complete: one plain run folds them and reports
            from probe.runs.shard_set import ShardDone

            raise ShardDone(f"every shard of {out} has finished; run the same command without --shard to fold "
                            "them in and write the summary (nothing is scored again)")
        if not runner.procs.is_main:  # rank 0 merged the shards; it alone aggregates and writes
            return Evaluation(task.name, str(getattr(lm, "name", "")), records_to_frame([]), {}, {}, out, config)
        acts = runner.activations
        if out is not None and runner.capture_spec() is not None:
            from probe.activations import load as load_activations

            acts = load_activations(out / "activations", keys=runner.capture_spec().keys)
            if acts.ids != [r.id for r in records]:  # same requests, same order: the store holds extra only
                index = {i: k for k, i in enumerate(acts.ids)}
                rows = [index[r.id] for r in records]
                acts = type(acts)([acts.ids[k] for k in rows], {k: v[rows] for k, v in acts.arrays.items()},
                                  [acts.records[k] for k in rows], acts.manifest)
        frame = records_to_frame(records)
        if parsed:  # each record's parsed-answer distribution under the paper's sampling, when the task has one
            frame["parsed"] = [parsed.get(str(i)) for i in frame["id"]]
        result: Aggregate = task.aggregate(config, frame, items)
        summary = {"task": task.name, "model": str(getattr(lm, "name", "")), "model_fingerprint": runner.model_id,
                   "n_items": len(items), "n_records": len(records), **result.summary,
                   **({"coverage": coverage} if coverage else {}),
                   **({"greedy_agreement": agreement} if agreement else {})}
        if out is not None:
            write_json_atomic(out / "summary.json", summary)
            # timing first: a task's report may project the full benchmark's time from it
            work = runner.work()  # every process's share: the ranks of a launch, the --shard jobs folded in
            write_json_atomic(out / "timing.json", _timing(out / "timing.json", work, time.perf_counter() - t_start))
            for name in ("report.md", "report.html"):  # the task's own (rewritten) or the report's below
                (out / name).unlink(missing_ok=True)
            task.report(config, Aggregate(summary, result.tables), out)
            write_json_atomic(out / "provenance.json", provenance(
                lm, config={"task": task.name, "limit": limit, "task_config": _plain(config),
                            **({"limit_fraction": asked} if isinstance(asked, float) else {}),
                            "run_options": _plain(options)},
                data_files=task.data_files(config), world_size=runner.procs.world_size,
                model_fingerprint=runner.model_id,  # what the records' ``model`` field holds
                scoring=_batching(runner), engine=work["engine"]))
            results = write_run_report(task, config, out, summary)
            note = runner.cache_note()
            print(f"{task.name}: {len(records)} record(s) in {out / 'records.jsonl'}{note}", file=sys.stderr)
        else:
            results = results_frame(result_rows(task, config, summary))
        if len(frame) and "model_name" not in frame:  # records name the model by fingerprint; add its name
            frame.insert(frame.columns.get_loc("model") + 1 if "model" in frame else 0, "model_name", summary["model"])
        return Evaluation(task.name, str(getattr(lm, "name", "")), frame, summary, result.tables, out, config, acts,
                          samples, results)
    finally:
        if own:
            runner.close()


def _check_no_extra_records(path: Path, requests: Sequence[Any]) -> None:
    """A resumed run directory holds records of these requests only: records of items this run does not select
    (an earlier run with a larger ``limit`` or a wider config) would leave a summary of a subset beside them."""
    from probe.io import read_records

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
          requests: Sequence[Any] | None, runner: Runner, out: Path | None) -> list[str]:
    """The plan printed before any work (:mod:`probe.runs.plan`): the generations still to make and how to
    skip them, the requests and tokens still to score, and an estimated time from a short calibration."""
    from probe.runs import plan
    from probe.scoring.memory import generation_batch_size

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
        parse = task.parse_requests(config, items, tok)
    except Exception:  # noqa: BLE001 - the run itself builds them again and says what is wrong
        parse = []
    parse_done = _ids_in(out / "parsed.jsonl") if out is not None and parse else set()
    parse_left = [r for r in parse if r.id not in parse_done]
    rates = None
    if n_left or gen_left or parse_left:
        rates = getattr(runner, "plan_rates", None)
        if rates is None:
            rates = plan.calibrate(runner.lm, getattr(runner.scorer, "batch_size", 1) or 1)
            runner.plan_rates = rates  # one calibration per loaded model
    tokens = plan.scoring_tokens(runner.scorer.encode, requests or [], done, chain)
    rows = generation_batch_size(runner.scorer.batching) if gen_left else 1
    prompt_tokens = lambda r: len(runner.scorer.encoder.ids(r.prompt, False))  # noqa: E731
    gen_seconds = plan.generation_seconds(rates, gen_left, prompt_tokens, rows) if rates and gen_left else 0.0
    parse_s = 0.0
    if rates and parse_left:
        per_node = plan.parse_node_seconds(runner.lm, parse_left, runner.scorer.batch_size)
        parse_s = plan.parse_seconds(rates, parse_left, prompt_tokens, per_node)
    return plan.plan_lines(task.name, len(items), len(requests or []), n_left, tokens, rates,
                           gen_total=len(gen_requests), gen_left=gen_left, gen_seconds=gen_seconds,
                           note=task.generation_note(config) if gen_requests else "",
                           exact=exact or not gen_requests, parse_total=len(parse), parse_left=parse_left,
                           parse_s=parse_s)


def _ids_in(path: Path) -> set[str]:
    """The record ids in a JSONL output (none when it is absent or unreadable)."""
    from probe.io import read_records

    if not path.is_file():
        return set()
    try:
        return {str(r.get("id")) for r in read_records(path)[0]}
    except (OSError, ValueError, ProbeError):
        return set()


def _sample_log(runner: Runner, task: str, out: Path | None, gen_requests: Sequence[Any],
                generations: Mapping[str, str] | None) -> Any:
    """The run's :class:`probe.runs.samples.SampleLog` (``OUT/samples.jsonl``; in memory without ``out``)."""
    from probe.runs.samples import SAMPLES_FILE, SampleLog

    chains = {g.id: (g, generations[g.id]) for g in gen_requests if generations and g.id in generations}
    return SampleLog(out / SAMPLES_FILE if out is not None else None, task, runner.scorer.encoder, chains)


def _greedy_agreement(runner: Runner, requests: Sequence[Any], records: Sequence[Any], out: Path | None,
                      task: str, max_new_tokens: int) -> dict[str, Any] | None:
    """Greedy-decode after every label request's prompt (``agreement.jsonl``, resumed like records) and
    compare the label written with the score argmax (:mod:`probe.runs.agreement`); None when off."""
    if not max_new_tokens:
        return None
    from probe.runs.agreement import agreement_rows, agreement_summary
    from probe.scoring.generate import GenerationRequest

    labels = [r for r in requests if r.kind == "label"]
    if not labels:
        return {"max_new_tokens": max_new_tokens, "note": "no label requests in this task"}
    gen = [GenerationRequest(r.id, r.prompt, max_new_tokens, meta={"kind": "agreement"}) for r in labels]
    texts = runner.generate(gen, out / "agreement.jsonl" if out else None, task=task)
    return {"max_new_tokens": max_new_tokens, **agreement_summary(agreement_rows(records, texts))}


def _timing(path: Path, work: dict[str, Any], wall: float) -> dict[str, Any]:
    """This invocation's seconds per request kind and engine counts (summed over every process that worked
    for it: launcher ranks, folded ``--shard`` jobs), and the sums over every invocation that finished.

    ``engine``: forward passes, ``tokens_computed`` (what ran, prefixes shared) and ``tokens_raw`` (every
    scored sequence on its own); ``computed_ratio`` = computed / raw, the factor a GPU-time projection
    from raw token counts needs. ``processes``: each process's own share, when several worked."""
    import json

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
