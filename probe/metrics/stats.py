"""Shared statistics: bootstrap confidence intervals over items.

Every benchmark reports its metrics with a 95% bootstrap CI. Resampling is
always over the first axis (rows = items), so a statistic that needs several
per-item columns (e.g. the BBQ bias score, which needs "answered Unknown" and
"stereotype-consistent" per item) receives a 2-D array of resampled rows.

The percentile interval is computed with :func:`scipy.stats.bootstrap`
(``method="percentile"``, ``vectorized=False``), seeded, so the same data and
seed always give the same interval.

>>> import numpy as np
>>> lo, hi = bootstrap_ci(np.array([0.0, 1.0] * 50), np.mean, n_boot=500)
>>> 0.35 < lo < 0.5 < hi < 0.65
True
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Hashable, Literal, Mapping, Sequence

import numpy as np
from scipy import stats

__all__ = ["bootstrap_ci", "cluster_bootstrap_ci"]


def bootstrap_ci(
    data: np.ndarray,
    statistic: Callable[[np.ndarray], float],
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap CI of ``statistic(data)``, resampling rows of ``data``.

    Parameters
    ----------
    data:
        1-D array of per-item values, or 2-D array with one row per item.
    statistic:
        Function of a resampled array (same shape convention as ``data``)
        returning one float. It may return NaN for a resample (e.g. an empty
        denominator); those resamples are dropped before taking percentiles.
    n_boot:
        Number of bootstrap resamples.
    seed:
        Seed of the resampling generator (deterministic).
    level:
        Confidence level, e.g. 0.95.

    Returns
    -------
    (low, high). ``(nan, nan)`` when ``data`` has fewer than 2 rows, or when
    fewer than half of the resamples gave a finite statistic (the interval
    would then describe a different population than the point estimate).
    """
    arr = np.asarray(data)
    if arr.ndim == 0:
        raise ValueError("bootstrap_ci: data must have at least one axis (rows = items)")
    if not 0.0 < level < 1.0:
        raise ValueError(f"bootstrap_ci: level must be in (0, 1), got {level}")
    if n_boot < 1:
        raise ValueError(f"bootstrap_ci: n_boot must be >= 1, got {n_boot}")
    n = arr.shape[0]
    if n < 2:
        return (math.nan, math.nan)

    # scipy resamples each argument along `axis`; we pass row indices and let the
    # statistic see whole rows, which works for any number of columns.
    index = np.arange(n)

    def _stat(idx: np.ndarray) -> float:
        return float(statistic(arr[idx.astype(int)]))

    with warnings.catch_warnings():
        # scipy warns on degenerate (constant) bootstrap distributions; that is a valid
        # answer here (e.g. all answers Unknown gives the interval [1, 1]).
        warnings.simplefilter("ignore")
        boots = stats.bootstrap(
            (index,),
            _stat,
            n_resamples=n_boot,
            vectorized=False,
            method="percentile",
            confidence_level=level,
            random_state=np.random.default_rng(seed),
        ).bootstrap_distribution
    boots = np.asarray(boots, dtype=float)
    finite = boots[np.isfinite(boots)]
    if finite.size < max(1, boots.size // 2):
        return (math.nan, math.nan)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(finite, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def cluster_bootstrap_ci(
    data: np.ndarray,
    clusters: Sequence[Hashable],
    statistics: Mapping[str, Callable[[np.ndarray], float]],
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    draw: Literal["ids", "counts"] = "ids",
) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap CIs resampling whole clusters (the unit the items were drawn from).

    Each resample draws as many cluster ids as there are clusters, with
    replacement, and takes every row of each drawn cluster (a cluster drawn
    twice contributes its rows twice); every statistic is computed on the same
    resample. Items of one template or context are not independent: resampling
    them one by one overstates precision. The NaN rules are those of
    :func:`bootstrap_ci` (fewer than 2 clusters, or fewer than half the
    resamples finite: ``(nan, nan)``).

    ``draw`` picks how the random numbers become a resample; both are the same
    bootstrap, they differ only in the stream they read from ``seed``:
    ``"ids"`` draws the cluster ids one by one, clusters in order of first
    appearance (the metrics' intervals); ``"counts"`` draws each cluster's
    multiplicity at once from a multinomial over the sorted cluster ids (the
    probe accuracies' intervals, :mod:`probe.analysis.probes`).

    >>> data = np.array([1.0, 1.0, 0.0, 0.0])
    >>> ci = cluster_bootstrap_ci(data, ["a", "a", "b", "b"], {"mean": np.mean}, n_boot=200)
    >>> ci["mean"]   # two clusters: every resample's mean is 0, 0.5 or 1
    (0.0, 1.0)
    >>> cluster_bootstrap_ci(data, ["a", "a", "b", "b"], {"mean": np.mean}, n_boot=200, draw="counts")["mean"]
    (0.0, 1.0)
    """
    arr = np.asarray(data)
    if len(clusters) != arr.shape[0]:
        raise ValueError(f"cluster_bootstrap_ci: {len(clusters)} cluster ids for {arr.shape[0]} rows")
    if not 0.0 < level < 1.0:
        raise ValueError(f"cluster_bootstrap_ci: level must be in (0, 1), got {level}")
    if n_boot < 1:
        raise ValueError(f"cluster_bootstrap_ci: n_boot must be >= 1, got {n_boot}")
    if draw not in ("ids", "counts"):
        raise ValueError(f"cluster_bootstrap_ci: draw must be 'ids' or 'counts', got {draw!r}")
    if draw == "counts":
        _, inverse = np.unique(np.asarray(clusters), return_inverse=True)
        members = [np.flatnonzero(inverse == j) for j in range(int(inverse.max()) + 1)] if len(inverse) else []
    else:
        rows: dict[Hashable, list[int]] = {}
        for i, c in enumerate(clusters):
            rows.setdefault(c, []).append(i)
        members = [np.asarray(v) for v in rows.values()]
    nan2 = (math.nan, math.nan)
    g = len(members)
    if g < 2:
        return {name: nan2 for name in statistics}
    rng = np.random.default_rng(seed)
    # "counts": one multinomial draw per resample gives every cluster's multiplicity.
    weights = rng.multinomial(g, np.full(g, 1.0 / g), size=n_boot) if draw == "counts" else None
    boots = {name: np.empty(n_boot) for name in statistics}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # empty denominators in a resample give NaN, dropped below
        for b in range(n_boot):
            if weights is None:
                idx = np.concatenate([members[j] for j in rng.integers(0, g, g)])
            else:
                idx = np.concatenate([np.tile(members[j], k) for j, k in enumerate(weights[b]) if k])
            sample = arr[idx]
            for name, fn in statistics.items():
                boots[name][b] = float(fn(sample))
    alpha = (1.0 - level) / 2.0
    out = {}
    for name, values in boots.items():
        finite = values[np.isfinite(values)]
        if finite.size < max(1, n_boot // 2):
            out[name] = nan2
        else:
            lo, hi = np.quantile(finite, [alpha, 1.0 - alpha])
            out[name] = (float(lo), float(hi))
    return out
