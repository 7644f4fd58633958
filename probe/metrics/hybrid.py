"""The published estimator of a paper's sampled-and-parsed quantity: exact head plus each prompt's own tail.

A parse record with a ``hybrid`` entry (:mod:`probe.scoring.parse.hybrid`) holds the
enumerated answer masses ``probs``, the ``residual`` not enumerated and the
answers of ``n_tail`` generations drawn from that residual (``tail``: answer ->
count, ``"none"`` for no answer). Per answer the estimate is
``probs[a] + residual x tail[a] / n_tail`` (:func:`hybrid_probs`): unbiased, and
the prompt's own draws answer its own residual. A record whose tail drew nothing
because its residual was at or below the target (:func:`closed`) is its exact
head. A record without a ``hybrid`` entry (an exact-only run) has nothing that
answers its residual: the head alone, or a caller's ``fallback`` (the
renormalising rule, :func:`probe.metrics.certified.point_answer`, kept as a
named sensitivity, never the published point).

**No number from nothing** (:func:`answered`): a prompt whose head parsed no
mass and whose tail draws read no answer has no answer given a parse; a metric
that needs one leaves the prompt out and counts it, and a metric with no prompt
left is undefined (:func:`undefined_text`: ``n/a: nothing parsed, 8 of 8 questions``).

**The interval** (:func:`hybrid_metric`), per prompt: the metric is recomputed
``n_boot`` times with each prompt's tail shares drawn from its own draws alone
(:func:`drawn_shares`: the share read as any answer from Jeffreys'
``Beta(answered + 1/2, none + 1/2)``, the split between the answers from
``Dirichlet(counts + 1/2)`` over the answers seen and those the parser can read,
so an answer no draw hit still has width); nothing is pooled across prompts.
The spread of those recomputations is the tail's standard error; where the
published number is the paper's K-sample estimate, its K-sample variance
(``noise``) is added. The interval is ``point +- 1.96 x`` that standard error:
the point lies inside by construction, at its centre unless the metric's own
range (``limits``) cuts a side. Every prompt closed and no K-sample noise:
width 0 (the value is exact). The certified interval
(:mod:`probe.metrics.certified`) stays beside it as the guarantee; the two are
different statements and neither is clipped to the other. Seeded, so a run's
interval is the same on every resume.

>>> d = {"probs": {"A": 0.5}, "rejected": 0.1, "residual": 0.4, "hybrid": {"n_tail": 4, "tail": {"A": 1, "none": 3}}}
>>> hybrid_probs(d)
{'A': 0.6}
>>> answered(d), answered({"probs": {}, "residual": 0.9, "hybrid": {"n_tail": 9, "tail": {"none": 9}}})
(True, False)
"""

from __future__ import annotations

import math
from typing import Any, Callable, Hashable, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

__all__ = ["HybridValue", "Z95", "answered", "closed", "drawn_shares", "has_draws", "hybrid_metric", "hybrid_probs",
           "prompt_estimate", "tail_counts", "undefined_text", "clipped"]

ProbsOf = Callable[[Mapping[str, Any]], Mapping[str, float]]

#: the two-sided 95 % normal quantile
Z95 = 1.959963984540054


def has_draws(parsed: Any) -> bool:
    """Whether a parse record's residual was estimated by tail draws."""
    h = parsed.get("hybrid") if isinstance(parsed, Mapping) else None
    return isinstance(h, Mapping) and int(h.get("n_tail") or 0) > 0


def closed(parsed: Any) -> bool:
    """Whether a parse record is exact: its residual is 0, or its tail drew nothing because the residual was at
    or below the target (:func:`probe.scoring.parse.hybrid.tail_budget`)."""
    if not isinstance(parsed, Mapping):
        return False
    h = parsed.get("hybrid")
    return float(parsed.get("residual", 1.0)) <= 0 or (isinstance(h, Mapping) and int(h.get("n_tail") or 0) == 0)


def tail_counts(parsed: Mapping[str, Any]) -> tuple[int, int]:
    """A record's tail draws that read an answer, and all its tail draws (0, 0 without draws)."""
    if not has_draws(parsed):
        return 0, 0
    h = parsed["hybrid"]
    n = int(h["n_tail"])
    return n - int(h["tail"].get("none", 0)), n


def answered(parsed: Any) -> bool:
    """Whether a prompt's answer given a parse rests on something: enumerated parsed mass, or a tail draw that
    read an answer. False: its answer is undefined (counted, never a number)."""
    if not isinstance(parsed, Mapping):
        return False
    head = math.fsum(float(v) for v in (parsed.get("probs") or {}).values())
    return head > 0 or tail_counts(parsed)[0] > 0


