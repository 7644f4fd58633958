"""Exact head, sampled tail: the parsed answer's distribution where the generation tree does not close.

:func:`~probe.scoring.parse.exact.parse_exact` enumerates the most probable
generations exactly and leaves a ``residual`` it did not reach: the open
frontier (branches queued but not expanded) and the pruned children (below
the pruning mass). The hybrid estimator keeps the head and estimates the tail
by sampling: draw a frontier entry in proportion to its mass, complete it with
the paper's sampler (the whole chain per path:
:func:`~probe.scoring.sampler.chain.step_distribution`), parse it. The
frontier partitions the tail, so a draw is a sample of the generation
*conditional on lying in the tail*, and for every answer ``a``::

    P(a) = probs[a] + residual x P(a | tail),  estimated by  probs[a] + residual x k_a / m

from ``m`` tail draws of which ``k_a`` parse to ``a``. It is unbiased, and its
standard error is ``residual x sqrt(pi (1 - pi) / m)``: it shrinks with the
residual. The CI (:meth:`HybridEstimate.ci`) is ``probs[a] + residual x`` the
Wilson interval of ``k_a / m``, inside the certified interval
``[probs[a], probs[a] + residual]`` by construction.

Tail size (:func:`tail_budget`): a prompt whose residual ``r`` is above its
target draws ``ceil(K x r)`` generations, K the samples its paper draws per
prompt; at or below the target it draws nothing and stays exact. By the law of
total variance one generation's answer indicator has variance at least ``r``
times its variance within the tail, so with ``m >= K r`` draws the hybrid's
variance ``r^2 pi (1 - pi) / m`` is at most the paper's K-sample share's, for
every answer and the parse rate alike; and the tail spends at most ``K r``
generations, never more than the K the paper draws.

>>> est = hybrid_from_tail({"A": 0.5, "B": 0.2}, residual=0.2, tail=["A", "B", None, "A"])
>>> round(est.estimate("A"), 3), [round(x, 3) for x in est.ci("A")]
(0.6, [0.53, 0.67])
"""

from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from probe.scoring.engine import Engine, pad_id_of
from probe.scoring.parse.tail import (  # noqa: F401  (TAIL_BATCH_TOKENS: public here too, as before)
    TAIL_BATCH_TOKENS, TAIL_MAX_ROWS, TailRow, complete_rows, draw_generator, pick_frontier, prompt_vectors,
    tail_tokens)
from probe.scoring.sampler.chain import SamplerChain
from probe.scoring.tokens import eos_ids, prompt_ids

__all__ = ["HybridEstimate", "hybrid_from_tail", "tail_budget", "draw_tail", "complete_tails", "opens_at_budget",
           "stop_target"]

_Z95 = 1.959963984540054
@dataclass(frozen=True)
class HybridEstimate:
    """Exact head plus sampled tail for one prompt: ``probs`` (enumerated), ``residual`` (not enumerated) and
    the answers of ``n_tail`` tail draws (``tail``: answer -> count; None is no answer)."""

    probs: dict
    residual: float
    tail: dict = field(default_factory=dict)
    n_tail: int = 0

    def estimate(self, answer: Hashable) -> float:
        """The unbiased estimate of ``P(answer)`` (the head alone when nothing was drawn: a lower bound)."""
        p = float(self.probs.get(answer, 0.0))
        return p + (self.residual * self.tail.get(answer, 0) / self.n_tail if self.n_tail else 0.0)

    def ci(self, answer: Hashable, z: float = _Z95) -> tuple[float, float]:
        """The CI of ``P(answer)``: the head plus the residual times the Wilson interval of the tail share
        (the certified interval when nothing was drawn)."""
        p = float(self.probs.get(answer, 0.0))
        if not self.n_tail:
            return p, p + self.residual
        lo, hi = wilson(self.tail.get(answer, 0), self.n_tail, z)
        return p + self.residual * lo, p + self.residual * hi

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: per answer the estimate and CI, the tail counts and draws."""
        answers = sorted({*map(str, self.probs), *(str(a) for a in self.tail if a is not None)})
        keyed = {str(a): a for a in [*self.probs, *self.tail] if a is not None}
        return {"residual": self.residual, "n_tail": self.n_tail,
                "tail": {("none" if a is None else str(a)): c for a, c in self.tail.items()},
                "estimate": {a: self.estimate(keyed[a]) for a in answers},
                "ci": {a: list(self.ci(keyed[a])) for a in answers}}


def wilson(k: int, n: int, z: float = _Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial share ``k / n``.

    >>> [round(x, 4) for x in wilson(0, 10)]
    [0.0, 0.2775]
    """
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def hybrid_from_tail(probs: dict, residual: float, tail: Sequence[Any]) -> HybridEstimate:
    """The estimate from the head's ``probs``, its ``residual`` and the parsed answers of the tail draws."""
    counts: dict = {}
    for a in tail:
        counts[a] = counts.get(a, 0) + 1
    return HybridEstimate(dict(probs), float(residual), counts, len(tail))


