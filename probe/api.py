"""The library API: :func:`evaluate` runs one task on one model through the Runner.

>>> import probe                                              # doctest: +SKIP
>>> e = probe.evaluate("smollm2", "demo", limit=8)             # doctest: +SKIP
>>> e.records.shape[0], sorted(e.summary)[:2]                 # doctest: +SKIP
(8, ['by_context_kind', 'by_dimension'])
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from probe.errors import ProbeError
from probe.runs.multi import run_many, task_configs
from probe.runs.runner import RUN_KEYS, RunOptions, options_from
from probe.runs.task_run import Evaluation, check_limit, run_task
from probe.tasks import get

if TYPE_CHECKING:
    from probe.runs.multi import Evaluations


__all__ = ["Evaluation", "evaluate", "split_options"]


def split_options(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split keyword options into run options (device, dtype, batch_size, ...) and task config values."""
    run = {k: v for k, v in options.items() if k in RUN_KEYS}
    task = {k: v for k, v in options.items() if k not in RUN_KEYS}
    return run, task


def evaluate(model: Any, task: "str | Sequence[str]", *, limit: int | float | None = None,
             output: str | Path | None = None, config: Any = None, **options: Any) -> "Evaluation | Evaluations":
    """Run the task called ``task`` on ``model`` and return an :class:`Evaluation`.

    Several tasks and/or models (lists, or comma-separated task names) return an
    :class:`~probe.runs.multi.Evaluations`: one Evaluation per task x model (each model loaded once),
    ``.results`` (every run's flat results in one DataFrame) and, with ``output``, the combined report
    (``OUTPUT/report.html``; runs in ``OUTPUT/<task>/<model>``).

    Parameters
    ----------
    model : a built-in name (``smollm2``), a ``.gguf`` file, a model directory,
        a hub id (offline: one in the local cache), or an already loaded model
        (:func:`probe.models.load_model`).
    task : a name from ``probe.list_tasks()``.
    limit : score ``limit`` items (an integer), or that fraction of them (a float in (0, 1), rounded up, as
        lm-evaluation-harness's ``limit``): a stratified sample over the task's strata with whole units
        (``summary["coverage"]`` says what it covered and left out).
    output : a run directory: records, summary, tables and provenance are
        written there, and a re-run resumes (another model is refused).
    config : a ready task config object (else built from ``options``).
    options : run options (``device``, ``dtype``, ``load_in_8bit``,
        ``load_in_4bit``, ``device_map``, ``batch_size``, ``token_budget``,
        ``chunk_size``, ``score_cache``, ``threads``, ``progress``, ``capture``, ``backend``)
        and task config fields (``probe tasks`` and ``docs/tasks.md`` list them).
        ``device``, ``dtype``, ``batch_size`` and ``token_budget`` default to ``"auto"``:
        the GPU when one is visible (else the CPU), bfloat16 on a GPU that supports it
        (else float32), and passes sized from the device's free memory and the model's
        shape (on the CPU 16 rows, 8192 tokens); ``docs/scoring.md``.
        ``backend="tl"`` runs the same scorer on the model wrapped by a TransformerLens 4.x
        ``TransformerBridge`` (a copy when ``model`` is already loaded), so ``capture`` hook
        names are TransformerLens' own hook points (``probe.models.tl_adapter``).
        ``capture=["blocks.5.hook_resid_post@last", ...]`` records those activations in
        the scoring passes (``docs/activations.md``): ``Evaluation.activations``, and with
        ``output`` a store in ``OUTPUT/activations`` (``probe.activations.load(output)``).
        ``log_samples=True`` logs what the model saw per request (``docs/samples.md``):
        ``Evaluation.samples``, and with ``output`` ``OUTPUT/samples.jsonl``.
        ``shard="I/N"`` (with ``output``) scores one job-array share (``docs/parallel.md``): the
        Evaluation's ``pending`` then says what was written and what to run next.

    Returns
    -------
    Evaluation with ``.records`` (DataFrame, ``meta`` flattened), ``.summary``
    (dict), ``.tables`` (name -> DataFrame), ``.results`` (one row per subgroup, metric and estimator:
    ``task, model, subgroup, metric, estimator, value, ci_low, ci_high, n, n_clusters``), ``.output`` and, with
    ``capture``, ``.activations`` (``ids`` = the record ids, ``arrays[key]`` ``[n_records, d_model]``).
    """

    limit = check_limit(limit)  # an item count, or a fraction of the items as lm-eval's
    tasks = [t.strip() for t in task.split(",") if t.strip()] if isinstance(task, str) else [str(t) for t in task]
    models = list(model) if isinstance(model, (list, tuple)) else [model]
    if len(tasks) > 1 or len(models) > 1:
        return _evaluate_many(tasks, models, limit, output, config, options)
    return _evaluate_one(tasks[0], models[0], limit, output, config, options)


def _evaluate_many(tasks: list[str], models: list[Any], limit: int | float | None, output: str | Path | None,
                   config: Any, options: Mapping[str, Any]) -> "Evaluations":
    """:func:`evaluate` for several tasks and/or models: each task's config from the keyword options."""

    if config is not None:
        raise ProbeError("config= is for one task; give several tasks their options as keywords")
    run_values, task_values = split_options(options)
    configs = task_configs(tasks, task_values, source="options")
    run_opts = options_from(run_values) if run_values else RunOptions(progress=False)
    return run_many(tasks, models, limit=limit, output=output, options=run_opts, configs=configs)


def _evaluate_one(task: str, model: Any, limit: int | float | None, output: str | Path | None, config: Any,
                  options: Mapping[str, Any]) -> Evaluation:
    """:func:`evaluate` for one task on one model: ``config``, or one built from the task's keyword options."""

    t = get(task)
    run_values, task_values = split_options(options)
    if config is None:
        config = t.make_config(task_values, source=f"task {task!r} options")
    elif task_values:
        raise ProbeError(f"pass either config or task options, not both (got {sorted(task_values)})")
    run_opts = options_from(run_values) if run_values else RunOptions(progress=False)
    return run_task(t, config, model, output=output, limit=limit, options=run_opts)
