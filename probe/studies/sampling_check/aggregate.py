"""The sampling check's aggregate comparison and summary, assembled from its per-prompt rows: each side's
metrics, the unit bootstrap of the sampled side, the verdict's ranges and the counts a reader weighs them with."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from probe.metrics.hybrid import has_draws
from probe.metrics.stats import percentile_ci, resample_clusters
from probe.studies.sampling_check.exact import outside_certified
from probe.studies.sampling_check.ranges import (_n_outside, _verdict, chance_outside, detectable_difference,
                                                 draw_quantile, joint_ranges, predicted_draws)
from probe.studies.sampling_check.rows import agreement, inside
from probe.tasks.paper_check import PaperCheck, PromptCase

__all__ = ["compare_sides"]

#: an aggregate metric's fields from the exact side's same-prompts draws, and from its draws with the hybrid
#: tail's uncertainty: the range, the sampled value inside it, the power, the quantile, the metric's own 95 %
_PREDICTED_KEYS = ("predicted_low", "predicted_high", "sampled_inside_predicted", "detectable_difference",
                   "sampled_quantile", "predicted_95_low", "predicted_95_high")
_TAIL_KEYS = ("tail_low", "tail_high", "sampled_inside_tail", "tail_detectable_difference",
              "tail_sampled_quantile", "tail_95_low", "tail_95_high")


def compare_sides(paper: PaperCheck, cases: list[PromptCase], rows: list[dict], sampled_dist: dict[str, Any],
                  k: int, n_boot: int, rng: np.random.Generator, n_generations: int) -> tuple[dict, dict]:
    """The check's aggregate (per metric: exact, sampled, the unit bootstrap's interval and the verdict's
    ranges) and its summary, from the cases, their rows and their sampled answer distributions; ``rng`` is
    the run's, read after the rows' (the bootstrap, then the exact side's draws)."""
    sides = _sides(paper, cases, sampled_dist, k)
    boots = _unit_bootstrap(paper, sides.units, sampled_dist, sides.sampled, n_boot, rng)
    ranges = _verdict_ranges(paper, cases, sides.units, k, n_boot, rng)
    agg = _aggregate(sides, boots, ranges)
    return agg, _summary(paper, cases, rows, sides, agg, ranges, k, n_generations)


@dataclass
class _Sides:
    """The metrics each side gives on the check's prompts, and the units they are grouped in."""

    units: dict[str, list[PromptCase]]
    exact: dict
    exact_same: dict
    baseline: dict
    has_base: bool
    sampled: dict


def _sides(paper: PaperCheck, cases: list[PromptCase], sampled_dist: dict[str, Any], k: int) -> _Sides:
    exact = paper.exact_metrics(cases, k)
    # the exact estimate on the prompts the sampled run could score (separates coverage from estimator)
    exact_same = paper.metrics([(u, c, np.asarray(c.exact)) for u, cs in paper.units(cases).items() for c in cs
                                  if c.exact is not None and sampled_dist[c.id] is not None]) \
        if paper.same_prompts else {}
    units = paper.units(cases)
    # the estimator the exact side replaced (first-token / scored answer texts), where the task's check keeps it
    has_base = any(c.meta.get("baseline") is not None for c in cases)
    baseline = paper.metrics([(u, c, None if c.meta.get("baseline") is None else np.asarray(c.meta["baseline"]))
                                for u, cs in units.items() for c in cs]) if has_base else {}
    sampled = paper.metrics([(u, c, sampled_dist[c.id]) for u, cs in units.items() for c in cs])
    return _Sides(units, exact, exact_same, baseline, has_base, sampled)


def _unit_bootstrap(paper: PaperCheck, units: dict[str, list[PromptCase]], sampled_dist: dict[str, Any],
                    metrics: dict, n_boot: int, rng: np.random.Generator) -> dict[str, list[float]]:
    """Per metric, its value in each of ``n_boot`` resamples of the units."""
    # bootstrap over units (with replacement), each unit keeping its own K sampled answers: a unit's value
    # already carries its K-sample noise, so resampling the answers again would count that noise twice (and,
    # for a threshold count like HBB's S >= 20, shift the whole interval up)
    keys = list(units)
    boots: dict[str, list[float]] = {m: [] for m in metrics}
    for _ in range(n_boot):
        pick = resample_clusters(rng, len(keys))
        brows = []
        for copy, u in enumerate(pick):
            for c in units[keys[u]]:
                brows.append((f"{keys[u]}#{copy}", c, sampled_dist[c.id]))
        for m, v in paper.metrics(brows).items():
            boots[m].append(v)
    return boots


@dataclass
class _Ranges:
    """The verdict's draws and joint ranges: the exact side's same-prompts ones, and (with hybrid prompts) the
    ones with its tail's uncertainty too; ``res`` is one generation's worth of a share."""

    res: float
    pdraws: dict[str, list[float]]
    predicted: dict[str, tuple[float, float]]
    level_each: float
    tdraws: dict[str, list[float]]
    with_tail: dict[str, tuple[float, float]]
    tail_level_each: float


def _verdict_ranges(paper: PaperCheck, cases: list[PromptCase], units: dict[str, list[PromptCase]], k: int,
                    n_boot: int, rng: np.random.Generator) -> _Ranges:
    # the verdict: the exact side's prediction of the sampled value on these very prompts, and its power
    res = 1.0 / (k * len(cases))
    pdraws = predicted_draws(paper, units, k, rng, n_boot)
    # ranges that hold all the metrics together in 95 % of runs: the verdict is one test, not one per metric
    predicted, level_each = joint_ranges(pdraws, resolution=res)
    # with hybrid prompts, the same range with the exact side's own tail uncertainty too (its 95 % interval)
    tdraws = predicted_draws(paper, units, k, rng, n_boot, tail=True) \
        if any(has_draws(c.meta.get("parsed")) for c in cases) else {}
    with_tail, tail_level_each = joint_ranges(tdraws, resolution=res) if tdraws else ({}, 0.95)
    return _Ranges(res, pdraws, predicted, level_each, tdraws, with_tail, tail_level_each)


def _aggregate(sides: _Sides, boots: dict[str, list[float]], r: _Ranges) -> dict:
    """Per metric of the sampled side: a count's two values, or the comparison (:func:`_metric_entry`)."""
    agg = {}
    for m, v in sides.sampled.items():
        if m.startswith("n"):
            agg[m] = {"sampled": v, "exact": sides.exact.get(m)}
            continue
        agg[m] = _metric_entry(m, v, sides, boots[m], r)
    return agg


def _metric_entry(m: str, v: float, sides: _Sides, boots: list[float], r: _Ranges) -> dict:
    """One metric's comparison: exact against the unit bootstrap's interval, the sampled value against the
    verdict's ranges, and the estimator the exact side replaced."""
    lo, hi = percentile_ci(boots)
    ex = sides.exact.get(m, math.nan)
    base = sides.baseline.get(m, math.nan)
    return {"exact": ex, "sampled": v, "ci_low": lo, "ci_high": hi,
            "exact_inside": inside(ex, lo, hi, r.res),
            "exact_same_prompts": sides.exact_same.get(m),
            **(_range_fields(_PREDICTED_KEYS, v, r.pdraws[m], r.predicted[m], r.level_each, r.res)
               if m in r.predicted else {}),
            # the verdict's power where the tail's range is the verdict
            **(_range_fields(_TAIL_KEYS, v, r.tdraws[m], r.with_tail[m], r.tail_level_each, r.res)
               if m in r.with_tail else {}),
            **({"baseline": base, "baseline_inside": inside(base, lo, hi, r.res)} if sides.has_base else {})}


def _range_fields(keys: Sequence[str], value: float, draws: list[float], lo_hi: tuple[float, float],
                  level_each: float, res: float) -> dict:
    """``keys`` named: the range's ends, whether ``value`` lies inside, the smallest difference it detects,
    where ``value`` falls among the draws (0.5: at their median; uniform when the exact side is right, so
    seeds pool: experiments/*/pool_seeds.py) and the metric's own central 95 % range (for information: the
    verdict's is joint)."""
    lo, hi = lo_hi
    return dict(zip(keys, (lo, hi, inside(value, lo, hi, res), detectable_difference(draws, level_each),
                           draw_quantile(value, draws), *percentile_ci(draws))))


def _summary(paper: PaperCheck, cases: list[PromptCase], rows: list[dict], sides: _Sides, agg: dict,
             ranges: _Ranges, k: int, n_generations: int) -> dict:
    """The check's summary: the per-prompt shares and |Δ| over the prompts, the counts, and the verdict."""
    deltas = np.array([r["abs_delta"] for r in rows], float)
    noise = np.array([r["noise_delta"] for r in rows], float)
    return {
        "n_prompts": len(cases), "n_units": len(sides.units), "k": k, "n_generations": n_generations,
        "accepted_share": float(np.mean([r["accepted_share"] for r in rows])),
        "counted_share": float(np.mean([r["counted_share"] for r in rows])),
        "exact_counted_share": float(np.mean([r["exact_counted_share"] for r in rows])),
        "accepted_not_counted": int(sum(r["accepted_not_counted"] for r in rows)),
        "counted_not_accepted": int(sum(r["counted_not_accepted"] for r in rows)),
        "mean_abs_delta": _finite_mean(deltas),
        "mean_noise_delta": _finite_mean(noise),
        "n_delta": int(np.isfinite(deltas).sum()),
        **({"mean_abs_delta_baseline": _finite_mean([r["baseline_abs_delta"] for r in rows])} if sides.has_base else {}),
        **({"parse_exact": paper.parse_stats} if getattr(paper, "parse_stats", None) else {}),
        "n_no_accepted": int(sum(r["sampled_probs"] is None for r in rows)),
        "n_exact_unsampleable": int(sum(c.exact is None for c in cases)),
        "n_misses": int(sum(r["miss"] for r in rows)),
        "delta_noise_ratio": _ratio(deltas, noise),
        "n_outside_certified": int(sum(outside_certified(paper, c) for c in cases)),
        "n_hybrid": int(sum(has_draws(c.meta.get("parsed")) for c in cases)),
        "n_judged_on_interval": int(sum("exact_mass_interval" in r and r["sampled_probs"] is not None and
                                        r["exact_probs"] is None for r in rows)),
        "n_accepted_outside_interval": int(sum(r.get("accepted_inside_interval") is False for r in rows)),
        # the published parse rate and answer shares against the sampled ones, prompt by prompt
        **({"published_vs_sampled": a} if (a := agreement(rows)) else {}),
        "verdict": _verdict(agg),
        # how often the verdict's ranges miss by chance alone (about 5 %: they are joint), and how often as
        # many metrics as observed do: a reader weighs a failed verdict with them
        **chance_outside(ranges.tdraws or ranges.pdraws, ranges.with_tail or ranges.predicted,
                         _n_outside(agg), ranges.res),
        # the per-metric level of the verdict's ranges (:func:`joint_ranges`)
        "range_level_each": ranges.tail_level_each if ranges.tdraws else ranges.level_each,
    }


def _ratio(deltas: np.ndarray, noise: np.ndarray) -> float:
    """Mean per-prompt |Δ| over mean K-sample noise |Δ|, on the prompts where both are finite (a miss has no
    noise: it is counted apart); NaN when none is.

    >>> _ratio(np.array([0.2, 1.0, 0.1]), np.array([0.1, np.nan, 0.2]))
    1.0
    """
    ok = np.isfinite(deltas) & np.isfinite(noise)
    return float(deltas[ok].mean() / noise[ok].mean()) if ok.any() and noise[ok].mean() > 0 else math.nan


def _finite_mean(values: Any) -> float:
    """The mean of the finite values; NaN (and no warning) when there is none."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else math.nan
