"""Certified intervals: the range a metric takes over every way the unenumerated mass could be answered.

An exact parse stage gives, per prompt, the enumerated mass of each answer
``p_a``, the mass parsed to no answer and a ``residual`` ``r`` that was not
enumerated. The true answer masses are ``p_a + x_a`` for some split ``x >= 0``
of ``r`` over the answers and the non-answer. A metric's **certified
interval** is the smallest and largest value it takes over all splits, every
prompt split on its own.

The point estimate follows one rule (:func:`point_masses`): the residual is
answered in the enumerated mix of its prompt, non-answers included
(``p_a / (1 - r)``). Given a parse this is ``p_a / sum(p)``, the enumerated
conditional; the interval covers every other split.

Metrics are computed from per-prompt *contribution vectors* (e.g. the
expected Unknown, correct and consistent indicators of an answer given a
parse). For the answer **given a parse**, the reachable conditionals are the
shrunken simplex ``q_a >= p_a / (A + r)`` (``A = sum(p)``): every split with
mass ``s <= r`` on answers gives ``q_a >= p_a / (A + s) >= p_a / (A + r)``, and
the vertices ``p / (A + r) + r / (A + r) e_j`` are reached with ``s = r``
(:func:`conditional_vertices`). A prompt with ``A = 0 < r`` may also parse
never: it contributes nothing (the zero vertex), or any answer. Every metric
here is a ratio of sums of per-prompt linear terms, whose extremes over a
product of polytopes sit at vertices and are found exactly by Dinkelbach's
method (:func:`ratio_range`): for a trial value ``lam`` the best vertex of
each prompt for ``num - lam den`` is chosen on its own.

>>> v = conditional_vertices([0.6, 0.2], residual=0.2)  # A = 0.8, every split of 0.2
>>> v.round(3).tolist()
[[0.8, 0.2], [0.6, 0.4]]
>>> share_range([[0.0, 1.0], [1.0]])  # mean of an uncertain prompt and a certain one
(0.5, 1.0)
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

__all__ = ["DEFAULT_ANSWER_TARGET", "answer_target", "RESIDUAL_POLICY", "uncertified_warning", "interval_text", "conditional_vertices", "point_answer", "point_conditional", "point_masses", "mass_bounds", "uncertified",
           "ratio_range", "share_range", "interval_mean", "contains"]

#: the one rule for the point estimate, as summaries state it (``docs/scoring.md``, "One residual policy")
RESIDUAL_POLICY = ("point: the mass not enumerated is answered in its prompt's enumerated mix (P(a) = p_a / "
                   "(1 - residual); given a parse p_a / sum p); certified interval: every other split of it over "
                   "the answers and the non-answer")

#: the flag's target where a task sets no ``parse_answer_residual``: residual / parsed mass at most 5 %
DEFAULT_ANSWER_TARGET = 0.05


def answer_target(answer_residual: float | None) -> float:
    """The target a prompt's answer given a parse is flagged against: the task's ``parse_answer_residual``, else
    :data:`DEFAULT_ANSWER_TARGET`.

    >>> answer_target(None), answer_target(0.1)
    (0.05, 0.1)
    """
    return DEFAULT_ANSWER_TARGET if answer_residual is None else float(answer_residual)


#: denominators at or below this are treated as zero (a metric undefined there)
_TINY = 1e-12


def point_masses(probs: Sequence[float], residual: float) -> np.ndarray:
    """The point estimate of each answer's mass: the residual answered in its prompt's enumerated mix
    (non-answers included), ``p_a / (1 - r)``; ``r = 1`` (nothing enumerated) gives zeros.

    >>> point_masses([0.3, 0.2], 0.5).tolist()
    [0.6, 0.4]
    """
    p = np.asarray(probs, dtype=float)
    kept = 1.0 - float(residual)
    return p / kept if kept > _TINY else np.zeros_like(p)


def point_answer(parsed: Any) -> dict[str, float]:
    """A parse record's answer masses under the point rule (:func:`point_masses`): each enumerated answer's
    ``p_a / (1 - residual)``; empty when nothing was enumerated. The chance one sample reads as ``a``, as
    the published numbers count it (a sampling check's parse rate is their sum, not the head's lower bound).

    >>> point_answer({"probs": {"0": 0.3, "2": 0.2}, "residual": 0.5})
    {'0': 0.6, '2': 0.4}
    """
    kept = 1.0 - float(parsed["residual"])
    return {str(k): float(v) / kept for k, v in parsed["probs"].items()} if kept > _TINY else {}


def point_conditional(probs: Sequence[float]) -> np.ndarray | None:
    """The point estimate given a parse, ``p_a / sum(p)`` (the same under :func:`point_masses`); None when
    nothing enumerated parsed."""
    p = np.asarray(probs, dtype=float)
    total = float(p.sum())
    return p / total if total > 0 else None


def mass_bounds(probs: Sequence[float], residual: float) -> list[tuple[float, float]]:
    """Each answer's certified mass ``[p_a, p_a + r]`` (capped at 1)."""
    return [(float(p), min(1.0, float(p) + float(residual))) for p in probs]


def uncertified(parsed_mass: float, residual: float, target: float | None) -> bool:
    """True when the answer given a parse is not certified to ``target``: ``residual / parsed mass`` above it
    (a prompt with nothing parsed and some residual is never certified; None: no target, never flagged).

    >>> uncertified(0.5, 0.01, 0.05), uncertified(3e-5, 4.9e-4, 0.05), uncertified(0.0, 0.0, 0.05)
    (False, True, False)
    """
    if target is None or residual <= 0:
        return False
    return parsed_mass <= 0 or residual / parsed_mass > target


