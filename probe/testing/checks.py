"""The contract every task passes, built-in or not: :func:`check_task` (as scikit-learn's ``check_estimator``).

Each check is a short function over one :class:`_Case` (the task, its quick config and a model) and fails with
a :class:`TaskCheckError` naming the task, the check and what is wrong. In order:

- ``declaration``: ``name`` (lower case, digits, ``_``), ``description``, ``Config`` (a frozen
  :class:`~probe.tasks.base.TaskConfig` dataclass, the type ``Task[ConfigT, ItemT]`` names), ``strata_names``,
  ``unit_name``, ``metric_notes``;
- ``config``: the default config builds; an unknown key is refused naming it; configs are frozen and
  JSON-plain (provenance records them);
- ``selection``: ``items`` is not empty; ``strata`` and ``units`` give one entry per item; ``select`` is
  deterministic and not empty; ``coverage`` is JSON;
- ``requests``: generation, scoring and parse requests have unique ids, known kinds, JSON ``meta`` and are the
  same when asked twice (a resumed run's input check compares them); parse ids are request ids;
- ``run``: the task runs through the Runner into a run directory: a record per request, the documented frame
  columns (:data:`~probe.tasks.base.FRAME_COLUMNS`), a JSON summary naming the task, the flat results, the
  files every run writes and a report that opens with its headline;
- ``resume``: a second run into the same directory scores nothing and changes no record byte;
- ``hooks``: ``results`` rows, ``report_layout``, ``paper_check``, ``report_warnings``,
  ``representation_labels``, ``capture_item`` answer with the types the contract names.

A task whose data is not on this machine (``data_files`` names a missing file) is skipped with
:class:`unittest.SkipTest` (pytest reports it as skipped).
"""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
import unittest
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from probe.errors import ProbeError
from probe.tasks.base import FRAME_COLUMNS, Task, TaskConfig

__all__ = ["CHECKS", "TaskCheckError", "check_task"]


class TaskCheckError(AssertionError):
    """A task broke its contract: the message names the task, the check and what is wrong."""


@dataclass
class _Case:
    """One task under check: its quick config (:meth:`~probe.tasks.base.Task.check_case`), the model and what
    the checks found so far."""

    task: Task
    values: Mapping[str, Any]
    limit: int | None
    model: Any
    output: Path
    options: Any
    config: Any = None
    pool: Sequence[Any] = ()
    selected: Sequence[Any] = ()
    requests: list = field(default_factory=list)
    evaluation: Any = None


def _expect(ok: Any, what: str) -> None:
    if not ok:
        raise TaskCheckError(what)


def _json(obj: Any, what: str) -> str:
    try:
        return json.dumps(obj, sort_keys=True, default=str)
    except (TypeError, ValueError) as exc:
        raise TaskCheckError(f"{what} is not JSON ({exc})") from None


# --------------------------------------------------------------------------- the checks


def check_declaration(case: _Case) -> None:
    """What the registry, ``probe tasks`` and ``--set`` read from the task class."""
    task = case.task
    _expect(isinstance(task.name, str) and re.fullmatch(r"[a-z][a-z0-9_]*", task.name),
            f"name must be lower case letters, digits and _ (got {task.name!r})")
    _expect(isinstance(task.description, str) and task.description.strip(), "description is empty")
    cfg = task.Config
    _expect(isinstance(cfg, type) and issubclass(cfg, TaskConfig) and dataclasses.is_dataclass(cfg),
            f"Config must be a TaskConfig dataclass (got {cfg!r})")
    _expect(cfg.__dataclass_params__.frozen, f"Config {cfg.__name__} must be frozen (@dataclass(frozen=True))")
    declared = _config_type(type(task))
    _expect(declared is None or issubclass(cfg, declared),
            f"Config {cfg.__name__} is not the config type the class names (Task[{declared}, ...])")
    _expect(isinstance(task.strata_names, tuple) and all(isinstance(s, str) for s in task.strata_names),
            f"strata_names must be a tuple of names (got {task.strata_names!r})")
    _expect(isinstance(task.unit_name, str) and task.unit_name, "unit_name is empty")
    _expect(isinstance(task.metric_notes, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in task.metric_notes.items()),
            "metric_notes must map metric names to texts")


def check_config(case: _Case) -> None:
    """Configs from mappings: the default, the quick one, an unknown key refused by name; frozen, JSON-plain."""
    from probe.runs.limit import plain

    task = case.task
    default = task.make_config({})
    _expect(isinstance(default, task.Config), f"make_config({{}}) gave {type(default).__name__}, not {task.Config}")
    try:
        task.make_config({"no_such_key_for_check": 1})
    except ProbeError as exc:
        _expect("no_such_key_for_check" in str(exc), f"the error for an unknown key does not name it: {exc}")
    else:
        raise TaskCheckError("make_config accepted an unknown key")
    case.config = task.make_config(dict(case.values))
    name = dataclasses.fields(case.config)[0].name if dataclasses.fields(case.config) else None
    if name is not None:
        try:
            setattr(case.config, name, getattr(case.config, name))
        except dataclasses.FrozenInstanceError:
            pass
        else:
            raise TaskCheckError(f"a {task.Config.__name__} can be changed after it is made (not frozen)")
    _json(plain(case.config), "the config (as provenance.json records it)")
    missing = [str(p) for p in task.data_files(case.config) if not Path(p).exists()]
    if missing:
        raise unittest.SkipTest(f"{task.name}: its data is not on this machine ({', '.join(missing[:3])}); "
                                "`probe data fetch` gets it")


