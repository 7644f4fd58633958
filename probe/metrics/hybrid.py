"""A metric from the hybrid estimator's per-prompt answers (exact head + sampled tail), with its interval.

A parse record with a ``hybrid`` entry (:mod:`probe.scoring.hybrid`) holds the
enumerated answer masses ``probs``, the ``residual`` not enumerated and the
answers of ``n_tail`` generations drawn from that residual (``tail``: answer ->
count, ``"none"`` for no answer). Per answer the unbiased estimate is
``probs[a] + residual x tail[a] / n_tail`` (:func:`hybrid_probs`). A record
without draws (its tree closed, or no hybrid entry) falls back to the task's
own rule.

A metric's **hybrid interval** (:func:`hybrid_metric`): the metric is
recomputed ``n_boot`` times with each prompt's tail shares drawn from
``Dirichlet(counts + 1/2)`` over the answers that prompt has seen and "no
answer" (Jeffreys' prior, so a share no draw hit still has width); the 2.5 and
97.5 percentiles are the 95 % interval. It is inside the metric's range only
in distribution: callers clip it to the certified interval, which holds for
certain. Seeded, so a run's interval is the same on every resume.

>>> d = {"probs": {"A": 0.5}, "rejected": 0.1, "residual": 0.4, "hybrid": {"n_tail": 4, "tail": {"A": 1, "none": 3}}}
>>> hybrid_probs(d, lambda x: {})
{'A': 0.6}
"""

from __future__ import annotations

import math
from typing import Any, Callable, Hashable, Iterable, Mapping

import numpy as np

__all__ = ["clipped", "drawn_shares", "has_draws", "hybrid_metric", "hybrid_probs"]

ProbsOf = Callable[[Mapping[str, Any]], Mapping[str, float]]


def has_draws(parsed: Mapping[str, Any]) -> bool:
    """Whether a parse record's residual was estimated by tail draws."""
    h = parsed.get("hybrid") if isinstance(parsed, Mapping) else None
    return isinstance(h, Mapping) and int(h.get("n_tail") or 0) > 0


def hybrid_probs(parsed: Mapping[str, Any], fallback: ProbsOf, shares: Mapping[str, float] | None = None
                 ) -> dict[str, float]:
    """Per answer the head's mass plus the residual times the tail's share of it (``shares``; default: the
    draws' shares); ``fallback(parsed)`` for a record without draws."""
    if not has_draws(parsed):
        return dict(fallback(parsed))
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
    """One Dirichlet(counts + 1/2) draw of the tail shares over the answers seen (head or tail), the
    ``answers`` the parser can read (so an answer no draw and no enumerated path hit still has width: a
    prompt whose head and few tail draws parse nothing is not certain to parse nothing) and "none"."""
    tail = parsed["hybrid"]["tail"]
    cats = sorted({*map(str, parsed["probs"]), *map(str, tail), *map(str, answers)} - {"none"}) + ["none"]
    alpha = np.array([float(tail.get(c, 0)) + 0.5 for c in cats])
    return dict(zip(cats, rng.dirichlet(alpha).tolist()))


def hybrid_metric(metric: Callable[[ProbsOf], Mapping[Hashable, float]], fallback: ProbsOf, n_boot: int = 200,
                  seed: int = 0, answers: Callable[[Mapping[str, Any]], Iterable[str]] | None = None
                  ) -> dict[Hashable, tuple[float, list[float]]]:
    """Per key of ``metric``'s result: the hybrid point and its 95 % interval.

    ``metric(probs_of)`` computes the task's numbers (a mapping, e.g. cell -> value) with ``probs_of(record)``
    giving each parse record's answer probabilities; it is called once with :func:`hybrid_probs` and
    ``n_boot`` times with each record's tail shares redrawn (the same draw for a record within one call).
    ``answers(record)``: the answers its parser can read (:func:`drawn_shares`); default: those seen.
    """
    point = metric(lambda d: hybrid_probs(d, fallback))
    rng = np.random.default_rng(seed)
    samples: dict[Hashable, list[float]] = {k: [] for k in point}
    for _ in range(int(n_boot)):
        drawn: dict[int, dict[str, float]] = {}

        def probs_of(d: Mapping[str, Any]) -> Mapping[str, float]:
            if not has_draws(d):
                return fallback(d)
            if id(d) not in drawn:
                drawn[id(d)] = hybrid_probs(d, fallback, drawn_shares(d, rng, answers(d) if answers else ()))
            return drawn[id(d)]

        values = metric(probs_of)
        for k in samples:
            samples[k].append(float(values.get(k, math.nan)))
    out = {}
    for k, v in point.items():
        arr = np.asarray(samples[k], dtype=float)
        arr = arr[np.isfinite(arr)]
        ci = [float(x) for x in np.percentile(arr, [2.5, 97.5])] if arr.size else [math.nan, math.nan]
        if arr.size and math.isfinite(v):
            # the interval holds its point: where the point sits on a boundary (an answer no draw read, mass
            # 0), every draw gives the answer some mass, and a threshold metric's percentiles can leave it
            ci = [min(ci[0], float(v)), max(ci[1], float(v))]
        out[k] = (float(v), ci)
    return out


def clipped(ci: list[float], certified: Any) -> list[float]:
    """``ci`` inside the certified interval (which holds for certain); unchanged when there is none."""
    if not certified or any(not math.isfinite(float(x)) for x in (*ci, *certified)):
        return list(ci)
    lo, hi = float(certified[0]), float(certified[1])
    return [min(max(ci[0], lo), hi), max(min(ci[1], hi), lo)]
