"""One prompt's row of the sampling check: its K generations parsed and set against the exact side."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from probe.metrics.hybrid import has_draws, prompt_estimate
from probe.scoring.parse.hybrid import wilson
from probe.tasks.paper_check import PaperCheck, PromptCase

__all__ = ["agreement", "generate_z", "inside", "parse_mass_interval", "prompt_row", "published_against", "tv_distance"]


def inside(value: float, lo: float, hi: float, resolution: float) -> bool | None:
    """Whether ``value`` lies in ``[lo, hi]`` widened by ``resolution`` (one generation's worth of a share,
    ``1 / (K x prompts)``): a sampled interval is a set of finite-sample values, so a degenerate one
    (every resample 0) still holds an exact 1e-14. None when either side is NaN.

    >>> inside(1e-14, 0.0, 0.0, 1 / 2400), inside(0.2, 0.0, 0.0, 1 / 2400), inside(0.5, 0.1, 0.9, 0.0)
    (True, False, True)
    """
    if value != value or lo != lo or hi != hi:
        return None
    return bool(lo - resolution <= value <= hi + resolution)


def tv_distance(p: Sequence[float], q: Sequence[float]) -> float:
    """Total variation distance ``0.5 * sum |p_i - q_i|``; for two options ``|p_0 - q_0|``.

    >>> round(tv_distance([0.7, 0.3], [0.5, 0.5]), 12), tv_distance([1, 0, 0], [0, 0.5, 0.5])
    (0.2, 1.0)
    """
    return float(0.5 * np.abs(np.asarray(p, float) - np.asarray(q, float)).sum())


def _dist(answers: np.ndarray, n_options: int) -> np.ndarray | None:
    """Distribution of the accepted answers (-1 = not accepted); None when none is accepted."""
    ok = answers[answers >= 0]
    if ok.size == 0:
        return None
    return np.bincount(ok, minlength=n_options)[:n_options] / ok.size


def prompt_row(paper: PaperCheck, c: PromptCase, gen: list[str], rng: np.random.Generator) -> tuple[dict, Any]:
    """One prompt's row of the check (its K generations ``gen`` parsed and compared with the exact side) and
    its sampled answer distribution (None when no generation parses). A prompt whose sampled answers parse
    where the enumeration found no parse at all is a ``miss``, with |Δ| = 1: the exact side gives it no
    distribution, which is as far off as one can be (it is not left out)."""
    k = len(gen)
    parsed = [paper.parse(c, t) for t in gen]
    counted = [paper.counted(c, t) for t in gen]
    a = np.array([-1 if x is None else int(x) for x in parsed])
    d = _dist(a, len(c.options))
    n_acc = int((a >= 0).sum())
    # a hybrid prompt whose head and tail draws read nothing can still parse: judged on its interval instead
    lo_hi = parse_mass_interval(c)
    miss = d is not None and c.exact is None and lo_hi is None
    delta = 1.0 if miss else tv_distance(d, c.exact) if d is not None and c.exact is not None else math.nan
    base = c.meta.get("baseline")
    rec = c.meta.get("parsed")
    residual = c.meta.get("parse_residual", rec.get("residual") if isinstance(rec, dict) else None)
    return {
        "baseline_probs": base,
        "baseline_abs_delta": tv_distance(d, base) if d is not None and base is not None else math.nan,
        "id": c.id, "unit": c.unit, "options": list(c.options),
        "accepted_share": n_acc / k, "counted_share": float(np.mean(counted)),
        "exact_counted_share": c.exact_mass,
        # the mass the enumeration left (its point rule answers it in the enumerated mix)
        "exact_residual": None if residual is None else float(residual),
        "accepted_not_counted": int(sum(x is not None and not y for x, y in zip(parsed, counted))),
        "counted_not_accepted": int(sum(x is None and y for x, y in zip(parsed, counted))),
        "sampled_probs": None if d is None else [float(x) for x in d],
        "exact_probs": c.exact, "abs_delta": delta, "miss": miss,
        **({"exact_mass_interval": list(lo_hi),
            "accepted_inside_interval": _overlaps(wilson(n_acc, k), lo_hi)} if lo_hi is not None else {}),
        "noise_delta": _noise_delta(c.exact, n_acc, rng) if c.exact is not None and n_acc else math.nan,
        "published": published_against(paper, c, a, k),
        "generations": gen, "parsed": [None if x is None else c.options[x] for x in parsed], "counted": counted,
    }, d


def parse_mass_interval(case: PromptCase) -> tuple[float, float] | None:
    """A hybrid prompt's 95 % interval of its parsed mass (the chance one sample parses), as published
    (:func:`probe.metrics.hybrid.prompt_estimate`); None for a prompt without tail draws."""
    d = case.meta.get("parsed")
    if not has_draws(d):
        return None
    _p, lo, hi, _se = prompt_estimate(d, [])["parse rate"]
    return lo, hi


def generate_z(point: float, se: float, share: float, k: int) -> float:
    """How far a published value lies from a share of ``k`` sampled generations, in their joint standard
    errors; the sampled share's error is never 0 (0 of 200 is not known to be 0: half a generation's worth).

    >>> round(generate_z(0.5, 0.05, 0.4, 100), 2)
    1.43
    """
    floor = 0.5 / k * (1 - 0.5 / k)
    gse = math.sqrt(max(share * (1 - share), floor) / k)
    return (point - share) / math.sqrt(se * se + gse * gse)


def published_against(paper: PaperCheck, c: PromptCase, answers: np.ndarray, k: int) -> dict:
    """A parse-exact prompt's published parse rate and each option's share of all generations (point, 95 %
    interval of the paper's K-sample share: :func:`probe.metrics.hybrid.prompt_estimate`) against the shares
    of the ``k`` sampled answers
    (index per generation, -1: none): per quantity the sampled share, ``z`` (:func:`generate_z`) and whether
    the interval covers it. Empty without a parse record, or for one whose residual nothing answers."""
    d = c.meta.get("parsed")
    # the paper's K (recorded with the tail) makes the interval that of the paper's K-sample share
    k_paper = (d.get("hybrid") or {}).get("samples") if isinstance(d, dict) else None
    est = prompt_estimate(d, paper.answer_keys(c), k=k_paper) if isinstance(d, dict) else None
    if est is None:
        return {}
    sampled = {"parse rate": float((answers >= 0).mean())}
    sampled.update({key: float((answers == i).mean()) for i, key in enumerate(paper.answer_keys(c))})
    return {q: {"point": p, "low": lo, "high": hi, "sampled": sampled[q], "z": generate_z(p, se, sampled[q], k),
                "covered": bool(lo - 1e-12 <= sampled[q] <= hi + 1e-12)} for q, (p, lo, hi, se) in est.items()}


def agreement(rows: Sequence[dict]) -> dict:
    """Over every prompt and quantity of :func:`published_against`: how many, the share with ``|z| <= 2``, the
    mean signed z and the share whose published interval covers the sampled share (empty without any)."""
    cells = [v for r in rows for v in (r.get("published") or {}).values()]
    if not cells:
        return {}
    z = np.array([v["z"] for v in cells], float)
    return {"n": len(cells), "within_2": float(np.mean(np.abs(z) <= 2)), "mean_z": float(z.mean()),
            "covered": float(np.mean([v["covered"] for v in cells]))}


def _overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return bool(a[0] <= b[1] and b[0] <= a[1])


def _noise_delta(p: Sequence[float], n: int, rng: np.random.Generator, draws: int = 200) -> float:
    """Mean TV distance between ``p`` and the empirical distribution of ``n`` draws from it (sampling noise)."""
    if n <= 0:
        return math.nan
    x = rng.multinomial(n, np.asarray(p, float) / np.sum(p), size=draws) / n
    return float(0.5 * np.abs(x - np.asarray(p, float)).sum(axis=1).mean())