def check_selection(case: _Case) -> None:
    """Items, their strata and units, and the ``--limit`` selection."""
    task, config = case.task, case.config
    case.pool = pool = task.items(config)
    _expect(len(pool) > 0, "items() gave no items")
    strata = task.strata(config, pool)
    _expect(len(strata) == len(pool), f"strata() gave {len(strata)} entries for {len(pool)} items")
    _expect(all(isinstance(s, tuple) and len(s) == len(task.strata_names) for s in strata),
            f"each strata() entry must be a tuple of {len(task.strata_names)} value(s) (strata_names)")
    units = task.units(config, pool)
    _expect(units is None or len(units) == len(pool), "units() must give one key per item (or None)")
    case.selected = task.select(config, pool, case.limit)
    _expect(len(case.selected) > 0, f"select(limit={case.limit}) selected nothing")
    _expect(list(task.select(config, pool, case.limit)) == list(case.selected), "select() is not deterministic")
    _json(task.coverage(config, task.select(config, pool, None), case.selected, case.limit), "coverage()")


def check_requests(case: _Case) -> None:
    """Requests of every stage: unique ids, known kinds, JSON meta, the same when asked twice."""
    task, config, items, tok = case.task, case.config, case.selected, case.model.tokenizer
    gens = task.generation_requests(config, items, tok)
    _unique([g.id for g in gens], "generation_requests()")
    _expect(all(g.kind == "generation" and isinstance(g.prompt, str) and g.max_new_tokens > 0 for g in gens),
            "a generation request needs a prompt and max_new_tokens > 0")
    texts = {g.id: "" for g in gens} if gens else None  # what the run's plan counts with, before the chains exist
    reqs = task.requests(config, items, tok, texts)
    _expect(len(reqs) > 0, "requests() gave no requests")
    _unique([r.id for r in reqs], "requests()")
    for r in reqs:
        _expect(r.kind in ("label", "continuation", "perplexity"), f"request {r.id!r}: unknown kind {r.kind!r}")
        _expect(isinstance(r.meta, Mapping), f"request {r.id!r}: meta must be a mapping")
        _json(dict(r.meta), f"request {r.id!r}'s meta")
    _expect(task.requests(config, items, tok, texts) == reqs,
            "requests() differ when asked twice (a resumed run would refuse its own records)")
    parse = task.parse_requests(config, items, tok)
    _unique([p.id for p in parse], "parse_requests()")
    ids = {r.id for r in reqs}
    _expect(all(p.id in ids for p in parse), "a parse request's id must be a scoring request's id")
    _expect(isinstance(task.sampling(config), tuple), "sampling() must return a tuple of specs")
    case.requests = reqs


def check_run(case: _Case) -> None:
    """A run through the Runner into a run directory: records, frame, summary, results, files, report."""
    from probe.runs.results import COLUMNS
    from probe.runs.task_run import run_task

    out = case.output / "run"
    e = run_task(case.task, case.config, case.model, output=out, limit=case.limit, options=case.options)
    _expect(e.pending is None, f"the run did not finish: {e.pending}")
    lines = (out / "records.jsonl").read_text(encoding="utf-8").splitlines()
    _expect(len(lines) == len(e.records) == e.summary.get("n_records"),
            f"{len(lines)} record line(s), {len(e.records)} frame row(s), n_records {e.summary.get('n_records')}")
    missing = [c for c in FRAME_COLUMNS if c not in e.records.columns]
    _expect(not missing, f"the records frame lacks the documented column(s) {missing}")
    _expect(e.summary.get("task") == case.task.name, "summary['task'] is not the task's name")
    _json(e.summary, "the summary")
    _expect(list(e.results.columns) == COLUMNS and len(e.results) > 0,
            "results() gave no row (every report opens with the task's headline metric)")
    ci = e.results.dropna(subset=["ci_low", "ci_high"])  # an interval says how many units it resampled
    _expect(((ci.n_clusters >= 1) & (ci.n_clusters <= ci.n)).all(),
            "a results row with an interval needs 1 <= n_clusters <= n (the units its bootstrap resampled)")
    for name in ("summary.json", "provenance.json", "timing.json", "results.csv", "report.md", "report.html"):
        _expect((out / name).is_file(), f"the run wrote no {name}")
    _expect("Headline" in (out / "report.md").read_text(encoding="utf-8"), "report.md does not open with a headline")
    _expect(all(isinstance(k, str) for k in e.tables), "tables must be named by strings")
    case.evaluation = e