def hybrid_probs(parsed: Mapping[str, Any], fallback: ProbsOf | None = None,
                 shares: Mapping[str, float] | None = None) -> dict[str, float]:
    """Per answer the head's mass plus the residual times the tail's share of it (``shares``; default the
    draws' shares). A record without draws: its head (exact when :func:`closed`), or ``fallback(parsed)`` for
    one that is not closed when a fallback is given (a sensitivity rule, not the published estimator)."""
    if not has_draws(parsed):
        if fallback is not None and not closed(parsed):
            return dict(fallback(parsed))
        return {str(a): float(p) for a, p in parsed["probs"].items()}
    h = parsed["hybrid"]
    if shares is None:
        n = int(h["n_tail"])
        shares = {a: c / n for a, c in h["tail"].items()}
    r = float(parsed["residual"])
    out = {str(a): float(p) for a, p in parsed["probs"].items()}
    for a, s in shares.items():
        if a != "none":
            out[a] = out.get(a, 0.0) + r * float(s)
    return out


def drawn_shares(parsed: Mapping[str, Any], rng: np.random.Generator, answers: Iterable[str] = ()
                 ) -> dict[str, float]:
    """One draw of a record's tail shares from its own draws: the share read as any answer from
    ``Beta(answered + 1/2, none + 1/2)`` (Jeffreys), split between the answers seen (head or tail) and the
    ``answers`` the parser can read by ``Dirichlet(counts + 1/2)``; the rest is "none"."""
    tail = parsed["hybrid"]["tail"]
    hit, n = tail_counts(parsed)
    share = float(rng.beta(hit + 0.5, n - hit + 0.5))
    cats = sorted({*map(str, parsed["probs"]), *map(str, tail), *map(str, answers)} - {"none"})
    if not cats:
        return {"none": 1.0}
    split = rng.dirichlet(np.array([float(tail.get(x, 0)) + 0.5 for x in cats]))
    return {**{x: share * float(s) for x, s in zip(cats, split)}, "none": 1.0 - share}


class HybridValue(NamedTuple):
    """A metric's published value: the point and its 95 % interval ``[lo, hi]`` (``point +- 1.96 se``, the
    standard error of the tail and, where given, the paper's K-sample noise); NaN where the metric is undefined."""

    point: float
    ci: list[float]


def hybrid_metric(metric: Callable[[ProbsOf], Mapping[Hashable, float]], fallback: ProbsOf | None = None,
                  n_boot: int = 200, seed: int = 0,
                  answers: Callable[[Mapping[str, Any]], Iterable[str]] | None = None,
                  noise: Callable[[ProbsOf], Mapping[Hashable, float]] | None = None,
                  limits: tuple[float, float] | Callable[[Hashable], tuple[float, float]] | None = None
                  ) -> dict[Hashable, HybridValue]:
    """Per key of ``metric``'s result: the hybrid point and its 95 % interval (:class:`HybridValue`).

    ``metric(probs_of)`` computes the task's numbers (a mapping, e.g. cell -> value; NaN where undefined) with
    ``probs_of(record)`` giving each parse record's answer masses; it is called once with :func:`hybrid_probs`
    and ``n_boot`` times with each record's tail shares redrawn from its own draws (the same draw for a record
    within one call). ``answers(record)``: the answers its parser can read (default: those seen). ``noise``:
    the variance of the paper's K-sample estimate of each key, at the point (added: the published number is
    that estimate). ``limits``: the metric's range (or a function of the key giving it), which cuts the
    interval. ``fallback``: see :func:`hybrid_probs`."""
    seen: dict[int, Mapping[str, Any]] = {}

    def point_probs(d: Mapping[str, Any]) -> Mapping[str, float]:
        if has_draws(d):
            seen[id(d)] = d
        return hybrid_probs(d, fallback)

    point = dict(metric(point_probs))
    var_k = {k: float(v) for k, v in (noise(point_probs) if noise is not None else {}).items()}
    samples = _redraws(metric, fallback, answers, point, n_boot, seed) if seen else {k: [] for k in point}
    out = {}
    for k, v in point.items():
        arr = np.asarray(samples[k], dtype=float)
        arr = arr[np.isfinite(arr)]
        var = (float(np.var(arr, ddof=1)) if arr.size > 1 else 0.0) + max(0.0, var_k.get(k, 0.0))
        out[k] = _value(float(v), math.sqrt(var), limits(k) if callable(limits) else limits)
    return out


