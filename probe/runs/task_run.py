"""Run any task through the Runner: items -> (generations) -> requests -> records -> aggregate -> report.

Outputs in the run directory (when one is given):

- ``records.jsonl`` (+ ``records.jsonl.input.json``, the model and input check);
- ``generations.jsonl`` when the task generates first (chain-of-thought);
- ``parsed.jsonl`` when the task has the paper's sampling + parsing enumerated exactly
  (:meth:`probe.tasks.facets.Paper.parse_requests`): per prompt the parsed answer's
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

import contextlib
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from probe.errors import ProbeError
from probe.io import OutputLock, check_links, check_locks, check_output, check_records
from probe.progress import stage as announced
from probe.runs.limit import check_limit, check_smaller_limit, resolve_limit, select_coverage  # noqa: F401
from probe.runs.record import records_to_frame
from probe.runs.resume import check_model_before_load
from probe.runs.runner import RunOptions, Runner, load
from probe.runs.shard import detect
from probe.runs.stages import RunState, agree, aggregate, generate, parse, plan, score, select, write
from probe.tasks.base import Task

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
    #: under ``--shard I/N``: what this process wrote and what to run next (the records, summary and tables are
    #: then empty: the run that folds the shards aggregates); None for a finished run
    pending: str | None = None

    def __repr__(self) -> str:
        where = f", output={str(self.output)!r}" if self.output else ""
        if self.pending:
            where += ", pending=True"
        return f"Evaluation(task={self.task!r}, model={self.model!r}, records={len(self.records)}{where})"


def run_task(task: Task, config: Any, model: Any, output: str | Path | None = None, limit: int | float | None = None,
             options: RunOptions | None = None, runner: Runner | None = None) -> Evaluation:
    """Run ``task`` with ``config`` on ``model`` (a name, a path or a loaded model).

    ``runner``: an already built :class:`Runner` (reuses its model and cache). ``output``: absent, empty, or
    a run directory (resumed); another process writing there, or a folder holding other files, is refused.
    """

    options = options or (runner.options if runner else RunOptions())
    out = Path(output) if output is not None else None
    made = _first_missing(out)  # the folder this run creates, removed again if it ends before any record
    try:
        return _locked_run(task, config, model, out, limit, options, runner)
    except BaseException:
        if made is not None:
            _remove_empty(out, made)
        raise


def _first_missing(out: Path | None) -> Path | None:
    """The outermost folder of ``out`` (itself included) that does not exist yet; None when ``out`` exists."""
    if out is None or out.exists() or out.is_symlink():
        return None
    made = out
    while not made.parent.exists() and made.parent != made:
        made = made.parent
    return made


def _remove_empty(out: Path, made: Path) -> None:
    """The empty folders from ``out`` up to ``made`` (a run stopped before its first record leaves none)."""
    here = out
    while True:
        try:
            here.rmdir()  # only an empty folder: anything written there stays
        except OSError:
            return
        if here == made or here.parent == here:
            return
        here = here.parent


def _locked_run(task: Task, config: Any, model: Any, out: Path | None, limit: int | float | None,
                options: RunOptions, runner: Runner | None) -> Evaluation:
    """The checks before any model loads, then the run under its output's lock."""
    lock: Any = contextlib.nullcontext()
    if runner is None:
        check_data_before_load(task, config)
    if out is not None and (runner.procs if runner else detect()).is_main:
        check_locks(out)  # a link at a lock path: one line now, before the data set is built
        check_run_dir(out, task.name)
        if runner is None:
            check_models_before_load(out, model)
        # a --shard job writes only its own shard files: it holds its shard's lock, the folding run the directory's
        lock = OutputLock(*run_lock(out, options.shard))
    with lock:  # one writer per run directory (or per shard of it), held for the whole run
        return _run_task(task, config, model, out, limit, options, runner)


#: the lock file of a run directory while a run writes there (probe.io.OutputLock)
LOCK_FILE = ".probe.lock"


def run_lock(out: Path, shard: Any = None) -> tuple[Path, str]:
    """The lock file of a run directory (a ``--shard`` job's own) and what its refusal names."""
    if not shard:
        return out / LOCK_FILE, str(out)
    return out / f"{LOCK_FILE}.shard-{str(shard).replace('/', '-of-')}", f"{out} (shard {shard})"