def check_resume(case: _Case) -> None:
    """The same run again: nothing scored, not a record byte changed, the same summary."""
    from probe.runs.task_run import run_task

    out = case.output / "run"
    before = (out / "records.jsonl").read_bytes()
    again = run_task(case.task, case.config, case.model, output=out, limit=case.limit, options=case.options)
    _expect((out / "records.jsonl").read_bytes() == before, "a resumed run changed records.jsonl")
    _expect(_json(again.summary, "summary") == _json(case.evaluation.summary, "summary"),
            "a resumed run gave another summary")


def check_hooks(case: _Case) -> None:
    """What the task hands the report, the sampling check, the representations study and probe activations."""
    from probe.tasks.paper_check import PaperCheck
    from probe.tasks.representation import RepresentationLabels

    task, summary = case.task, case.evaluation.summary
    keys = {"subgroup", "metric", "estimator", "value", "ci_low", "ci_high", "n", "headline", "n_clusters"}
    rows = task.results(case.config, summary)
    _expect(all(keys <= set(r) for r in rows), f"each results() row needs the keys {sorted(keys)}")
    _expect(any(r["headline"] for r in rows), "no results() row is marked as the headline")
    layout = task.report_layout()
    _expect(isinstance(getattr(layout, "title", None), str) and layout.title, "report_layout() has no title")
    check = task.paper_check()
    _expect(check is None or isinstance(check, PaperCheck), "paper_check() must give a PaperCheck or None")
    warnings = task.report_warnings(summary)
    _expect(isinstance(warnings, list) and all(isinstance(w, str) for w in warnings),
            "report_warnings() must give a list of texts")
    labels = task.representation_labels()
    _expect(labels is None or isinstance(labels, RepresentationLabels),
            "representation_labels() must give RepresentationLabels or None")
    try:
        item = task.capture_item({"id": "not-a-task-line", "prompt": "Hello"}, case.model.tokenizer)
    except ValueError:
        item = None  # a bad line of the task's own format: said, not crashed on
    _expect(item is None, "capture_item() took a plain prompt line for one of its own items")


#: every check, in the order :func:`check_task` runs them
CHECKS: tuple[Callable[[_Case], None], ...] = (check_declaration, check_config, check_selection, check_requests,
                                              check_run, check_resume, check_hooks)


def _unique(ids: Sequence[str], where: str) -> None:
    seen: set[str] = set()
    for i in ids:
        _expect(isinstance(i, str), f"{where}: id {i!r} is not a string")
        _expect(i not in seen, f"{where}: duplicate id {i!r} (ids key records and resume)")
        seen.add(i)


def _config_type(cls: type) -> type | None:
    """The config type a ``Task[ConfigT, ItemT]`` subclass names (None when it names none)."""
    import typing

    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(base) is Task:
                arg = typing.get_args(base)[0]
                return arg if isinstance(arg, type) else None
    return None


# --------------------------------------------------------------------------- the entry point


def check_task(task: Task | str, model: Any = None, *, values: Mapping[str, Any] | None = None,
               limit: int | None | str = "case", output: str | Path | None = None, options: Any = None) -> list[str]:
    """Check ``task`` (a :class:`~probe.tasks.base.Task` or a registered name) against the task contract.

    ``model``: a loaded model (default: :func:`probe.testing.tiny_lm`, a tiny random Llama built offline);
    ``values`` / ``limit``: the quick run's config values and ``--limit`` (default: the task's own
    :meth:`~probe.tasks.base.Task.check_case`); ``output``: a directory for the run (default: a temporary one);
    ``options``: :class:`~probe.runs.options.RunOptions` (default: no progress bar, one thread).

    Returns the names of the checks passed; raises :class:`TaskCheckError` (an ``AssertionError``) naming the
    first check that failed, or :class:`unittest.SkipTest` when the task's data is not on this machine.

    >>> from probe.testing import check_task
    >>> check_task("demo")                                         # doctest: +SKIP
    ['declaration', 'config', 'selection', 'requests', 'run', 'resume', 'hooks']
    """
    from probe.runs.options import RunOptions
    from probe.tasks import get
    from probe.testing.tiny import tiny_lm

    task = get(task) if isinstance(task, str) else task
    quick = task.check_case()
    with tempfile.TemporaryDirectory(prefix="probe-check-") as tmp:
        case = _Case(task, dict(quick.values if values is None else values), quick.limit if limit == "case" else limit,
                     model if model is not None else tiny_lm(), Path(output) if output is not None else Path(tmp),
                     options or RunOptions(progress=False, threads=1))
        passed = []
        for check in CHECKS:
            name = check.__name__.removeprefix("check_")
            try:
                check(case)
            except unittest.SkipTest:
                raise
            except TaskCheckError as exc:
                raise TaskCheckError(f"check_task({task.name!r}) failed {name}: {exc}") from None
            except Exception as exc:  # the task's own error, named with the check it broke
                raise TaskCheckError(f"check_task({task.name!r}) failed {name}: {type(exc).__name__}: {exc}") from exc
            passed.append(name)
    return passed
