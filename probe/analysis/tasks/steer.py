"""Steering dose-response: the task's bias metric as a function of the strength along a direction.

A direction is read from captured activations at one layer: ``mean-diff:FIELD=A,B``
(mean of the records with ``FIELD == A`` minus those with ``FIELD == B``) or
``probe:FIELD=A,B`` (the weight of a :class:`~probe.analysis.probes.LinearProbe`
separating them). Both are scaled so that strength 1 moves a record by the
distance between the two groups' means along the direction: a strength is in
units of "how far group B is from group A".

:func:`dose_response` re-scores under :func:`probe.analysis.steering.steer`
(``alpha * direction`` added to ``blocks.{layer}.hook_resid_post`` at every
position) for each strength; ``evaluate`` is the caller's re-score + the task's
own ``aggregate`` + ``reporting.headline_metrics`` (clustered CIs). Strength 0 adds a zero
vector, so it reproduces the unsteered metric exactly.

>>> spec = parse_direction("mean-diff:context_kind=implicit,explicit")
>>> spec.method, spec.field, spec.positive, spec.negative
('mean-diff', 'context_kind', 'implicit', 'explicit')
>>> import numpy as np
>>> X = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 0.0], [0.0, 2.0]])
>>> direction_vector(X, ["a", "a", "b", "b"], parse_direction("mean-diff:g=a,b"))
array([ 2., -1.])
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from tqdm import tqdm

from probe.analysis.probes import LinearProbe
from probe.analysis.steering import steer


METHODS = ("mean-diff", "probe")
COLUMNS = ("strength", "metric", "ci_low", "ci_high", "n")


@dataclass(frozen=True)
class DirectionSpec:
    """``METHOD:FIELD=POSITIVE,NEGATIVE``: which records define the direction, and how."""

    method: str
    field: str
    positive: str
    negative: str

    def __str__(self) -> str:
        return f"{self.method}:{self.field}={self.positive},{self.negative}"


def parse_direction(text: str) -> DirectionSpec:
    """Parse ``mean-diff:FIELD=A,B`` or ``probe:FIELD=A,B`` (raises ``ValueError`` saying what is expected)."""
    method, sep, rest = str(text).partition(":")
    field, eq, values = rest.partition("=")
    parts = [v.strip() for v in values.split(",")]
    if not sep or not eq or method not in METHODS or not field.strip() or len(parts) != 2 or not all(parts):
        raise ValueError(f"direction {text!r}: expected METHOD:FIELD=A,B with METHOD one of {', '.join(METHODS)} "
                         "(e.g. mean-diff:context_kind=implicit,explicit)")
    if parts[0] == parts[1]:
        raise ValueError(f"direction {text!r}: the two values must differ")
    return DirectionSpec(method, field.strip(), parts[0], parts[1])


def direction_vector(X: np.ndarray, values: Sequence[Any], spec: DirectionSpec, seed: int = 0) -> np.ndarray:
    """The direction ``spec`` names, from rows ``X`` (``[n, d_model]``) whose field values are ``values``.

    Scaled so that its length is the distance between the two groups' means along it (for ``mean-diff``:
    the mean difference itself). Rows with NaN (a missing position) are ignored.
    """
    X = np.asarray(X, dtype=np.float64)
    vals = np.asarray([str(v) for v in values])
    ok = np.all(np.isfinite(X), axis=1)
    pos, neg = ok & (vals == spec.positive), ok & (vals == spec.negative)
    for name, m in ((spec.positive, pos), (spec.negative, neg)):
        if not m.any():
            present = sorted(set(vals.tolist()))[:10]
            raise ValueError(f"direction {spec}: no record has {spec.field} == {name!r} (values: {present})")
    diff = X[pos].mean(axis=0) - X[neg].mean(axis=0)
    if spec.method == "mean-diff":
        if not np.any(diff):
            raise ValueError(f"direction {spec}: the two group means coincide")
        return diff

    rows = pos | neg
    unit = LinearProbe().fit(X[rows], pos[rows].astype(int)).direction()
    return unit * float(diff @ unit)


def dose_response(model: Any, layer: int, vector: np.ndarray, strengths: Sequence[float],
                  evaluate: Callable[[], Mapping[str, Mapping[str, float]]], metric: str | None = None,
                  hook: str = "resid_post", progress: bool = False) -> tuple[Any, Any]:
    """Re-evaluate under each strength; returns ``(table, all_metrics)`` DataFrames.

    ``evaluate()`` re-scores the task and returns its ``reporting.headline_metrics`` (``name -> {value, ci_low,
    ci_high, n}``); ``table`` has :data:`COLUMNS` (``metric`` = the chosen metric's value) plus ``metric_name`` and
    ``layer``; ``all_metrics`` has one row per strength and metric name.
    """

    if not strengths:
        raise ValueError("dose_response needs at least one strength")
    rows, every = [], []
    for s in tqdm(list(strengths), desc="steering", disable=not progress):
        with steer(model, layer, vector, float(s), hook=hook):
            metrics = dict(evaluate())
        if metric is None:
            metric = next(iter(metrics))
        if metric not in metrics:
            raise ValueError(f"metric {metric!r} is not among the task's metrics: {', '.join(metrics)}")
        m = metrics[metric]
        rows.append({"strength": float(s), "metric": m["value"], "ci_low": m["ci_low"], "ci_high": m["ci_high"],
                     "n": m["n"], "metric_name": metric, "layer": layer})
        every += [{"strength": float(s), "name": k, **v} for k, v in metrics.items()]
    return pd.DataFrame(rows), pd.DataFrame(every)


def plot_dose_response(table: Any, path: str | Path, title: str = "") -> Path:
    """``steering.png``: the metric against the strength, with its CI band (one layer)."""

    matplotlib.use("Agg")

    t = table.sort_values("strength")
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(t["strength"], t["metric"], marker="o")
    ax.fill_between(t["strength"], t["ci_low"].astype(float), t["ci_high"].astype(float), alpha=0.25)
    ax.axvline(0, color="grey", lw=0.5)
    ax.set_xlabel("steering strength (x distance between the group means)")
    ax.set_ylabel(str(t["metric_name"].iloc[0]) if "metric_name" in t else "metric")
    ax.set_title(title, fontsize=9)
    return save_figure(fig, path)


def save_figure(fig: Any, path: str | Path, dpi: int = 120) -> Path:
    """Write a matplotlib figure (parent folders made) and close it."""

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
