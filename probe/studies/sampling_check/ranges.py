"""The sampling check's verdict: the exact side's draws of the sampled metrics on the same prompts, the joint
ranges that hold them, and how often a right exact side leaves them by chance."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy.stats import norm

from probe.metrics.hybrid import drawn_shares, has_draws, hybrid_probs
from probe.metrics.stats import percentile_ci
from probe.studies.sampling_check.rows import inside
from probe.tasks.paper_check import PaperCheck, PromptCase

__all__ = ["chance_outside", "detectable_difference", "draw_quantile", "joint_ranges", "predicted_draws",
           "predicted_range", "redrawn"]

def predicted_range(paper: PaperCheck, units: dict[str, list[PromptCase]], k: int, rng: np.random.Generator,
                    draws: int = 1000, level: float = 0.95) -> dict[str, tuple[float, float]]:
    """Where the sampled metrics would fall if the exact side were the truth: each draw samples, for every
    prompt of the check (the same prompts, not resampled), how many of its K generations parse (binomial in
    its parsed mass) and their answers (multinomial in its distribution given a parse), then the metrics;
    the central ``level`` range of each metric over ``draws``. This is the noise a same-prompts comparison
    has; the unit bootstrap also spreads over which items were drawn, and it can not see an answer the
    sample missed (a rare answer of one prompt).

    Needs the cases' ``exact_mass`` (the chance a generation is read) and ``exact`` (the distribution given
    that it is)."""
    return {m: percentile_ci(v, level) for m, v in predicted_draws(paper, units, k, rng, draws).items()}


def predicted_draws(paper: PaperCheck, units: dict[str, list[PromptCase]], k: int, rng: np.random.Generator,
                    draws: int = 1000, tail: bool = False) -> dict[str, list[float]]:
    """The draws behind :func:`predicted_range`: per metric, its value in each of ``draws`` simulated K-sample
    runs on these prompts. With ``tail``, each draw first redraws every hybrid prompt's answer from its tail
    draws' uncertainty (:func:`redrawn`), so the range holds the exact side's own 95 % interval as well as
    the K-sample noise."""
    vals: dict[str, list[float]] = {}
    flat = [(u, c) for u, cs in units.items() for c in cs]
    for _ in range(draws):
        rows = []
        for u, c in flat:
            d = None
            exact, mass = redrawn(paper, c, rng) if tail else (c.exact, c.exact_mass)
            if exact is not None and mass > 0:
                n = int(rng.binomial(k, min(1.0, float(mass))))
                if n:
                    p = np.clip(np.asarray(exact, float), 0.0, None)
                    d = rng.multinomial(n, p / p.sum()) / n
            rows.append((u, c, d))
        for m, v in paper.metrics(rows).items():
            vals.setdefault(m, []).append(v)
    return vals


def redrawn(paper: PaperCheck, case: PromptCase, rng: np.random.Generator) -> tuple[list[float] | None, float]:
    """One draw of a hybrid prompt's answer (its distribution given a parse, and its parsed mass): the head plus
    the residual times tail shares drawn from the prompt's own draws, as the published interval draws them
    (:func:`probe.metrics.hybrid.drawn_shares`); the case's own values for a prompt without tail draws."""

    d = case.meta.get("parsed")
    if not has_draws(d):
        return case.exact, case.exact_mass
    shares = drawn_shares(d, rng, paper.answer_keys(case))
    raw = paper.answer_masses(case, hybrid_probs(d, shares=shares))
    mass = math.fsum(raw)
    return ([x / mass for x in raw], mass) if mass > 0 else (None, 0.0)


def draw_quantile(value: float, draws: Sequence[float]) -> float:
    """Where ``value`` falls among ``draws`` (NaN draws left out): the share below it plus half the share
    equal to it (mid-rank), so a value drawn like them is uniform on [0, 1] and seeds' quantiles pool; NaN
    when the value or every draw is NaN.

    >>> draw_quantile(2.0, [1.0, 2.0, 3.0, 4.0]), draw_quantile(0.0, [1.0, float("nan")]), draw_quantile(5.0, [1.0])
    (0.375, 0.0, 1.0)
    """
    v = np.asarray([x for x in draws if x == x], float)
    if value != value or v.size == 0:
        return math.nan
    return float(((v < value).sum() + 0.5 * (v == value).sum()) / v.size)


#: z of 80 % power: a true shift of (z of the test + this) standard deviations of the same-prompts draws is
#: detected four times in five
_POWER_Z80 = 0.841621


def detectable_difference(draws: Sequence[float], level: float = 0.95) -> float:
    """The smallest shift of a metric the same-prompts test detects with 80 % power, from its draws under the
    exact side (normal approximation: ``(z_(1 - (1 - level) / 2) + z_0.8) x sd``), where ``level`` is the
    metric's own range level (:func:`joint_ranges`); NaN without spread.

    >>> round(detectable_difference([0.0, 1.0] * 50), 3)
    1.408
    """

    v = np.asarray([x for x in draws if x == x], float)
    z = float(norm.ppf(1.0 - (1.0 - level) / 2.0)) + _POWER_Z80
    return float(z * v.std(ddof=1)) if v.size > 1 else math.nan


