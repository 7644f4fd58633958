"""Analyses on task runs: steering dose-response, probes, logit lens and patching from a run directory.

Input: a run directory written by ``probe run TASK ... [--capture ...]``
(``records.jsonl``, ``provenance.json``, ``activations/``), or a task, a
config and a model (:func:`run_for`: the task is scored first, through the
Runner). What is missing is computed through the Runner / Scorer, the one
forward path: activations a run did not capture are captured by re-scoring the
run's requests (in memory); steering re-scores them under a forward hook.
The task says its cluster unit, its pairs and its headline metrics
(:meth:`probe.tasks.facets.Analyses.units`, ``analyses.patch_pairs``,
``reporting.headline_metrics``); the computations are in :mod:`probe.analysis.tasks`.

This front lives in ``probe.studies`` because it needs the Runner and the task
registry, which sit above ``probe.analysis`` in the import layers.

>>> from probe.studies import analyze  # doctest: +SKIP
>>> table = analyze.steer("runs/bbq", layer=5, direction="mean-diff:context_condition=ambig,disambig",  # doctest: +SKIP
...                       strengths=[-4, 0, 4], output="runs/bbq/steer")
>>> table[["strength", "metric", "ci_low", "ci_high", "n"]]  # doctest: +SKIP
"""

from probe.studies.analyze.fronts import lens, patch, probes, steer
from probe.studies.analyze.run import TaskRun, as_run, open_run, run_for
from probe.runs.runner import RunOptions

__all__ = ["RunOptions", "TaskRun", "as_run", "lens", "open_run", "patch", "probes", "run_for", "steer"]
