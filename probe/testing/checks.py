"""The contract every task passes, built-in or not: its checks, run by :func:`probe.testing.check_task` and
:func:`probe.testing.parametrize_with_checks` (:mod:`probe.testing.contract`).

Each check is a short function over one :class:`_Case` (the task, its quick config and a model) and fails with
a :class:`TaskCheckError` saying what is wrong. What the checks share (the config, the items, the requests, a
run) is made once, on first use, so each check stands alone: a check whose input failed to build fails naming
it, and every other check still runs. The checks:

- ``declaration``: ``name`` (lower case, digits, ``_``), ``description``, ``Config`` (a frozen
  :class:`~probe.tasks.base.TaskConfig` dataclass, the type ``Task[ConfigT, ItemT]`` names), the four facets
  and their declarations (``selection.names``, ``selection.unit_name``, ``reporting.metric_notes``);
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
- ``hooks``: ``reporting.results`` rows, ``reporting.layout``, ``paper.check``, ``reporting.warnings``,
  ``analyses.representation_labels``, ``analyses.capture_item`` answer with the types the contract names.

A task whose data is not on this machine (``data_files`` names a missing file) skips the checks that need its
items (:class:`unittest.SkipTest`; pytest reports them as skipped).
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
import unittest
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, Union

from probe.errors import ProbeError
from probe.runs.limit import plain
from probe.runs.results import COLUMNS
from probe.runs.task_run import run_task
from probe.tasks.base import FRAME_COLUMNS, Task, TaskConfig
from probe.tasks.facets import Analyses, Paper, Reporting, Selection
from probe.tasks.paper_check import PaperCheck
from probe.tasks.representation import RepresentationLabels

__all__ = ["CHECKS", "TaskCheckError"]

#: what ``expected_failures`` may be: check name -> reason, or a function of the task giving that map
ExpectedFailures = Union[Mapping[str, str], Callable[[Any], Mapping[str, str]], None]


class TaskCheckError(AssertionError):
    """A task broke its contract: the message names the task, the check and what is wrong."""


class _Case:
    """One task under check: its quick config (:meth:`~probe.tasks.base.Task.check_case`), the model, the run
    directory, and what the checks share, each made once on first use (:meth:`shared`)."""

    def __init__(self, task: Task, values: Mapping[str, Any], limit: int | None, model: Any, output: Path,
                 options: Any) -> None:
        self.task, self.values, self.limit, self.model = task, values, limit, model
        self.output, self.options = output, options
        self._made: dict[str, tuple[bool, Any]] = {}

    def shared(self, what: str, make: Callable[[], Any]) -> Any:
        """``make()`` once: its value, or its error again (a check that needs it fails naming ``what``)."""
        if what not in self._made:
            try:
                self._made[what] = (True, make())
            except unittest.SkipTest as exc:
                self._made[what] = (False, exc)
            except Exception as exc:
                error = TaskCheckError(f"{what}: {_say(exc)}")
                error.__cause__ = exc  # the traceback of what failed, for whoever debugs it
                self._made[what] = (False, error)
        ok, value = self._made[what]
        if ok:
            return value
        raise value

    @property
    def config(self) -> Any:
        return self.shared("the quick config", lambda: self.task.make_config(dict(self.values)))

    @property
    def pool(self) -> Sequence[Any]:
        return self.shared("items()", self._items)

    @property
    def selected(self) -> Sequence[Any]:
        return self.shared("select()", lambda: self.task.selection.select(self.config, self.pool, self.limit))

    @property
    def evaluation(self) -> Any:
        return self.shared("the run", self._run)

    def _items(self) -> Sequence[Any]:
        missing = [str(p) for p in self.task.data_files(self.config) if not Path(p).exists()]
        if missing:
            raise unittest.SkipTest(f"{self.task.name}: its data is not on this machine ({', '.join(missing[:3])}); "
                                    "`probe data fetch` gets it")
        return self.task.items(self.config)

    def _run(self) -> Any:
        self.pool  # noqa: B018 - skips here when the data is not on this machine
        return run_task(self.task, self.config, self.model, output=self.output / "run", limit=self.limit,
                        options=self.options)


def _say(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, TaskCheckError) else f"{type(exc).__name__}: {exc}"


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
    """What the registry, ``probe tasks`` and ``--set`` read from the task class, and its facets."""
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
    for facet, kind in (("selection", Selection), ("paper", Paper), ("reporting", Reporting),
                        ("analyses", Analyses)):
        _expect(isinstance(getattr(task, facet), kind), f"{facet} must be a {kind.__name__} (probe.tasks.facets)")
    names = task.selection.names
    _expect(isinstance(names, tuple) and all(isinstance(s, str) for s in names),
            f"selection.names must be a tuple of names (got {names!r})")
    _expect(isinstance(task.selection.unit_name, str) and task.selection.unit_name, "selection.unit_name is empty")
    notes = task.reporting.metric_notes
    _expect(isinstance(notes, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in notes.items()),
            "reporting.metric_notes must map metric names to texts")


def check_config(case: _Case) -> None:
    """Configs from mappings: the default, the quick one, an unknown key refused by name; frozen, JSON-plain."""

    task = case.task
    default = task.make_config({})
    _expect(isinstance(default, task.Config), f"make_config({{}}) gave {type(default).__name__}, not {task.Config}")
    try:
        task.make_config({"no_such_key_for_check": 1})
    except ProbeError as exc:
        _expect("no_such_key_for_check" in str(exc), f"the error for an unknown key does not name it: {exc}")
    else:
        raise TaskCheckError("make_config accepted an unknown key")
    config = case.config
    name = dataclasses.fields(config)[0].name if dataclasses.fields(config) else None
    if name is not None:
        try:
            setattr(config, name, getattr(config, name))
        except dataclasses.FrozenInstanceError:
            pass
        else:
            raise TaskCheckError(f"a {task.Config.__name__} can be changed after it is made (not frozen)")
    _json(plain(config), "the config (as provenance.json records it)")


def check_selection(case: _Case) -> None:
    """Items, their strata and units, and the ``--limit`` selection."""
    sel, config, pool = case.task.selection, case.config, case.pool
    _expect(len(pool) > 0, "items() gave no items")
    strata = sel.strata(config, pool)
    _expect(len(strata) == len(pool), f"selection.strata() gave {len(strata)} entries for {len(pool)} items")
    _expect(all(isinstance(s, tuple) and len(s) == len(sel.names) for s in strata),
            f"each selection.strata() entry must be a tuple of {len(sel.names)} value(s) (selection.names)")
    units = sel.units(config, pool)
    _expect(units is None or len(units) == len(pool), "selection.units() must give one key per item (or None)")
    selected = case.selected
    _expect(len(selected) > 0, f"selection.select(limit={case.limit}) selected nothing")
    _expect(list(sel.select(config, pool, case.limit)) == list(selected), "selection.select() is not deterministic")
    _json(sel.coverage(config, sel.select(config, pool, None), selected, case.limit), "selection.coverage()")


def check_requests(case: _Case) -> None:
    """Requests of every stage: unique ids, known kinds, JSON meta, the same when asked twice."""
    task, config, items, tok = case.task, case.config, case.selected, case.model.tokenizer
    gens = task.paper.generation_requests(config, items, tok)
    _unique([g.id for g in gens], "paper.generation_requests()")
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
    parse = task.paper.parse_requests(config, items, tok)
    _unique([p.id for p in parse], "paper.parse_requests()")
    ids = {r.id for r in reqs}
    _expect(all(p.id in ids for p in parse), "a parse request's id must be a scoring request's id")
    _expect(isinstance(task.paper.sampling(config), tuple), "paper.sampling() must return a tuple of specs")


def check_run(case: _Case) -> None:
    """A run through the Runner into a run directory: records, frame, summary, results, files, report."""

    out, e = case.output / "run", case.evaluation
    _expect(e.pending is None, f"the run did not finish: {e.pending}")
    lines = (out / "records.jsonl").read_text(encoding="utf-8").splitlines()
    _expect(len(lines) == len(e.records) == e.summary.get("n_records"),
            f"{len(lines)} record line(s), {len(e.records)} frame row(s), n_records {e.summary.get('n_records')}")
    missing = [c for c in FRAME_COLUMNS if c not in e.records.columns]
    _expect(not missing, f"the records frame lacks the documented column(s) {missing}")
    _expect(e.summary.get("task") == case.task.name, "summary['task'] is not the task's name")
    _json(e.summary, "the summary")
    _expect(list(e.results.columns) == COLUMNS and len(e.results) > 0,
            "reporting.results() gave no row (every report opens with the task's headline metric)")
    ci = e.results.dropna(subset=["ci_low", "ci_high"])  # an interval says how many units it resampled
    _expect(((ci.n_clusters >= 1) & (ci.n_clusters <= ci.n)).all(),
            "a results row with an interval needs 1 <= n_clusters <= n (the units its bootstrap resampled)")
    for name in ("summary.json", "provenance.json", "timing.json", "results.csv", "report.md", "report.html"):
        _expect((out / name).is_file(), f"the run wrote no {name}")
    _expect("Headline" in (out / "report.md").read_text(encoding="utf-8"), "report.md does not open with a headline")
    _expect(all(isinstance(k, str) for k in e.tables), "tables must be named by strings")


def check_resume(case: _Case) -> None:
    """The same run again: nothing scored, not a record byte changed, the same summary."""

    first = case.evaluation
    out = case.output / "run"
    before = (out / "records.jsonl").read_bytes()
    again = run_task(case.task, case.config, case.model, output=out, limit=case.limit, options=case.options)
    _expect((out / "records.jsonl").read_bytes() == before, "a resumed run changed records.jsonl")
    _expect(_json(again.summary, "summary") == _json(first.summary, "summary"), "a resumed run gave another summary")


def check_hooks(case: _Case) -> None:
    """What the task hands the report, the sampling check, the representations study and probe activations."""

    task, summary = case.task, case.evaluation.summary
    keys = {"subgroup", "metric", "estimator", "value", "ci_low", "ci_high", "n", "headline", "n_clusters"}
    rows = task.reporting.results(case.config, summary)
    _expect(all(keys <= set(r) for r in rows), f"each reporting.results() row needs the keys {sorted(keys)}")
    _expect(any(r["headline"] for r in rows), "no reporting.results() row is marked as the headline")
    layout = task.reporting.layout()
    _expect(isinstance(getattr(layout, "title", None), str) and layout.title, "reporting.layout() has no title")
    check = task.paper.check()
    _expect(check is None or isinstance(check, PaperCheck), "paper.check() must give a PaperCheck or None")
    warnings = task.reporting.warnings(summary)
    _expect(isinstance(warnings, list) and all(isinstance(w, str) for w in warnings),
            "reporting.warnings() must give a list of texts")
    labels = task.analyses.representation_labels()
    _expect(labels is None or isinstance(labels, RepresentationLabels),
            "analyses.representation_labels() must give RepresentationLabels or None")
    try:
        item = task.analyses.capture_item({"id": "not-a-task-line", "prompt": "Hello"}, case.model.tokenizer)
    except ValueError:
        item = None  # a bad line of the task's own format: said, not crashed on
    _expect(item is None, "analyses.capture_item() took a plain prompt line for one of its own items")


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

    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(base) is Task:
                arg = typing.get_args(base)[0]
                return arg if isinstance(arg, type) else None
    return None


def _check_name(check: Callable[[_Case], None]) -> str:
    return check.__name__.removeprefix("check_")


def _expected(task: Any, expected_failures: ExpectedFailures) -> dict[str, str]:
    """Check name -> reason for ``task``; a name that is no check is an error (a typo would hide nothing)."""
    found = dict((expected_failures(task) if callable(expected_failures) else expected_failures) or {})
    unknown = sorted(set(found) - {_check_name(c) for c in CHECKS})
    if unknown:
        raise ValueError(f"expected_failures names no check: {', '.join(unknown)} (the checks: "
                         f"{', '.join(_check_name(c) for c in CHECKS)})")
    return found