def uncertified_warning(n_flagged: int, n: int, target: float | None) -> str | None:
    """The report warning for prompts whose answer given a parse is not certified to ``target`` (None: none).

    >>> uncertified_warning(2, 40, 0.05)
    '2 of 40 prompts have a parsed answer not certified to 5% (residual / parsed mass above it): their given-a-parse shares may be far off; see the certified intervals'
    """
    if not n_flagged:
        return None
    return (f"{n_flagged} of {n} prompts have a parsed answer not certified to {target:.0%} (residual / parsed mass "
            "above it): their given-a-parse shares may be far off; see the certified intervals")


def interval_text(interval: Sequence[float] | None, digits: int = 2) -> str:
    """``[lo, hi]`` for a table cell ("n/a" for a missing or NaN interval).

    >>> interval_text((0.1234, 0.5)), interval_text(None)
    ('[0.12, 0.50]', 'n/a')
    """
    if interval is None or any(math.isnan(float(x)) for x in interval):
        return "n/a"
    return f"[{float(interval[0]):.{digits}f}, {float(interval[1]):.{digits}f}]"


def conditional_vertices(probs: Sequence[float], residual: float) -> np.ndarray:
    """The vertices of the answers' distribution given a parse over every split of ``residual``, one row each.

    ``A = sum(probs) > 0``: ``probs / (A + r) + r / (A + r) e_j`` (one row when ``r = 0``). ``A = 0 < r``:
    every pure answer and the zero row (the prompt may never parse: it drops out). ``A = r = 0``: no row
    (the prompt never parses).

    >>> conditional_vertices([0.0, 0.0], 0.1).tolist()
    [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]
    >>> conditional_vertices([0.5, 0.5], 0.0).tolist()
    [[0.5, 0.5]]
    """
    p = np.asarray(probs, dtype=float)
    r = max(0.0, float(residual))
    a, k = float(p.sum()), p.shape[0]
    if a <= 0:
        return np.vstack([np.eye(k), np.zeros((1, k))]) if r > 0 else np.zeros((0, k))
    if r <= 0:
        return (p / a)[None, :]
    return p / (a + r) + np.eye(k) * (r / (a + r))


def ratio_range(num: Sequence[np.ndarray], den: Sequence[np.ndarray], num0: float = 0.0,
                den0: float = 0.0) -> tuple[float, float]:
    """The exact range of ``(num0 + sum_i num_i[v_i]) / (den0 + sum_i den_i[v_i])`` over every choice of one
    vertex ``v_i`` per prompt (``num_i``, ``den_i``: the prompt's terms at each of its vertices).

    Over a product of polytopes a linear-fractional objective is extreme at vertices; Dinkelbach's method
    finds them exactly (each step picks, per prompt, the vertex best for ``num - lam den``, and ``lam``
    rises strictly until no choice beats it). Returns ``(nan, nan)`` when the denominator can reach zero
    (the metric is undefined for some split) and for no prompts with a zero ``den0``.

    >>> ratio_range([np.array([0.0, 1.0])], [np.array([1.0, 1.0])], num0=1.0, den0=1.0)
    (0.5, 1.0)
    """
    num = [np.asarray(x, dtype=float) for x in num]
    den = [np.asarray(x, dtype=float) for x in den]
    if den0 + math.fsum(float(d.min()) for d in den) <= _TINY:
        return math.nan, math.nan
    hi = _dinkelbach(num, den, num0, den0)
    lo = -_dinkelbach([-x for x in num], den, -num0, den0)
    return lo, hi


def _dinkelbach(num: list[np.ndarray], den: list[np.ndarray], num0: float, den0: float) -> float:
    """The maximum of the ratio (denominator positive at every choice)."""
    pick = [0] * len(num)
    lam = _ratio(num, den, num0, den0, pick)
    for _ in range(10_000):  # finite: each step strictly improves over a finite set of vertex choices
        pick = [int(np.argmax(n - lam * d)) for n, d in zip(num, den)]
        new = _ratio(num, den, num0, den0, pick)
        if new <= lam + 1e-15 * max(1.0, abs(lam)):
            return max(lam, new)
        lam = new
    raise RuntimeError("ratio_range: Dinkelbach's method did not converge")


def _ratio(num: list[np.ndarray], den: list[np.ndarray], num0: float, den0: float, pick: list[int]) -> float:
    n = num0 + math.fsum(float(x[v]) for x, v in zip(num, pick))
    d = den0 + math.fsum(float(x[v]) for x, v in zip(den, pick))
    return n / d


def share_range(values: Sequence[Sequence[float]]) -> tuple[float, float]:
    """The range of a mean over prompts of one value each, every prompt's value at any of its vertices
    (a linear metric: each prompt at its own extreme). ``(nan, nan)`` with no prompts."""
    if not values:
        return math.nan, math.nan
    n = len(values)
    return (math.fsum(min(v) for v in values) / n, math.fsum(max(v) for v in values) / n)


def interval_mean(intervals: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The range of a mean of independent quantities, each in its interval (NaN ones left out, as a mean
    over dimensions leaves out an undefined dimension only when it is undefined at every split)."""
    finite = [(lo, hi) for lo, hi in intervals if not (math.isnan(lo) or math.isnan(hi))]
    if not finite:
        return math.nan, math.nan
    return (math.fsum(lo for lo, _ in finite) / len(finite), math.fsum(hi for _, hi in finite) / len(finite))


def contains(interval: Sequence[float], value: Any, tol: float = 1e-9) -> bool:
    """True when ``value`` lies in ``interval`` (up to ``tol``); NaN values are not contained."""
    lo, hi = float(interval[0]), float(interval[1])
    v = float(value)
    return not math.isnan(v) and lo - tol <= v <= hi + tol
