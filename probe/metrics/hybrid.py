"""A metric from the hybrid estimator's per-prompt answers (exact head + sampled tail), with its interval.

A parse record with a ``hybrid`` entry (:mod:`probe.scoring.hybrid`) holds the
enumerated answer masses ``probs``, the ``residual`` not enumerated and the
answers of ``n_tail`` generations drawn from that residual (``tail``: answer ->
count, ``"none"`` for no answer). Per answer the unbiased estimate is
``probs[a] + residual x tail[a] / n_tail`` (:func:`hybrid_probs`). A record
without draws (its tree closed, or no hybrid entry) falls back to the task's
own rule.

A metric's **hybrid interval** (:func:`hybrid_metric`): the metric is
recomputed ``n_boot`` times with each prompt's tail shares redrawn
(:func:`drawn_shares`); the 2.5 and 97.5 percentiles are the 95 % interval.
A prompt draws few tails (as few as 2 where the head spends most of the
budget), so its own draws say little about how often its tail reads an
answer at all. That rate is shared
across the prompts of a run (:class:`TailPool`, empirical Bayes): each
redraw first draws the pooled rate from the run's tail draws, then each
prompt's rate from its own draws with the pool as prior (weighted by how much
the prompts' rates differ), then the split between the answers from the
prompt's own draws (``Dirichlet(counts + 1/2)`` over the answers it has seen
and the ``answers`` its parser can read, so an answer no draw hit still has
width). A per-prompt prior alone would give two empty draws a mean answer mass
of 0.29 however rarely the run's tails answer. The interval is inside the
metric's range only in distribution: callers clip it to the certified
interval, which holds for certain. Seeded, so a run's interval is the same on
every resume.

>>> d = {"probs": {"A": 0.5}, "rejected": 0.1, "residual": 0.4, "hybrid": {"n_tail": 4, "tail": {"A": 1, "none": 3}}}
>>> hybrid_probs(d, lambda x: {})
{'A': 0.6}
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Mapping

import numpy as np

__all__ = ["TailPool", "clipped", "drawn_shares", "has_draws", "hybrid_metric", "hybrid_probs"]

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


def _answered(parsed: Mapping[str, Any]) -> tuple[int, int]:
    """A record's tail draws that read an answer, and all its tail draws."""
    h = parsed["hybrid"]
    n = int(h["n_tail"])
    return n - int(h["tail"].get("none", 0)), n


@dataclass(frozen=True)
class TailPool:
    """How often the tail draws of a run's prompts read an answer, pooled (empirical Bayes, beta-binomial).

    ``answered`` of ``draws`` tail draws read an answer. ``concentration`` is the weight of the pooled rate as
    a prior on one prompt's rate, in draws, from the method of moments on the prompts' own rates: infinite when
    they differ no more than binomial noise allows (every prompt takes the pooled rate), down to one draw's
    weight when they differ as much as they can. ``design_effect`` widens the pooled rate's own uncertainty for
    draws that cluster in prompts.

    >>> pool = TailPool.of([{"hybrid": {"n_tail": 2, "tail": {"none": 2}}}] * 50)
    >>> pool.answered, pool.draws, pool.concentration
    (0, 100, inf)
    >>> TailPool.of([{"hybrid": {"n_tail": 4, "tail": {"A": 4}}}, {"hybrid": {"n_tail": 4, "tail": {"none": 4}}}]
    ...             ).concentration
    1.0
    """

    answered: int
    draws: int
    concentration: float
    design_effect: float = 1.0

    @classmethod
    def of(cls, records: Iterable[Mapping[str, Any]]) -> "TailPool":
        counts = [_answered(d) for d in records if has_draws(d)]
        a_sum, n_sum = sum(a for a, _ in counts), sum(n for _, n in counts)
        rate = a_sum / n_sum if n_sum else 0.0
        k = len(counts)
        # the intra-prompt correlation phi = 1 / (concentration + 1) by the method of moments:
        # E[sum n_i (p_i - rate)^2] = rate (1 - rate) [(k - 1) + phi (N - k + 1 - sum n_i^2 / N)]
        denom = n_sum - k + 1 - (sum(n * n for _, n in counts) / n_sum if n_sum else 0.0)
        phi = 0.0
        if 0.0 < rate < 1.0 and denom > 1e-9:
            spread = sum(n * (a / n - rate) ** 2 for a, n in counts) / (rate * (1.0 - rate))
            phi = min(max((spread - (k - 1)) / denom, 0.0), 0.5)
        concentration = math.inf if phi == 0.0 else 1.0 / phi - 1.0
        size = sum(n * n for _, n in counts) / n_sum if n_sum else 1.0
        return cls(a_sum, n_sum, concentration, 1.0 + max(size - 1.0, 0.0) * phi)

    def draw_rate(self, rng: np.random.Generator) -> float:
        """One draw of the pooled rate: Jeffreys' posterior of ``answered`` in ``draws``, its evidence divided
        by the design effect."""
        f = self.design_effect
        return float(rng.beta((self.answered + 0.5) / f, (self.draws - self.answered + 0.5) / f))