def joint_ranges(draws: dict[str, list[float]], level: float = 0.95, resolution: float = 0.0,
                 steps: int = 40) -> tuple[dict[str, tuple[float, float]], float]:
    """Ranges that hold every tested metric at once in ``level`` of the exact side's draws, and the one
    per-metric level they share.

    The verdict fails when any metric leaves its range, so ranges of 95 % each would fail a right exact side
    in up to 1 - 0.95^n of runs (35 % for 8 metrics). Each metric's range is its central range at a common
    per-metric level: the smallest on an even grid from ``level`` to the Bonferroni level
    ``1 - (1 - level) / n`` at which at least ``level`` of the draws have every tested metric inside (metrics
    move together, so it is usually below Bonferroni's; Bonferroni's when the grid never reaches ``level``).
    Tested metrics and "inside" are as in :func:`chance_outside`; the others get their central ``level``
    range.

    >>> d = {"a": [float(i) for i in range(1001)], "b": [float(i) for i in range(1001)], "n a": [1] * 1001}
    >>> r, each = joint_ranges(d)
    >>> each, r["a"] == r["b"]
    (0.95, True)
    """
    ranges = {m: percentile_ci(v, level) for m, v in draws.items()}
    names = [m for m in ranges if not m.startswith("n") and all(math.isfinite(x) for x in ranges[m])]
    n = min((len(draws[m]) for m in names), default=0)
    if len(names) < 2 or n == 0:
        return ranges, level
    values = {m: np.asarray(draws[m][:n], float) for m in names}
    bonferroni = 1.0 - (1.0 - level) / len(names)
    for each in np.linspace(level, bonferroni, steps + 1):
        trial = {m: percentile_ci(values[m], float(each)) for m in names}
        out = np.zeros(n, bool)
        for m in names:
            lo, hi = trial[m]
            v = values[m]
            # a NaN draw is inside, as in :func:`chance_outside`; a draw on an end stays in despite the
            # quantile's interpolation rounding
            slack = resolution + 1e-12 * (1.0 + max(abs(lo), abs(hi)))
            out |= np.isfinite(v) & ((v < lo - slack) | (v > hi + slack))
        if 1.0 - out.mean() >= level - 1e-12:
            ranges.update(trial)
            return ranges, float(each)
    ranges.update({m: percentile_ci(values[m], bonferroni) for m in names})
    return ranges, float(bonferroni)


def chance_outside(draws: dict[str, list[float]], ranges: dict[str, tuple[float, float]], observed: int,
                   resolution: float = 0.0) -> dict[str, Any]:
    """How often metrics fall outside their ranges by chance alone: over the exact side's draws (the ones the
    ``ranges`` come from, :func:`predicted_draws`), the share of draws in which at least one of the tested
    metrics lies outside its own range (the verdict's false-alarm rate when the exact side is right), and the
    share in which at least ``observed`` do (how surprising the observed count is). Count metrics (names
    starting with ``n``) and metrics without a finite range are not tested; a NaN draw is inside.

    >>> d = {"a": [0.0, 1.0, 2.0, 3.0], "b": [0.0, 0.0, 5.0, 5.0], "n a": [1, 2, 3, 4]}
    >>> chance_outside(d, {"a": (0.5, 2.5), "b": (0.0, 4.0), "n a": (2, 3)}, 2)
    {'n_tested': 2, 'n_outside_range': 2, 'chance_any_outside': 0.75, 'chance_as_many_outside': 0.25}
    """
    names = [m for m in ranges if not m.startswith("n") and m in draws
             and all(math.isfinite(x) for x in ranges[m])]
    n = min((len(draws[m]) for m in names), default=0)
    if not names or n == 0:
        return {"n_tested": len(names), "n_outside_range": int(observed), "chance_any_outside": math.nan,
                "chance_as_many_outside": math.nan}
    counts = np.zeros(n, int)
    for m in names:
        lo, hi = ranges[m]
        counts += [inside(float(v), lo, hi, resolution) is False for v in draws[m][:n]]
    need = max(1, int(observed))
    return {"n_tested": len(names), "n_outside_range": int(observed),
            "chance_any_outside": float(np.mean(counts >= 1)), "chance_as_many_outside": float(np.mean(counts >= need))}


def _n_outside(agg: dict) -> int:
    """How many metrics the verdict finds outside their range."""
    return sum(v.get("sampled_inside_tail", v.get("sampled_inside_predicted")) is False for v in agg.values())


def _verdict(agg: dict) -> str:
    """``pass`` when every aggregate metric's sampled value lies in the exact side's same-prompts range (with
    hybrid prompts: the range that holds the tail draws' uncertainty too), ``fail`` when one does not, ``n/a``
    when none could be tested (the unit bootstrap is for information only)."""
    tested = [v.get("sampled_inside_tail", v.get("sampled_inside_predicted")) for v in agg.values()]
    tested = [t for t in tested if t is not None]
    return "n/a" if not tested else "pass" if all(tested) else "fail"
