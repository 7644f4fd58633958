"""Exact head, sampled tail: the parsed answer's distribution where the generation tree does not close.

:func:`~probe.scoring.parse_exact.parse_exact` enumerates the most probable
generations exactly and leaves a ``residual`` it did not reach: the open
frontier (branches queued but not expanded) and the pruned children (below
the pruning mass). The hybrid estimator keeps the head and estimates the tail
by sampling: draw a frontier entry in proportion to its mass, complete it with
the paper's sampler (the whole chain per path:
:func:`~probe.scoring.sampler_chain.step_distribution`), parse it. The
frontier partitions the tail, so a draw is a sample of the generation
*conditional on lying in the tail*, and for every answer ``a``::

    P(a) = probs[a] + residual x P(a | tail),  estimated by  probs[a] + residual x k_a / m

from ``m`` tail draws of which ``k_a`` parse to ``a``. It is unbiased, and its
standard error is ``residual x sqrt(pi (1 - pi) / m)``: it shrinks with the
residual. The CI (:meth:`HybridEstimate.ci`) is ``probs[a] + residual x`` the
Wilson interval of ``k_a / m``, inside the certified interval
``[probs[a], probs[a] + residual]`` by construction.

Budget (:func:`tail_budget`): a prompt gets at most the forward tokens of the
K samples its paper draws (``K x max_new_tokens``), less what the exact head
spent; each tail draw costs at most ``max_new_tokens``. A prompt whose
residual is at or below its target (T = 0.1) draws nothing: it stays exact.

>>> est = hybrid_from_tail({"A": 0.5, "B": 0.2}, residual=0.2, tail=["A", "B", None, "A"])
>>> round(est.estimate("A"), 3), [round(x, 3) for x in est.ci("A")]
(0.6, [0.53, 0.67])
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

__all__ = ["HybridEstimate", "hybrid_from_tail", "tail_budget", "draw_tail", "LMCompleter", "CachedCompleter",
           "complete_tails", "opens_at_budget", "stop_target"]

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


def tail_budget(nodes: int, residual: float, target: float, k: int, max_new_tokens: int) -> int:
    """Tail draws a prompt may make: none when its residual is at or below ``target`` (it is exact), else
    what is left of ``k x max_new_tokens`` forward tokens after the head's ``nodes``, ``max_new_tokens`` a draw.

    >>> tail_budget(60, 0.001, 0.01, 20, 16), tail_budget(200, 0.3, 0.01, 25, 8), tail_budget(400, 0.3, 0.01, 25, 8)
    (0, 0, 0)
    >>> tail_budget(120, 0.3, 0.01, 25, 8)
    10
    """
    if residual <= target:
        return 0
    return max(0, (int(k) * int(max_new_tokens) - int(nodes)) // max(1, int(max_new_tokens)))


def draw_tail(frontier: Sequence[tuple[float, Any]], complete: Callable[[Any, Any], Any], n: int,
              rng: Any) -> list[Any]:
    """``n`` tail answers: each draws a frontier entry ``(mass, handle)`` in proportion to its mass and
    returns ``complete(handle, rng)`` (the entry's generation completed by sampling, parsed)."""
    import numpy as np

    if n <= 0 or not frontier:
        return []
    mass = np.asarray([m for m, _ in frontier], dtype=float)
    picks = rng.choice(len(frontier), size=n, p=mass / mass.sum())
    return [complete(frontier[int(i)][1], rng) for i in picks]


class LMCompleter:
    """Completes a tail entry with a model and a :class:`~probe.scoring.sampler_chain.SamplerChain`, step by
    step (one full forward a token: slow, simple, exact per path), and parses the text.

    A handle is ``(path, below)``: the generated ids so far, and for a pruned entry the step probability
    ``below`` under which pruning left a child out (the first drawn token is restricted to those children;
    None for an open frontier entry, whose path already ends with its child)."""

    def __init__(self, lm: Any, prompt_ids: Sequence[int], chain: Any, max_new_tokens: int,
                 parser: Callable[[str], Any], eos: set[int], seed: int = 0) -> None:
        import torch

        self.lm, self.prompt, self.chain = lm, list(prompt_ids), chain
        self.max_new, self.parser, self.eos = int(max_new_tokens), parser, set(eos)
        self.gen = torch.Generator().manual_seed(int(seed))

    def __call__(self, handle: tuple[Sequence[int], float | None], rng: Any = None) -> Any:
        import torch

        from probe.scoring.sampler_chain import TokenHistory, sample_next, step_distribution

        path, below = list(handle[0]), handle[1]
        with torch.inference_mode():
            while len(path) < self.max_new and not (path and path[-1] in self.eos):
                ids = torch.tensor([self.prompt + path], dtype=torch.long, device=self.lm.model.device)
                logits = self.lm.model(input_ids=ids).logits[:, -1].float().cpu()
                dist = step_distribution(logits, self.chain, TokenHistory.from_ids([self.prompt], [path]))
                probs = dist.probs
                if below is not None:  # a pruned entry: only the children pruning left out
                    probs = torch.where(probs < below, probs, torch.zeros_like(probs))
                    below = None
                path.append(int(sample_next(probs, self.gen)[0]))
        text = self.lm.tokenizer.decode([t for t in path if t not in self.eos], skip_special_tokens=True)
        return self.parser(text)


def opens_at_budget(request: Any) -> bool:
    """Whether a parse request's tail samples past the enumeration's budget (its branches cut there stay open)."""
    tail = getattr(request, "tail", None)
    return tail is not None and tail.max_new_tokens is not None and tail.max_new_tokens > request.max_new_tokens


def stop_target(residual: float, answer_residual: float | None, accepted: float) -> float:
    """The residual a prompt's enumeration stops at (as :func:`~probe.scoring.parse_exact.parse_exact` sets it):
    at or below it the prompt is exact and draws no tail.

    >>> stop_target(0.01, None, 0.5), stop_target(0.01, 0.05, 0.2), stop_target(0.01, 0.05, 0.0)
    (0.01, 0.01, 0.0005)
    """
    if answer_residual is None:
        return float(residual)
    return max(residual * answer_residual, min(residual, answer_residual * accepted))


def complete_tails(lm: Any, requests: Sequence[Any], dists: Sequence[Any], spec: Any) -> None:
    """Draw each hybrid request's tail and set its distribution's ``hybrid`` (in place; the frontier is dropped).

    Per request (with a :class:`~probe.scoring.parse_schema.TailSpec`): as many draws as :func:`tail_budget`
    allows (none when the enumeration closed), each a frontier entry in proportion to its mass completed with
    the sampler chain to the tail's budget and parsed. Seeded by the tail's seed and the request id, so the
    same request gives the same draws in any batch or order."""
    import zlib

    import numpy as np

    from probe.scoring.tokens import eos_ids, prompt_ids
    from probe.scoring.sampler_chain import SamplerChain

    chain = spec if isinstance(spec, SamplerChain) else SamplerChain.from_spec(spec)
    eos = eos_ids(lm)
    for r, d in zip(requests, dists):
        max_new = int(r.tail.max_new_tokens or r.max_new_tokens)
        target = stop_target(r.residual, r.answer_residual, d.accepted())
        n = tail_budget(d.nodes, d.residual, target, r.tail.samples, max_new)
        rng = np.random.default_rng([int(r.tail.seed), zlib.crc32(r.id.encode())])
        draws: list = []
        tokens = 0
        if n > 0 and d.frontier:
            completer = CachedCompleter(lm, prompt_ids(lm.tokenizer, r.prompt), chain, max_new, r.parser, r.decided,
                                        eos, seed=int(rng.integers(1 << 62)), prompt_cache=d.prompt_cache)
            draws = draw_tail(d.frontier, completer, n, rng)
            tokens = completer.tokens
        out = hybrid_from_tail(d.probs, d.residual, draws).to_dict()
        d.hybrid = {**out, "rejected": d.rejected + (d.residual * out["tail"].get("none", 0) / len(draws)
                                                     if draws else 0.0),
                    "tokens": tokens, "max_new_tokens": max_new}
        d.frontier, d.prompt_cache = [], None


class CachedCompleter(LMCompleter):
    """:class:`LMCompleter` with the model's key / value cache: the prompt runs once, a draw runs its frontier
    path once and then one token a step (copying the prompt's cache). Stops at an end-of-sequence id, the
    budget, or once ``decided(text)`` (no continuation changes the answer). ``prompt_cache``: the
    enumeration's prompt vectors ``[2, layers, heads, P, dim]`` and next-token logits, so the prompt is not
    run again (None: run here, counted in ``tokens``). ``tokens``: forward tokens the draws spent."""

    def __init__(self, lm: Any, prompt_ids: Sequence[int], chain: Any, max_new_tokens: int,
                 parser: Callable[[str], Any], decided: Callable[[str], bool] | None, eos: set[int],
                 seed: int = 0, prompt_cache: Any = None) -> None:
        import torch

        super().__init__(lm, prompt_ids, chain, max_new_tokens, parser, eos, seed)
        self.decided, self.tokens = decided, 0
        if prompt_cache is not None:
            from transformers import DynamicCache

            kv, self.first = prompt_cache
            self.first = self.first.reshape(1, -1)
            self.cache = DynamicCache(ddp_cache_data=[(kv[0, li].unsqueeze(0), kv[1, li].unsqueeze(0))
                                                      for li in range(kv.shape[1])], config=lm.model.config)
            return
        with torch.inference_mode():
            out = self._forward(self.prompt, None)
        self.cache, self.first = out.past_key_values, out.logits[:, -1].float().cpu()
        self.tokens += len(self.prompt)

    def _forward(self, ids: Sequence[int], cache: Any) -> Any:
        import torch

        x = torch.tensor([list(ids)], dtype=torch.long, device=self.lm.model.device)
        return self.lm.model(input_ids=x, past_key_values=cache, use_cache=True)

    def __call__(self, handle: tuple[Sequence[int], float | None], rng: Any = None) -> Any:
        import copy

        import torch

        from probe.scoring.sampler_chain import TokenHistory, sample_next, step_distribution

        path, below = list(handle[0]), handle[1]
        with torch.inference_mode():
            cache, logits = copy.deepcopy(self.cache), self.first
            if path:
                out = self._forward(path, cache)
                cache, logits = out.past_key_values, out.logits[:, -1].float().cpu()
                self.tokens += len(path)
            while len(path) < self.max_new and not (path and path[-1] in self.eos) and not self._done(path):
                probs = step_distribution(logits, self.chain, TokenHistory.from_ids([self.prompt], [path])).probs
                if below is not None:  # a pruned entry: only the children pruning left out
                    probs = torch.where(probs < below, probs, torch.zeros_like(probs))
                    below = None
                path.append(int(sample_next(probs, self.gen)[0]))
                if path[-1] in self.eos or len(path) >= self.max_new:
                    break
                out = self._forward(path[-1:], cache)
                cache, logits = out.past_key_values, out.logits[:, -1].float().cpu()
                self.tokens += 1
        text = self.lm.tokenizer.decode([t for t in path if t not in self.eos], skip_special_tokens=True)
        return self.parser(text)

    def _done(self, path: list[int]) -> bool:
        if self.decided is None or not path:
            return False
        text = self.lm.tokenizer.decode([t for t in path if t not in self.eos], skip_special_tokens=True)
        return not text.endswith("\ufffd") and bool(self.decided(text))

