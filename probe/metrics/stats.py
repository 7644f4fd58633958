"""Shared statistics: bootstrap confidence intervals over items, and the one bootstrap module.

Every bootstrap in probe draws through the pieces here, so a resample means the
same thing everywhere: :func:`resample_clusters` (cluster ids drawn one by one,
with replacement: the ``"ids"`` draw), :func:`resample_rows` (the rows of such
a draw), :func:`cluster_weights` (each cluster's multiplicity from one
multinomial draw: the ``"counts"`` draw), :func:`percentile_ci` (the interval of
a bootstrap distribution, NaN-aware) and :func:`bootstrap_p` (a two-sided
bootstrap p-value of a difference). :func:`cluster_bootstrap_ci` and
:func:`stratified_cluster_bootstrap` are built from them; the paired model
comparisons, ImplicitBBQ's macro averages and the sampling check use them too.

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

from probe.metrics.small_sample import MIN_UNITS

__all__ = ["bootstrap_ci", "bootstrap_p", "cluster_bootstrap_ci", "cluster_members", "cluster_weights", "percentile_ci",
           "resample_clusters", "resample_rows", "stratified_cluster_bootstrap"]


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
    (low, high). ``(nan, nan)`` when ``data`` has fewer rows than
    :data:`probe.metrics.small_sample.MIN_UNITS` (the small-sample rule), or when
    fewer than half of the resamples gave a finite statistic (the interval
    would then describe a different population than the point estimate).
    """
    arr = np.asarray(data)
    if arr.ndim == 0:
        raise ValueError("bootstrap_ci: data must have at least one axis (rows = items)")
    _check_level_and_draws("bootstrap_ci", level, n_boot)
    if arr.shape[0] < MIN_UNITS:  # the small-sample rule (probe.metrics.small_sample)
        return (math.nan, math.nan)
    boots = _row_bootstrap(arr, statistic, n_boot, seed, level)
    finite = boots[np.isfinite(boots)]
    if finite.size < max(1, boots.size // 2):
        return (math.nan, math.nan)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(finite, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def _check_level_and_draws(name: str, level: float, n_boot: int) -> None:
    """``ValueError`` (naming the function ``name``) unless ``level`` is in (0, 1) and ``n_boot`` >= 1."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"{name}: level must be in (0, 1), got {level}")
    if n_boot < 1:
        raise ValueError(f"{name}: n_boot must be >= 1, got {n_boot}")


def _row_bootstrap(arr: np.ndarray, statistic: Callable[[np.ndarray], float], n_boot: int, seed: int,
                   level: float) -> np.ndarray:
    """The bootstrap distribution of ``statistic`` over resampled rows of ``arr`` (:func:`bootstrap_ci`'s draws,
    by :func:`scipy.stats.bootstrap`), as floats."""
    # scipy resamples each argument along `axis`; we pass row indices and let the
    # statistic see whole rows, which works for any number of columns.
    index = np.arange(arr.shape[0])

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
    return np.asarray(boots, dtype=float)


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
    :func:`bootstrap_ci` (fewer clusters than
    :data:`~probe.metrics.small_sample.MIN_UNITS`, or fewer than half the
    resamples finite: ``(nan, nan)``).

    ``draw`` picks how the random numbers become a resample; both are the same
    bootstrap, they differ only in the stream they read from ``seed``:
    ``"ids"`` draws the cluster ids one by one, clusters in order of first
    appearance (the metrics' intervals); ``"counts"`` draws each cluster's
    multiplicity at once from a multinomial over the sorted cluster ids (the
    probe accuracies' intervals, :mod:`probe.analysis.probes`).

    >>> data = np.repeat([1.0, 0.0] * 5, 2)   # ten clusters of two rows: five all 1, five all 0
    >>> ids = np.repeat(np.arange(10), 2).tolist()
    >>> lo, hi = cluster_bootstrap_ci(data, ids, {"mean": np.mean}, n_boot=200)["mean"]
    >>> 0.1 <= lo < 0.5 < hi <= 0.9
    True
    >>> cluster_bootstrap_ci(data[:4], ids[:4], {"mean": np.mean}, n_boot=200, draw="counts")["mean"]  # two clusters
    (nan, nan)
    """
    arr = np.asarray(data)
    if len(clusters) != arr.shape[0]:
        raise ValueError(f"cluster_bootstrap_ci: {len(clusters)} cluster ids for {arr.shape[0]} rows")
    _check_level_and_draws("cluster_bootstrap_ci", level, n_boot)
    if draw not in ("ids", "counts"):
        raise ValueError(f"cluster_bootstrap_ci: draw must be 'ids' or 'counts', got {draw!r}")
    members = cluster_members(clusters, "sorted" if draw == "counts" else "first")
    if len(members) < MIN_UNITS:  # the small-sample rule (probe.metrics.small_sample)
        return {name: (math.nan, math.nan) for name in statistics}
    boots = _cluster_bootstrap(arr, members, statistics, n_boot, np.random.default_rng(seed), draw)
    return {name: percentile_ci(values, level, min_finite=max(1, n_boot // 2)) for name, values in boots.items()}


def _cluster_bootstrap(arr: np.ndarray, members: Sequence[np.ndarray],
                       statistics: Mapping[str, Callable[[np.ndarray], float]], n_boot: int, rng: np.random.Generator,
                       draw: Literal["ids", "counts"]) -> dict[str, np.ndarray]:
    """Each statistic's bootstrap distribution over ``n_boot`` resamples of the clusters ``members``
    (:func:`cluster_bootstrap_ci`'s draws, read from ``rng``)."""
    # "counts": one multinomial draw per resample gives every cluster's multiplicity.
    weights = cluster_weights(rng, len(members), n_boot) if draw == "counts" else None
    boots = {name: np.empty(n_boot) for name in statistics}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # empty denominators in a resample give NaN, dropped below
        for b in range(n_boot):
            if weights is None:
                idx = resample_rows(rng, members)
            else:
                idx = np.concatenate([np.tile(members[j], k) for j, k in enumerate(weights[b]) if k])
            sample = arr[idx]
            for name, fn in statistics.items():
                boots[name][b] = float(fn(sample))
    return boots


def cluster_members(clusters: Sequence[Hashable], order: Literal["first", "sorted"] = "first") -> list[np.ndarray]:
    """The row indices of each cluster: clusters in order of first appearance (``"first"``) or of their sorted
    ids (``"sorted"``).

    >>> [m.tolist() for m in cluster_members(["b", "a", "b"])], [m.tolist() for m in cluster_members(["b", "a", "b"], "sorted")]
    ([[0, 2], [1]], [[1], [0, 2]])
    """
    if order == "sorted":
        _, inverse = np.unique(np.asarray(clusters), return_inverse=True)
        return [np.flatnonzero(inverse == j) for j in range(int(inverse.max()) + 1)] if len(inverse) else []
    rows: dict[Hashable, list[int]] = {}
    for i, c in enumerate(clusters):
        rows.setdefault(c, []).append(i)
    return [np.asarray(v) for v in rows.values()]


def resample_clusters(rng: np.random.Generator, n_clusters: int) -> np.ndarray:
    """One resample's cluster indices: ``n_clusters`` drawn one by one, with replacement (the ``"ids"`` draw).

    >>> resample_clusters(np.random.default_rng(0), 4).tolist()
    [3, 2, 2, 1]
    """
    return rng.integers(0, n_clusters, n_clusters)


def resample_rows(rng: np.random.Generator, members: Sequence[np.ndarray]) -> np.ndarray:
    """The rows of one resample of the clusters ``members`` (:func:`cluster_members`): every row of each drawn
    cluster, a cluster drawn twice giving its rows twice (:func:`resample_clusters`)."""
    return np.concatenate([members[j] for j in resample_clusters(rng, len(members))])


def cluster_weights(rng: np.random.Generator, n_clusters: int, n_boot: int) -> np.ndarray:
    """Each cluster's multiplicity in each of ``n_boot`` resamples (``n_boot x n_clusters``, rows sum to
    ``n_clusters``), one multinomial draw per resample (the ``"counts"`` draw): a statistic that is a
    function of per-cluster sums takes ``weights @ sums``.

    >>> cluster_weights(np.random.default_rng(0), 3, 2).sum(axis=1).tolist()
    [3, 3]
    """
    if not n_clusters:
        return np.zeros((n_boot, 0), dtype=int)
    return rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_boot)


def percentile_ci(values: Sequence[float] | np.ndarray, level: float = 0.95, *,
                  tails: tuple[float, float] | None = None, min_finite: int = 1) -> tuple[float, float]:
    """The percentile interval of a bootstrap distribution: the ``(1 - level) / 2`` and ``1 - (1 - level) / 2``
    quantiles of its finite values (``tails``: these two quantiles, exactly); ``(nan, nan)`` when fewer than
    ``min_finite`` values are finite (resamples with an empty denominator give NaN).

    >>> percentile_ci([0.0, 1.0, 2.0, float("nan"), 4.0], tails=(0.25, 0.75))
    (0.75, 2.5)
    >>> percentile_ci([float("nan")] * 3)
    (nan, nan)
    """
    arr = np.asarray(values, dtype=float)
    finite = arr[np.isfinite(arr)]
    if finite.size < max(1, min_finite):
        return (math.nan, math.nan)
    if tails is None:
        alpha = (1.0 - level) / 2.0
        tails = (alpha, 1.0 - alpha)
    lo, hi = np.quantile(finite, list(tails))
    return (float(lo), float(hi))


def bootstrap_p(deltas: Sequence[float] | np.ndarray) -> float:
    """Two-sided bootstrap p-value that a difference is 0: ``min(1, 2 min(P*(d <= 0), P*(d >= 0)))`` over the
    finite bootstrap differences ``deltas``, each share counted as ``(count + 1) / (n + 1)`` so a finite
    number of resamples never shows p = 0.

    >>> bootstrap_p([1.0, 2.0, 3.0])
    0.5
    """
    d = np.asarray(deltas, dtype=float)
    d = d[np.isfinite(d)]
    return float(min(1.0, 2.0 * min((np.sum(d <= 0) + 1) / (d.size + 1), (np.sum(d >= 0) + 1) / (d.size + 1))))


def stratified_cluster_bootstrap(members: Mapping[Hashable, Sequence[np.ndarray]],
                                 statistic: Callable[[Mapping[Hashable, np.ndarray]], float], n_boot: int,
                                 rng: np.random.Generator) -> np.ndarray:
    """The bootstrap distribution of ``statistic`` when each stratum's clusters are resampled on their own.

    ``members``: per stratum, its clusters' row indices (into that stratum's own data). Each resample draws
    every stratum's clusters in turn (:func:`resample_rows`, strata in ``members`` order; a stratum without
    clusters draws nothing and is left out) and calls ``statistic({stratum: row indices})``. ``rng`` is
    the caller's, so several statistics may read one stream in turn.

    >>> members = {"a": [np.array([0]), np.array([1])], "b": [np.array([0])]}
    >>> stratified_cluster_bootstrap(members, lambda rows: float(len(rows)), 2, np.random.default_rng(0)).tolist()
    [2.0, 2.0]
    """
    out = np.empty(n_boot)
    for b in range(n_boot):
        out[b] = statistic({s: resample_rows(rng, m) for s, m in members.items() if len(m)})
    return out
