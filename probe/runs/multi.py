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

from probe.errors import ProbeError
from probe.runs.runner import RunOptions, Runner, load
from probe.runs.task_run import Evaluation, run_task


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
    from probe.io import slug as io_slug

    return io_slug(Path(name).name if "/" in name and Path(name).exists() else name)


def task_configs(task_names: Sequence[str], values: Mapping[str, Any], source: str = "options") -> dict[str, Any]:
    """Each task's config from one mapping of values: a key goes to the tasks that have it; a key no task
    has is an error (with a did-you-mean)."""
    from probe.tasks import get

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
    from probe.runs.results import combined_report, results_frame
    from probe.tasks import get

    if not tasks or not models:
        raise ProbeError("give at least one task and one model")
    configs = dict(configs or task_configs(tasks, {}))
    task_objs = [get(t) for t in tasks]
    options = options or RunOptions(progress=False)
    base = Path(output) if output is not None else None
    from probe.runs.shard_set import ShardDone

    from probe.models.loader import check_model_source

    for model in models:  # a missing built-in or path fails now, not after the models before it have run
        if isinstance(model, (str, Path)):
            check_model_source(str(model), options.allow_pickle_weights)

    def run_dir(task: Any, name: str) -> Path | None:
        if base is None:
            return None
        return base if len(tasks) == 1 and len(models) == 1 else (
            base / slug(name) if len(tasks) == 1 else base / task.name / slug(name))

    def model_name(model: Any) -> str:
        return str(getattr(model, "name", model)) if not isinstance(model, (str, Path)) else str(model)

    if base is not None:  # every run directory checked before any model loads
        from probe.runs.task_run import check_models_before_load, check_run_dir, check_smaller_limit

        for model in models:
            for task in task_objs:
                out = run_dir(task, model_name(model))
                check_run_dir(out)
                check_models_before_load(out, model)
                if limit is not None and not options.shard:  # a smaller --limit: refused before loading
                    check_smaller_limit(task, configs[task.name], limit, out)
    runs: list[Evaluation] = []
    sharded = False
    for model in models:
        name = model_name(model)
        runner = Runner(load(model, options), options)
        try:
            for task in task_objs:
                out = run_dir(task, name)
                try:
                    e = run_task(task, configs[task.name], model, output=out, limit=limit, options=options,
                                 runner=runner)
                except ShardDone as done:  # --shard: this run's share is written; the next run's follows
                    print(f"probe: {done}", file=sys.stderr)
                    sharded = True
                    continue
                runs.append(e)
                if on_run is not None:
                    on_run(e)
        finally:
            runner.close()
    import pandas as pd

    frames = [e.results for e in runs if e.results is not None and len(e.results)]
    results = pd.concat(frames, ignore_index=True) if frames else results_frame([])
    where = None
    if report and base is not None and len(runs) > 1 and not sharded:
        where = base
        print(f"report: combining {len(runs)} run(s) into {where}/report.html", file=sys.stderr)
        combined_report([e.output for e in runs if e.output is not None], where, n_boot=1000,
                        progress=lambda m: print(f"report: {m}", file=sys.stderr))
    return Evaluations(runs, results, where)
