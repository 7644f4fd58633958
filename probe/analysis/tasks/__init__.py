"""Analyses on task runs: steering dose-response, probes, logit lens and patching on a task's records.

The pieces here work on arrays, record frames and callables, so they sit
below ``probe.tasks`` and ``probe.runs`` in the import layers. The front that
opens a run directory (or runs a task), asks the task for its cluster units
and pairs, and re-scores through the Runner is :mod:`probe.studies.analyze`
(``probe analyze steer|probes|lens|patch``; ``docs/activations.md``,
"Analyses on task runs").

* :mod:`.steer`: directions (mean difference of two record groups, or a
  probe's weight) and the dose-response table and plot;
* :mod:`.probes`: per-layer probes grouped by the task's unit, and their plot;
* :mod:`.lens`: the logit lens over the option labels from captured residuals;
* :mod:`.patch`: residual patching between a task's record pairs.
"""

from probe.analysis.tasks.steer import (DirectionSpec, direction_vector, dose_response, parse_direction,
                                       plot_dose_response)


__all__ = ["DirectionSpec", "direction_vector", "dose_response", "parse_direction", "plot_dose_response"]