def tail_budget(residual: float, target: float, k: int) -> int:
    """Tail draws a prompt makes: none when its residual is at or below ``target`` (it is exact), else
    ``ceil(k x residual)`` (at most ``k``): enough that the hybrid's variance of every answer's mass is at most
    the paper's K-sample share's, at most the paper's K generations (see the module docstring).

    >>> tail_budget(0.001, 0.01, 20), tail_budget(0.3, 0.01, 25), tail_budget(0.96, 0.01, 10), tail_budget(1.0, 0.0, 10)
    (0, 8, 10, 10)
    >>> tail_budget(0.02, 0.01, 25)
    1
    """
    if residual <= target:
        return 0
    # a hair under a whole draw (float rounding of k x r) is not one more draw
    return max(1, min(int(k), math.ceil(int(k) * float(residual) - 1e-9)))


def draw_tail(frontier: Sequence[tuple[float, Any]], complete: Callable[[Any, Any], Any], n: int,
              rng: Any) -> list[Any]:
    """``n`` tail answers: each draws a frontier entry ``(mass, handle)`` in proportion to its mass and
    returns ``complete(handle, rng)`` (the entry's generation completed by sampling, parsed)."""
    if n <= 0 or not frontier:
        return []
    mass = np.asarray([m for m, _ in frontier], dtype=float)
    picks = rng.choice(len(frontier), size=n, p=mass / mass.sum())
    return [complete(frontier[int(i)][1], rng) for i in picks]


def opens_at_budget(request: Any) -> bool:
    """Whether a parse request's tail samples past the enumeration's budget (its branches cut there stay open)."""
    tail = getattr(request, "tail", None)
    return tail is not None and tail.max_new_tokens is not None and tail.max_new_tokens > request.max_new_tokens


def stop_target(residual: float, answer_residual: float | None, accepted: float) -> float:
    """The residual a prompt's enumeration stops at (as :func:`~probe.scoring.parse.exact.parse_exact` sets it):
    at or below it the prompt is exact and draws no tail.

    >>> stop_target(0.01, None, 0.5), stop_target(0.01, 0.05, 0.2), stop_target(0.01, 0.05, 0.0)
    (0.01, 0.01, 0.0005)
    """
    if answer_residual is None:
        return float(residual)
    return max(residual * answer_residual, min(residual, answer_residual * accepted))


