"""Significance tests and rank/linear correlations used by the iso/cmp analysis (iso/cmp paper, F.2).

- :func:`randomization_test` - approximate randomization test between two
  settings on paired units (Riezler & Maxwell 2005): each iteration swaps the
  two settings' outputs of each unit with probability 0.5 and recomputes the
  difference of the statistic. ``blocks`` makes dependent units swap together
  (the 54 prompt variations of one context pair, iso/cmp paper, appendix D).
  Two-sided p-value ``(1 + #{|null| >= |observed|}) / (1 + n_iter)``.
- :func:`kendall_tau` - :func:`scipy.stats.kendalltau` between two model
  rankings (tau-b, handles ties).
- :func:`pearson` - :func:`scipy.stats.pearsonr` (e.g. PG vs parameter count).
- :func:`top_k_intersection` - the paper's Table E.1 "Top-5 intersection".
- Bootstrap CIs: :func:`probe.metrics.stats.bootstrap_ci` (re-exported).

When a statistic is the mean of per-unit values (PG is the mean of per-pair
gaps), swapping a unit's outputs flips the sign of its difference, and the
test is the paired sign-flip permutation test that
:func:`scipy.stats.permutation_test` (``permutation_type="samples"``) runs;
the unit tests check the two agree. We keep our own loop because scipy has no
block swaps.

>>> import numpy as np
>>> r = randomization_test(np.ones(5), np.zeros(5), n_iter=20000, seed=0)
>>> round(r.p_value, 2)   # exact answer: only 2 of the 32 sign patterns reach |mean| = 1
0.06
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import stats

from probe.metrics.stats import bootstrap_ci

__all__ = ["RandomizationResult", "randomization_test", "kendall_tau", "pearson", "top_k_intersection", "bootstrap_ci"]


@dataclass(frozen=True)
class RandomizationResult:
    observed: float  # statistic(x) - statistic(y)
    p_value: float
    n_iter: int
    n_units: int
    n_blocks: int

    def significant(self, alpha: float = 0.05) -> bool:
        return self.p_value < alpha


def randomization_test(
    x: np.ndarray | Sequence[float],
    y: np.ndarray | Sequence[float],
    statistic: Callable[[np.ndarray], float] | None = None,
    n_iter: int = 10000,
    seed: int = 0,
    blocks: np.ndarray | Sequence | None = None,
    swap_p: float = 0.5,
) -> RandomizationResult:
    """Approximate randomization test of ``statistic(x) - statistic(y)`` on paired rows.

    Parameters
    ----------
    x, y:
        Paired outputs of two settings, one row per unit (same shape; 1-D
        values or 2-D rows). Row i of ``x`` and row i of ``y`` are exchangeable
        under the null hypothesis.
    statistic:
        Function of an array of rows returning a float; default: the mean
        (vectorized fast path).
    blocks:
        Optional block id per row; rows of one block are swapped together.
    swap_p:
        Swap probability per unit/block (0.5 in the paper).

    Raises ``ValueError`` on shape mismatch, empty input or NaN values (a
    NaN would silently drop out of the statistic in some iterations only).
    """
    xa, ya = _paired_rows(x, y, n_iter)
    n = xa.shape[0]
    inverse, n_blocks = _block_index(blocks, n)
    rng = np.random.default_rng(seed)
    swaps = rng.random((n_iter, n_blocks)) < swap_p  # one draw per block per iteration
    masks = swaps[:, inverse]  # (n_iter, n_rows)
    observed, null = _null_distribution(xa, ya, statistic, masks)
    # a tolerance so that ties with the observed value count as "as extreme" despite rounding
    tol = 1e-12 * max(1.0, abs(observed))
    count = int(np.sum(np.abs(null) >= abs(observed) - tol))
    return RandomizationResult(observed, (count + 1) / (n_iter + 1), n_iter, n, n_blocks)


def _paired_rows(x: np.ndarray | Sequence[float], y: np.ndarray | Sequence[float],
                 n_iter: int) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and ``y`` as float arrays, checked as :func:`randomization_test` needs them."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.shape != ya.shape:
        raise ValueError(f"x and y must have the same shape, got {xa.shape} and {ya.shape}")
    if xa.ndim == 0 or xa.shape[0] == 0:
        raise ValueError("randomization_test needs at least one paired unit")
    if np.isnan(xa).any() or np.isnan(ya).any():
        raise ValueError("randomization_test: x or y holds NaN")
    if n_iter < 1:
        raise ValueError(f"n_iter must be >= 1, got {n_iter}")
    return xa, ya


def _block_index(blocks: np.ndarray | Sequence | None, n: int) -> tuple[np.ndarray, int]:
    """Each row's block (0 .. n_blocks - 1) and the number of blocks; every row its own block without ``blocks``."""
    if blocks is None:
        return np.arange(n), n
    b = np.asarray(blocks)
    if b.shape[0] != n:
        raise ValueError(f"blocks must have one id per row ({n}), got {b.shape[0]}")
    _, inverse = np.unique(b, return_inverse=True)
    return inverse, int(inverse.max()) + 1


