"""The iso/cmp paper's K-sample preference, its expectation computed exactly from per-generation probabilities.

The authors sample K generations per prompt (K = 25 in the released code's
sampled runs), parse each, drop the invalid ones and compute the preference of
:mod:`probe.tasks.cmp_iso.metrics` from the counts. Plugging probabilities into that
ratio is not the same number: with P(Yes) 0.02 against 0.01 the plug-in gap is
0.333, while 25 samples mostly see no Yes at all (the 0.5 fallback) and the
expected gap is about 0.18. These functions give the expectation over the K
samples exactly, from one generation's answer probabilities (a parse
distribution), by summing over every possible count.

iso, one prompt per target: a generation is Yes with ``p_yes``, any other
valid label with ``p_valid - p_yes``, invalid otherwise. ``V`` valid answers of
K (binomial), ``Y`` of them Yes (binomial given ``V``); ``a = Y / V`` (0 when
``V = 0``). The pair's preference ``p_t = a_t / (a_t + a_t')``, 0.5 when both
are 0, and its expectation runs over both prompts' ``(V, Y)``.

cmp, one prompt per option order: a generation picks t's option with ``p_t``,
t''s with ``p_tp``; ``p_t^o = k_t / (k_t + k_t')``, 0.5 when both are 0
(trinomial counts). ``p_t`` is the mean over the two orders, so its
expectation is the mean of theirs.

>>> round(2 * expected_iso_preference(0.02, 1.0, 0.01, 1.0, k=25) - 1, 3)
0.178
>>> expected_cmp_preference(0.0, 0.0, k=25), round(expected_cmp_preference(1.0, 0.0, k=25), 12)
(0.5, 1.0)
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.special import gammaln, xlogy
from scipy.stats import binom

#: generations per prompt in the authors' sampled runs (insait-institute/to_cmp_or_not_to_cmp)
PAPER_K = 25


def _check(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and -1e-9 <= value <= 1 + 1e-9):
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return min(1.0, max(0.0, float(value)))


@lru_cache(maxsize=8)
def _share_grid(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(n, y, y / n)`` for n = 1..k and y = 0..n, n-major."""
    n = np.repeat(np.arange(1, k + 1), np.arange(2, k + 2))
    y = np.concatenate([np.arange(m + 1) for m in range(1, k + 1)])
    share = y / n
    for a in (n, y, share):  # shared by every call: read-only
        a.setflags(write=False)
    return n, y, share


def _iso_share(p_yes: float, p_valid: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(values of ``a = Y / V``, their probabilities) over every ``(V, Y)`` of ``k`` generations."""
    p_yes, p_valid = _check("p_yes", p_yes), _check("p_valid", p_valid)
    if p_yes > p_valid + 1e-12:
        raise ValueError(f"p_yes ({p_yes}) cannot exceed p_valid ({p_valid})")
    pv = binom.pmf(np.arange(k + 1), k, p_valid)
    q = p_yes / p_valid if p_valid > 0 else 0.0
    # every (V = n, Y = y) with V >= 1 in one pmf call (a call per n cost most of a bootstrap); same values
    n, y, share = _share_grid(k)
    values_a = np.concatenate(([0.0], share))
    probs_a = np.concatenate(([pv[0]], pv[n] * binom.pmf(y, n, q)))
    keep = probs_a > 1e-18  # the states a k-sample run cannot reach in practice (their mass stays below 1e-13)
    # equal shares (1/2 = 2/4) merged: the pair sum then runs over distinct values only
    uniq, inv = np.unique(np.round(values_a[keep], 12), return_inverse=True)
    return uniq, np.bincount(inv, weights=probs_a[keep])


def expected_iso_preference(p_yes_t: float, p_valid_t: float, p_yes_tp: float, p_valid_tp: float,
                            k: int = PAPER_K) -> float:
    """``E[p_t]`` for one iso context pair from ``k`` generations per prompt (see the module doc)."""
    _k(k)
    a, pa = _iso_share(p_yes_t, p_valid_t, k)
    b, pb = _iso_share(p_yes_tp, p_valid_tp, k)
    total = a[:, None] + b[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        pref = np.where(total > 0, a[:, None] / np.where(total > 0, total, 1.0), 0.5)
    return float(pa @ pref @ pb)


@lru_cache(maxsize=8)
def _trinomial_grid(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    kt, ktp = np.meshgrid(np.arange(k + 1), np.arange(k + 1), indexing="ij")
    ok = kt + ktp <= k
    tot = kt + ktp
    with np.errstate(invalid="ignore", divide="ignore"):
        pref = np.where(tot > 0, kt / np.where(tot > 0, tot, 1), 0.5)
    return kt[ok], ktp[ok], pref[ok]


def expected_cmp_preference(p_t: float, p_tp: float, k: int = PAPER_K) -> float:
    """``E[p_t^o]`` for one cmp prompt (one option order) from ``k`` generations (see the module doc)."""
    _k(k)
    p_t, p_tp = _check("p_t", p_t), _check("p_tp", p_tp)
    if p_t + p_tp > 1 + 1e-9:
        raise ValueError(f"p_t + p_tp must be <= 1, got {p_t + p_tp}")
    rest = max(0.0, 1.0 - p_t - p_tp)
    kt, ktp, pref = _trinomial_grid(k)
    logc = (math.lgamma(k + 1) - _lgamma(kt + 1) - _lgamma(ktp + 1) - _lgamma(k - kt - ktp + 1))
    logp = logc + _xlogy(kt, p_t) + _xlogy(ktp, p_tp) + _xlogy(k - kt - ktp, rest)
    return float(np.sum(np.exp(logp) * pref))


def _lgamma(x: np.ndarray) -> np.ndarray:
    return gammaln(x)


def _xlogy(n: np.ndarray, p: float) -> np.ndarray:
    return xlogy(n, p)


def _k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k (generations per prompt) must be a positive integer, got {k!r}")