def complete_tails(lm: Any, requests: Sequence[Any], dists: Sequence[Any], spec: Any,
                   settings: Any = None) -> None:
    """Draw each hybrid request's tail and set its distribution's ``hybrid`` (in place; the frontier is dropped).

    Per request (with a :class:`~probe.scoring.parse.schema.TailSpec`): :func:`tail_budget` draws, ``ceil(K x
    residual)`` (none when the enumeration closed), each a frontier entry in proportion to its mass completed with
    the sampler chain to the tail's budget and parsed. The draws of every request advance together
    (:func:`complete_rows`): over one key/value store where the model allows, as many rows a pass as
    :data:`TAIL_BATCH_TOKENS` holds; else up to ``settings.tail_batch`` rows (the enumeration's
    :class:`~probe.scoring.parse.schema.ParseSettings`; default 64), each with a cache. Seeded by the tail's
    seed and the request id, and each draw has its own stream, so the same request gives the same draws in any
    batch or order."""
    chain = spec if isinstance(spec, SamplerChain) else SamplerChain.from_spec(spec)
    engine = Engine(lm.model, pad_id=pad_id_of(lm.tokenizer))
    rows, owner, spent = _tail_rows(lm, engine, requests, dists)
    t0 = time.perf_counter()
    longest = max((len(r.prompt) + max(r.max_new, len(r.path)) for r in rows), default=1)
    # rows a pass: ``tail_batch``, fewer for long budgets (2048-token answers) so the batch's cache stays small;
    # over one store the rows share their prompts' vectors and a pass costs its live rows only, so the memory
    # rule alone (fewer, larger passes: a small pass reads all the weights for a few tokens)
    cap = min(TAIL_MAX_ROWS, tail_tokens(lm.model) // longest)
    batch_size = settings.tail_batch if settings is not None else 64
    rows_a_pass = max(1, cap if engine.tree_fits(longest) else min(int(batch_size), cap))
    answers, used = complete_rows(engine, rows, chain, eos_ids(lm), lm.tokenizer, rows_a_pass)
    seconds = time.perf_counter() - t0
    per: list[list] = [[] for _ in requests]
    for k, a, t in zip(owner, answers, used):
        per[k].append(a)
        spent[k] += t
    for k, (r, d) in enumerate(zip(requests, dists)):
        draws = per[k]
        max_new = int(r.tail.max_new_tokens or r.max_new_tokens)
        out = hybrid_from_tail(d.probs, d.residual, draws).to_dict()
        d.hybrid = {**out, "rejected": d.rejected + (d.residual * out["tail"].get("none", 0) / len(draws)
                                                     if draws else 0.0),
                    "tokens": spent[k] if draws else 0, "max_new_tokens": max_new, "samples": int(r.tail.samples)}
        d.frontier, d.prompt_cache = [], None
        # the plan's calibration reads it (never recorded): this request's share of the batched draws' time
        d.tail_seconds = seconds * sum(t for o, t in zip(owner, used) if o == k) / max(1, sum(used))


def _tail_rows(lm: Any, engine: Engine, requests: Sequence[Any], dists: Sequence[Any]
               ) -> tuple[list[TailRow], list[int], list[int]]:
    """Every request's tail draws as rows (each a frontier entry picked in proportion to its mass, with its own
    generator), the request each row belongs to, and per request the forward tokens its prompt cost."""
    rows: list[TailRow] = []
    owner: list[int] = []
    spent = [0] * len(requests)
    for k, (r, d) in enumerate(zip(requests, dists)):
        max_new = int(r.tail.max_new_tokens or r.max_new_tokens)
        n = tail_budget(d.residual, stop_target(r.residual, r.answer_residual, d.accepted()), r.tail.samples)
        if n <= 0 or not d.frontier:
            continue
        rng = np.random.default_rng([int(r.tail.seed), zlib.crc32(r.id.encode())])
        seed = int(rng.integers(1 << 62))
        ids = prompt_ids(lm.tokenizer, r.prompt)
        kv, first, spent[k] = prompt_vectors(engine, ids, d.prompt_cache)
        for j, (path, below) in enumerate(pick_frontier(d.frontier, n, rng)):
            rows.append(TailRow(ids, kv, first, path, below, draw_generator(seed, j), r.parser, r.decided, max_new))
            owner.append(k)
    return rows, owner, spent
