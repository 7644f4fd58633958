"""HBB's count from sampling + parsing, certified: its range over every way the unenumerated mass is answered.

Per question the enumeration gives ``p_a``, ``p_b`` (label a) / b) parsed) and
a residual ``r``. Couple N samples of a question: each is a), b), "residual"
(``r``) or a non-answer; a residual sample then becomes a), b) or a non-answer
in whatever way a split of ``r`` says. Given the counts ``(kA, kB, kR)``,
every split leaves P-hat(A) in ``[kA / (kA + kB + kR), (kA + kR) / (kA + kB +
kR)]`` (undefined only when ``kA + kB = 0`` and the residual samples are all
non-answers). So for every split, P(S >= threshold) lies between the chance
of the states where *every* choice of the residual samples' answers gives
S >= threshold and the chance of those where *some* choice does
(:func:`instance_bounds`); the count's interval is their sum over instances.
Valid for every split, and a point when ``r = 0``; wider than the exact range
where ``r`` is large (the coupling lets the residual samples' answers depend
on the draws).

>>> lo, hi = instance_bounds([0.5], [0.5], [0.0], [0.5], [0.5], [0.0], n_samples=2, threshold=50)
>>> float(lo[0]), float(hi[0])  # no residual: P(S >= 50) = 0.625 exactly
(0.625, 0.625)
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence

import numpy as np

__all__ = ["instance_bounds", "count_bounds"]

_TOL = 1e-9  # S on the threshold counts (the rule of probe.tasks.hbb.sampling)


@lru_cache(maxsize=8)
def _coupled_states(n: int) -> tuple[np.ndarray, ...]:
    """States (kA, kB, kR) of N samples, their multinomial coefficients, P-hat's hull per state and whether
    the state is certainly defined / possibly defined."""
    st = [(a, b, r) for a in range(n + 1) for b in range(n + 1 - a) for r in range(n + 1 - a - b)]
    ka, kb, kr = (np.array(x, dtype=float) for x in zip(*st))
    coef = np.array([math.comb(n, a) * math.comb(n - a, b) * math.comb(n - a - b, r) for a, b, r in st], dtype=float)
    tot = ka + kb + kr
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(tot > 0, ka / np.where(tot > 0, tot, 1), 0.0)
        hi = np.where(tot > 0, (ka + kr) / np.where(tot > 0, tot, 1), 0.0)
    return ka, kb, kr, coef, lo, hi, (ka + kb) > 0, tot > 0


@lru_cache(maxsize=32)
def _events(n: int, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Over pairs of states: S >= threshold for every residual choice (certain), for some choice (possible)."""
    _, _, _, _, lo, hi, sure, maybe = _coupled_states(n)
    t = threshold / 100 - _TOL
    certain = (np.maximum(lo[:, None] - hi[None, :], lo[None, :] - hi[:, None]) >= t) & sure[:, None] & sure[None, :]
    possible = (np.maximum(hi[:, None] - lo[None, :], hi[None, :] - lo[:, None]) >= t) & maybe[:, None] & maybe[None, :]
    return certain.astype(float), possible.astype(float)


def _state_probs(pa: np.ndarray, pb: np.ndarray, r: np.ndarray, n: int) -> np.ndarray:
    ka, kb, kr, coef, *_ = _coupled_states(n)
    po = np.clip(1.0 - pa - pb - r, 0.0, 1.0)
    ko = n - ka - kb - kr
    return coef * pa[:, None] ** ka * pb[:, None] ** kb * r[:, None] ** kr * po[:, None] ** ko


def instance_bounds(p1_a: Sequence[float], p1_b: Sequence[float], r1: Sequence[float], p2_a: Sequence[float],
                    p2_b: Sequence[float], r2: Sequence[float], n_samples: int = 10,
                    threshold: float = 20.0) -> tuple[np.ndarray, np.ndarray]:
    """Per instance, bounds on P(S-hat >= threshold) over every split of each question's residual (invalid
    answers dropped, the paper's rule); inputs are the enumerated masses, not renormalised."""
    arr = [np.clip(np.asarray(x, dtype=float), 0.0, 1.0) for x in (p1_a, p1_b, r1, p2_a, p2_b, r2)]
    certain, possible = _events(int(n_samples), float(threshold))
    q1, q2 = _state_probs(*arr[:3], n_samples), _state_probs(*arr[3:], n_samples)
    lo = np.einsum("ni,ij,nj->n", q1, certain, q2)
    hi = np.einsum("ni,ij,nj->n", q1, possible, q2)
    return np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)


def count_bounds(*args: Sequence[float], n_samples: int = 10, threshold: float = 20.0) -> list[float]:
    """The certified interval of the expected count at S >= threshold (:func:`instance_bounds` summed)."""
    lo, hi = instance_bounds(*args, n_samples=n_samples, threshold=threshold)
    return [float(lo.sum()), float(hi.sum())]