def _redraws(metric: Callable[[ProbsOf], Mapping[Hashable, float]], fallback: ProbsOf | None,
             answers: Callable[[Mapping[str, Any]], Iterable[str]] | None, point: Mapping[Hashable, float],
             n_boot: int, seed: int) -> dict[Hashable, list[float]]:
    """The metric recomputed ``n_boot`` times, each record with draws given shares drawn from its own draws."""
    rng = np.random.default_rng(seed)
    samples: dict[Hashable, list[float]] = {k: [] for k in point}
    for _ in range(int(n_boot)):
        drawn: dict[int, dict[str, float]] = {}

        def probs_of(d: Mapping[str, Any]) -> Mapping[str, float]:
            if not has_draws(d):
                return hybrid_probs(d, fallback)
            if id(d) not in drawn:
                drawn[id(d)] = hybrid_probs(d, fallback, drawn_shares(d, rng, answers(d) if answers else ()))
            return drawn[id(d)]

        values = metric(probs_of)
        for k in samples:
            samples[k].append(float(values.get(k, math.nan)))
    return samples


def _value(point: float, se: float, limits: tuple[float, float] | None) -> HybridValue:
    """``point +- 1.96 se``, cut to ``limits``; NaN where the point is undefined."""
    if not math.isfinite(point):
        return HybridValue(math.nan, [math.nan, math.nan])
    lo, hi = point - Z95 * se, point + Z95 * se
    if limits is not None:
        lo, hi = max(lo, float(limits[0])), min(hi, float(limits[1]))
    return HybridValue(point, [lo, hi])


def prompt_estimate(parsed: Mapping[str, Any], options: Sequence[str], z: float = Z95, k: int | None = None
                    ) -> dict[str, tuple[float, float, float, float]] | None:
    """One prompt's published parse rate and each option's share of all generations, each as ``(point, lo,
    hi, se)``: the hybrid point; ``se`` the residual times the standard deviation of Jeffreys' posterior of the
    tail share (``Beta(k + 1/2, n - k + 1/2)``, so 0 of n still has width). Without ``k`` the interval is
    ``point +- z se`` cut to the certified interval ``[head, head + residual]`` (where the value can be). With
    ``k`` (the samples the paper draws per prompt) it is the interval of the paper's K-sample share of this
    prompt: ``point +- z sqrt(se^2 + point (1 - point) / k)``, cut to [0, 1]. A closed record: its head, width
    0 (plus the K-sample noise). None for a record without draws that is not closed (nothing answers its
    residual).

    >>> est = prompt_estimate({"probs": {"A": 0.5}, "residual": 0.4, "hybrid": {"n_tail": 4,
    ...                        "tail": {"A": 2, "none": 2}}}, ["A", "B"])
    >>> [round(x, 3) for x in est["A"]], [round(x, 3) for x in est["B"]][:3]
    ([0.7, 0.54, 0.86, 0.082], [0.0, 0.0, 0.096])
    """
    if not has_draws(parsed) and not closed(parsed):
        return None
    r = float(parsed["residual"]) if has_draws(parsed) else 0.0
    hit, n = tail_counts(parsed)
    tail = parsed["hybrid"]["tail"] if n else {}
    head = {str(a): float(p) for a, p in parsed["probs"].items()}
    out = {}
    for q in ("parse rate", *map(str, options)):
        h = math.fsum(head.values()) if q == "parse rate" else head.get(q, 0.0)
        c = hit if q == "parse rate" else int(tail.get(q, 0))
        a, b = c + 0.5, n - c + 0.5
        se = r * math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1))) if n else 0.0
        p = h + (r * c / n if n else 0.0)
        if k is None:
            out[q] = (p, max(h, p - z * se), min(h + r, p + z * se), se)
        else:
            half = z * math.sqrt(se * se + p * (1 - p) / int(k))
            out[q] = (p, max(0.0, p - half), min(1.0, p + half), se)
    return out


def undefined_text(n_undefined: int, n: int, unit: str = "prompts") -> str:
    """What a table shows for a metric with nothing to rest on.

    >>> undefined_text(8, 8, "questions")
    'n/a: nothing parsed, 8 of 8 questions'
    """
    return f"n/a: nothing parsed, {int(n_undefined)} of {int(n)} {unit}"


def clipped(ci: list[float], certified: Any) -> list[float]:
    """``ci`` inside ``certified`` (unchanged when there is none). Not for a published interval: its point
    would land on an end (:func:`hybrid_metric`'s interval stays as it is, beside the certified one)."""
    if not certified or any(not math.isfinite(float(x)) for x in (*ci, *certified)):
        return list(ci)
    lo, hi = float(certified[0]), float(certified[1])
    return [min(max(ci[0], lo), hi), max(min(ci[1], hi), lo)]