def _null_distribution(xa: np.ndarray, ya: np.ndarray, statistic: Callable[[np.ndarray], float] | None,
                       masks: np.ndarray) -> tuple[float, np.ndarray]:
    """The observed difference and its value under each iteration's swaps (``masks``: iterations x rows)."""
    n = xa.shape[0]
    if statistic is None:
        diff = (xa - ya).reshape(n, -1).mean(axis=1)  # row contribution to mean(x) - mean(y)
        return float(diff.mean()), np.where(masks, -diff, diff).mean(axis=1)
    observed = float(statistic(xa)) - float(statistic(ya))
    null = np.empty(masks.shape[0])
    shape = (n,) + (1,) * (xa.ndim - 1)
    for i in range(masks.shape[0]):
        m = masks[i].reshape(shape)
        null[i] = float(statistic(np.where(m, ya, xa))) - float(statistic(np.where(m, xa, ya)))
    return observed, null


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Kendall's tau-b and its p-value between two score lists over the same models.

    ``(nan, nan)`` with fewer than 2 models or a constant list (scipy's answer).

    >>> kendall_tau([1, 2, 3, 4], [10, 20, 30, 40])[0]
    1.0
    """
    if len(a) != len(b):
        raise ValueError(f"kendall_tau: lists differ in length ({len(a)} vs {len(b)})")
    if len(a) < 2:
        return (math.nan, math.nan)
    res = stats.kendalltau(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
    return (float(res.statistic), float(res.pvalue))


def pearson(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Pearson's r and its two-sided p-value (:func:`scipy.stats.pearsonr`).

    ``(nan, nan)`` with fewer than 3 points (r of two points is always +-1 and
    its p-value undefined) or a constant input.

    >>> round(pearson([1, 2, 3], [2, 4, 6.5])[0], 3)
    0.998
    """
    if len(x) != len(y):
        raise ValueError(f"pearson: lists differ in length ({len(x)} vs {len(y)})")
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(xa) < 3 or np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return (math.nan, math.nan)
    res = stats.pearsonr(xa, ya)
    return (float(res.statistic), float(res.pvalue))


def top_k_intersection(names: Sequence[str], a: Sequence[float], b: Sequence[float], k: int = 5) -> int:
    """How many of the ``k`` highest-scoring names under ``a`` are also top-``k`` under ``b``.

    Ties are broken by name order (deterministic).

    >>> top_k_intersection(["m1", "m2", "m3"], [3, 2, 1], [1, 2, 3], k=2)
    1
    """
    if not (len(names) == len(a) == len(b)):
        raise ValueError("top_k_intersection: names, a and b must have the same length")

    def top(scores: Sequence[float]) -> set[str]:
        order = sorted(range(len(names)), key=lambda i: (-scores[i], names[i]))
        return {names[i] for i in order[:k]}

    return len(top(a) & top(b))