#: files that mark a directory as (part of) a run: a re-run resumes there
RUN_FILES = ("records.jsonl", "records.jsonl.input.json", "generations.jsonl")
#: the files a run appends records to: each must hold this task's records before a run appends to it
RECORD_FILES = ("records.jsonl", "generations.jsonl", "parsed.jsonl", "agreement.jsonl", "samples.jsonl")


def check_models_before_load(out: Path, model: Any) -> None:
    """Refuse, before ``model`` (a name or path) loads, a run directory whose records come from other weights
    (:func:`probe.runs.resume.check_model_before_load`); the full fingerprint is checked after loading."""

    for name in ("records.jsonl", "generations.jsonl"):
        check_model_before_load(out / name, model, where=out)


def check_data_before_load(task: Task, config: Any) -> None:
    """Refuse, before any model loads, a task whose input files (:meth:`~probe.tasks.base.Task.data_files`) are
    not there: a data set never fetched is one line now, not an error after a minute of model loading."""
    for path in task.data_files(config):  # a data set's folder that is missing raises its own clear error
        if not Path(path).exists():
            raise ProbeError(f"task {task.name!r}: {path} not found; no model was loaded. Fetch its data set "
                             "(`probe data fetch`) or point PROBE_DATA at a copy")


def check_run_dir(out: Path, task: str | None = None) -> None:
    """``out`` may take a run (of ``task``): absent, empty, or already a run's directory (a resume). Refused, before
    any model loads and with nothing written: a file or a link at ``out``, a path under /proc, /sys or /dev, a
    folder holding other files (whose ``report.md``, ``summary.json`` or ``tables/`` a run would overwrite), a
    link anywhere inside (a run never writes through one), a records file of another task or not probe's."""

    check_output(out, folder=True)
    if not out.exists():
        return
    names = {p.name for p in out.iterdir() if not p.name.startswith(LOCK_FILE)}
    if names and not names & set(RUN_FILES) and not any(n.startswith(("records.jsonl.", "generations.jsonl."))
                                                         for n in names):
        shown = ", ".join(sorted(names)[:3]) + (", ..." if len(names) > 3 else "")
        raise ProbeError(f"{out} holds files but no probe run ({shown}); a run there would overwrite its "
                         "report.md, summary.json and tables/. Choose a new output directory, or empty this one")
    check_links(out, recursive=True)
    for name in RECORD_FILES:
        check_records(out / name, task, hint="choose a new output directory for this run")


def _run_task(task: Task, config: Any, model: Any, out: Path | None, limit: int | float | None, options: RunOptions,
              runner: Runner | None) -> Evaluation:
    """The run's story: select, plan, generate, score, parse, agree, aggregate, write (:mod:`probe.runs.stages`).

    A stage that wrote a ``--shard I/N`` share of an unfinished set returns a
    :class:`~probe.runs.sharding.ShardPending`: the run ends there, returning an
    :class:`Evaluation` whose ``pending`` says what to run next."""
    t_start = time.perf_counter()
    run = RunState(task, config, out, options, select(task, config, limit, out, options))
    with _runner(runner, model, options) as run.runner:
        for stage in (plan, generate, score, parse, agree):
            pending = stage(run)
            if pending is not None:
                return _evaluation(run, pending=str(pending))
        if run.runner.shard is not None:  # every shard set is complete: one plain run folds them and reports
            return _evaluation(run, pending=f"every shard of {out} has finished; run the same command without "
                                            "--shard to fold them in and write the summary (nothing is scored again)")
        if not run.runner.procs.is_main:  # rank 0 merged the shards; it alone aggregates and writes
            return _evaluation(run)
        with announced(f"{task.name}: computing the summary and writing the report", announce_after=3.0):
            result, summary = aggregate(run)
            results = write(run, result, summary, t_start)
        return Evaluation(task.name, summary["model"], run.frame, summary, result.tables, out, config, run.acts,
                          run.samples, results)


def _evaluation(run: RunState, pending: str | None = None) -> Evaluation:
    """The Evaluation of a process that does not aggregate: a ``--shard`` job, or a launcher's rank above 0."""

    return Evaluation(run.task.name, str(getattr(run.runner.lm, "name", "")), records_to_frame([]), {}, {}, run.out,
                      run.config, pending=pending)


@contextmanager
def _runner(runner: Runner | None, model: Any, options: RunOptions) -> Iterator[Runner]:
    """``runner``, or one built on ``model`` for this run (and closed after it)."""
    if runner is not None:
        yield runner
        return
    own = Runner(load(model, options), options)
    try:
        yield own
    finally:
        own.close()
