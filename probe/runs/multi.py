"""Several tasks on several models in one call, finished by the combined report.

:func:`run_many` validates every task name and option before any model loads,
loads each model once (one :class:`~probe.runs.runner.Runner` per model, every
task through it), writes one run directory per task x model and, with an
output directory and more than one run, the combined report there
(``report.html``, ``report.md``, ``results.csv``; :func:`probe.runs.results.combined_report`).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence


import pandas as pd

from probe.errors import ProbeError
from probe.io import check_lock_free, check_locks, slug as io_slug
from probe.models.loader import check_model_resolvable
from probe.progress import stage
from probe.runs.results import combined_report, results_frame
from probe.runs.runner import RunOptions, Runner, load
from probe.runs.shard import detect
from probe.runs.task_run import Evaluation, run_task
from probe.runs.task_run import (check_data_before_load, check_models_before_load, check_run_dir, check_smaller_limit,
    run_lock)
from probe.tasks import get


@dataclasses.dataclass
class Evaluations:
    """The runs of :func:`run_many`: ``runs`` (one :class:`Evaluation` each, model-major order), ``results``
    (every run's flat results, one DataFrame) and ``report`` (the combined report's directory, if any)."""

    runs: list[Evaluation]
    results: Any = None
    report: Path | None = None

    def __iter__(self):
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    def __getitem__(self, k: int) -> Evaluation:
        return self.runs[k]


def slug(name: str) -> str:
    """A model name or path as a directory name (a local path: its last part; :func:`probe.io.slug`)."""

    return io_slug(Path(name).name if "/" in name and Path(name).exists() else name)


def task_configs(task_names: Sequence[str], values: Mapping[str, Any], source: str = "options") -> dict[str, Any]:
    """Each task's config from one mapping of values: a key goes to the tasks that have it; a key no task
    has is an error (with a did-you-mean)."""

    tasks = [get(n) for n in task_names]
    if len(tasks) == 1:
        return {tasks[0].name: tasks[0].make_config(values, source=source)}
    known = {t.name: {f.name for f in dataclasses.fields(t.Config)} for t in tasks}
    nowhere = [k for k in values if not any(k in ks for ks in known.values())]
    if nowhere:
        tasks[0].make_config({k: values[k] for k in nowhere}, source=source)  # raises, naming the key
    return {t.name: t.make_config({k: v for k, v in values.items() if k in known[t.name]}, source=source)
            for t in tasks}


def run_many(tasks: Sequence[str], models: Sequence[Any], *, limit: int | float | None = None,
             output: str | Path | None = None, options: RunOptions | None = None,
             configs: Mapping[str, Any] | None = None, report: bool = True,
             on_run: Any = None) -> Evaluations:
    """Every task on every model. ``output``: one directory per run (``OUTPUT`` for one run,
    ``OUTPUT/<model>`` for one task on several models, ``OUTPUT/<task>/<model>`` otherwise) and the
    combined report in ``OUTPUT`` (``OUTPUT/report`` when a single run has its own files there)."""

    if not tasks or not models:
        raise ProbeError("give at least one task and one model")
    configs = dict(configs or task_configs(tasks, {}))
    task_objs = [get(t) for t in tasks]
    options = options or RunOptions(progress=False)
    dirs = _RunDirs(Path(output) if output is not None else None, len(tasks), len(models))
    _check_before_load(task_objs, models, dirs, configs, limit, options)
    runs: list[Evaluation] = []
    sharded = False
    for model in models:
        with stage(f"probe: loading {_model_name(model)}", announce_after=2.0):
            lm = load(model, options)
        runner = Runner(lm, options)
        try:
            for task in task_objs:
                e = run_task(task, configs[task.name], model, output=dirs.of(task, _model_name(model)), limit=limit,
                             options=options, runner=runner)
                if e.pending:  # --shard: this run's share is written; the next run's follows
                    print(f"probe: {e.pending}", file=sys.stderr)
                    sharded = True
                    continue
                runs.append(e)
                if on_run is not None:
                    on_run(e)
        finally:
            runner.close()
    return _combined(runs, dirs.base if report and not sharded else None)


@dataclasses.dataclass(frozen=True)
class _RunDirs:
    """Where each run of :func:`run_many` writes: ``base`` for one run, ``base/<model>`` for one task on several
    models, ``base/<task>/<model>`` otherwise (None: in memory)."""

    base: Path | None
    n_tasks: int
    n_models: int

    def of(self, task: Any, model_name: str) -> Path | None:
        if self.base is None:
            return None
        if self.n_tasks == 1 and self.n_models == 1:
            return self.base
        return self.base / slug(model_name) if self.n_tasks == 1 else self.base / task.name / slug(model_name)


def _model_name(model: Any) -> str:
    return str(getattr(model, "name", model)) if not isinstance(model, (str, Path)) else str(model)


def _check_before_load(tasks: Sequence[Any], models: Sequence[Any], dirs: _RunDirs, configs: Mapping[str, Any],
                       limit: int | float | None, options: RunOptions) -> None:
    """Every model source, task data set and run directory checked before any model loads: a missing built-in or
    path, a data set not fetched, another model's run, or a smaller ``--limit`` than a finished run's fails now,
    not after the models before it ran."""

    for model in models:  # on disk, built in, or a hub id the hub (or, offline, its cache) has: not loaded yet
        if isinstance(model, (str, Path)):
            check_model_resolvable(str(model), options.allow_pickle_weights)
    for task in tasks:  # a task whose data set is missing: said before the first model loads
        check_data_before_load(task, configs[task.name])
    if dirs.base is None:
        return

    main = detect().is_main
    if len(tasks) * len(models) > 1:  # the combined report's folder: nobody's own report.md is overwritten
        from probe.runs.results import check_report_dir

        check_report_dir(dirs.base)

    for model in models:
        for task in tasks:
            out = dirs.of(task, _model_name(model))
            check_locks(out)  # a link at a lock path: refused now, not after the models before it ran
            if main:  # another process writing this run directory: said now, naming its pid
                check_lock_free(*run_lock(out, options.shard))
            check_run_dir(out, task.name)
            check_models_before_load(out, model)
            if limit is not None and not options.shard:  # a smaller --limit: refused before loading
                check_smaller_limit(task, configs[task.name], limit, out)


def _combined(runs: list[Evaluation], base: Path | None) -> Evaluations:
    """The runs, their results as one frame and, with ``base`` and several runs, the combined report there."""

    frames = [e.results for e in runs if e.results is not None and len(e.results)]
    results = pd.concat(frames, ignore_index=True) if frames else results_frame([])
    where = None
    if base is not None and len(runs) > 1:
        where = base
        print(f"report: combining {len(runs)} run(s) into {where}/report.html", file=sys.stderr)
        combined_report([e.output for e in runs if e.output is not None], where, n_boot=1000,
                        progress=lambda m: print(f"report: {m}", file=sys.stderr))
    return Evaluations(runs, results, where)