def drawn_shares(parsed: Mapping[str, Any], rng: np.random.Generator, answers: Iterable[str] = (),
                 pool: TailPool | None = None, rate: float | None = None) -> dict[str, float]:
    """One draw of a record's tail shares over the answers seen (head or tail), the ``answers`` the parser can
    read, and "none".

    The share read as any answer is drawn from ``Beta(answered + c x rate, none + c x (1 - rate))``, with
    ``rate`` a draw of the pooled rate (:meth:`TailPool.draw_rate`; drawn here when not given) and ``c`` the
    pool's concentration (infinite: the pooled rate itself). ``pool`` defaults to this record alone. The split
    between the answers is ``Dirichlet(counts + 1/2)``, so an answer no draw and no enumerated path hit still
    has width: a prompt whose head and few tail draws parse nothing is not certain to parse nothing."""
    tail = parsed["hybrid"]["tail"]
    pool = pool if pool is not None else TailPool.of([parsed])
    rate = pool.draw_rate(rng) if rate is None else float(rate)
    answered, n = _answered(parsed)
    c = pool.concentration
    if math.isinf(c):
        share = rate
    else:
        share = float(rng.beta(answered + c * rate + 1e-12, n - answered + c * (1.0 - rate) + 1e-12))
    cats = sorted({*map(str, parsed["probs"]), *map(str, tail), *map(str, answers)} - {"none"})
    if not cats:
        return {"none": 1.0}
    split = rng.dirichlet(np.array([float(tail.get(x, 0)) + 0.5 for x in cats]))
    return {**{x: share * float(s) for x, s in zip(cats, split)}, "none": 1.0 - share}


def hybrid_metric(metric: Callable[[ProbsOf], Mapping[Hashable, float]], fallback: ProbsOf, n_boot: int = 200,
                  seed: int = 0, answers: Callable[[Mapping[str, Any]], Iterable[str]] | None = None
                  ) -> dict[Hashable, tuple[float, list[float]]]:
    """Per key of ``metric``'s result: the hybrid point and its 95 % interval.

    ``metric(probs_of)`` computes the task's numbers (a mapping, e.g. cell -> value) with ``probs_of(record)``
    giving each parse record's answer probabilities; it is called once with :func:`hybrid_probs` and
    ``n_boot`` times with each record's tail shares redrawn (the same draw for a record within one call).
    ``answers(record)``: the answers its parser can read (:func:`drawn_shares`); default: those seen.
    """
    seen: dict[int, Mapping[str, Any]] = {}

    def point_probs(d: Mapping[str, Any]) -> Mapping[str, float]:
        if has_draws(d):
            seen[id(d)] = d
        return hybrid_probs(d, fallback)

    point = metric(point_probs)
    pool = TailPool.of(seen.values())
    rng = np.random.default_rng(seed)
    samples: dict[Hashable, list[float]] = {k: [] for k in point}
    for _ in range(int(n_boot)):
        drawn: dict[int, dict[str, float]] = {}
        rate = pool.draw_rate(rng)

        def probs_of(d: Mapping[str, Any]) -> Mapping[str, float]:
            if not has_draws(d):
                return fallback(d)
            if id(d) not in drawn:
                drawn[id(d)] = hybrid_probs(d, fallback, drawn_shares(d, rng, answers(d) if answers else (),
                                                                  pool, rate))
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
