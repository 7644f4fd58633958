"""What sampling + parsing returns, computed without sampling: the distribution of a parser's answer.

A paper samples a generation at temperature ``T`` / nucleus ``top_p`` and reads
its answer with a parser. The answer's distribution is a sum over the token
sequences ``generate`` can produce::

    P(answer = a) = sum over generations g with parser(decode(g)) == a of P(g)

:func:`parse_exact` enumerates that tree of generations best-first by path
probability. Each step's distribution is the paper's whole sampler applied with
that node's own token history (prompt + path):
:func:`~probe.scoring.sampler.chain.step_distribution` of a
:class:`~probe.scoring.sampler.chain.SamplerChain`, so repetition, frequency and
presence penalties, top-k and min-p are exact per path. A
:class:`~probe.scoring.sampler.sampling.SamplingSpec` (or a chain that sets only
temperature and top-p) takes :func:`~probe.scoring.sampler.sampling.sampling_distribution`,
the same numbers bit for bit; a branch ends at one of
the model's end-of-sequence ids (its generation config, as ``generate`` uses)
or after ``max_new_tokens`` tokens, or earlier when ``decided(text)`` says no
continuation can change the parser's answer. The generated ids are decoded with
``skip_special_tokens=True`` and parsed.

The result is certified: every enumerated generation's mass is exact (products
of float64 step probabilities), and what was not enumerated (children below the
pruning mass, branches left when the target or ``max_nodes`` was reached) is the
``residual``. So for every answer ``a`` the true probability lies in
``[probs[a], probs[a] + residual]``, and ``sum(probs) + rejected + residual == 1``.
Because it enumerates sampled *token ids*, every tokenisation of an answer is
covered (scoring surface forms sees only the canonical one).

Cost: one forward token per expanded node. The prompt runs once; a node's key /
value vectors are written once into the group's store, and a batch of frontier
nodes, from all prompts of a group, runs as one pass in which each token
attends to its prompt's cache and its path's vectors, nothing copied
(:mod:`probe.scoring.engine.tree_cache`). A model whose attention that pass does not
compute exactly (eager, soft-capped, attention sinks) runs the batch as a
left-padded pass over a cache of prompt + path per row, like batched
generation. At a low temperature the tree is a few dozen
nodes; at ``T = 0.8`` with a wide nucleus it is not enumerable to a small
residual, which the result then says (see ``docs/scoring.md``).

>>> d = ParseDistribution({"A": 0.6, "B": 0.3}, rejected=0.05, residual=0.05, nodes=12, prompt_tokens=30)
>>> d.bounds("A"), round(d.total(), 12)
((0.6, 0.65), 1.0)
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import torch
from tqdm.auto import tqdm

from probe.scoring.parse.hybrid import complete_tails, opens_at_budget
# The schema lives in probe.scoring.parse.schema (no torch); re-exported here, where callers import it.
from probe.scoring.parse.schema import ParseDistribution, ParseRequest, ParseSettings  # noqa: F401
from probe.scoring.parse.tree import Enumerator, Parser, batch_decoder, frontier_of  # noqa: F401  (public here too)
from probe.scoring.sampler.chain import SamplerChain
from probe.scoring.sampler.sampling import SamplingSpec
from probe.scoring.tokens import eos_ids  # noqa: F401 (public here too, as before)
from probe.scoring.tokens import prompt_ids as _encode

def parse_exact(
    lm: Any,
    prompts: Sequence[str | Sequence[int]],
    spec: Any,
    parser: Parser | Sequence[Parser],
    settings: ParseSettings,
    decided: Callable[[str], bool] | Sequence[Callable[[str], bool] | None] | None = None,
) -> list[ParseDistribution]:
    """The distribution of ``parser(generation)`` under sampling with ``spec``, for each prompt.

    ``spec``: a ``SamplingSpec`` (temperature, top-p) or a ``SamplerChain`` (the whole sampler, per path).
    ``prompts``: strings (encoded as the engine encodes a prompt) or token-id lists (used as given).
    ``parser``: ``text -> answer | None`` for all prompts, or one per prompt.
    ``settings``: the budget, the stopping residuals and the batching (:class:`ParseSettings`).
    ``decided``: optional ``text -> bool`` (one, or one per prompt): True when no continuation of ``text`` can
    change the parser's answer, which ends the branch early (never asked of a text ending in an unfinished
    multi-byte character, U+FFFD, whose continuations rewrite it).
    """
    if not isinstance(spec, (SamplingSpec, SamplerChain)):
        raise TypeError("parse_exact: spec must be a SamplingSpec or a SamplerChain")
    if not isinstance(settings, ParseSettings):
        raise TypeError("parse_exact: settings must be a ParseSettings")
    n = len(prompts)
    parsers = _per_prompt(parser, n, "parser")
    decideds = _per_prompt(decided, n, "decided") if decided is not None else [None] * n
    encoded = _encode_prompts(lm.tokenizer, prompts)
    out: list[ParseDistribution] = []
    step = settings.prompt_batch
    bar = _Progress(n, settings.progress)
    with torch.inference_mode():
        enum = Enumerator(lm, spec, settings, on_pass=bar.on_pass if settings.progress else None)
        for g in (range(a, min(n, a + step)) for a in range(0, n, step)):
            out.extend(enum.run([encoded[i] for i in g], [parsers[i] for i in g], [decideds[i] for i in g]))
            bar.group_done(len(g))
    bar.close()
    return out


def _encode_prompts(tok: Any, prompts: Sequence[str | Sequence[int]]) -> list:
    encoded = [_encode(tok, p) for p in prompts]
    for i, ids in enumerate(encoded):
        if not ids:
            raise ValueError(f"parse_exact: prompt {i} encodes to no tokens")
    return encoded


class _Progress:
    """The enumeration's bar: prompts finished, moved after every forward pass (not per group of prompts: one
    group can take minutes), and the nodes expanded so far beside it."""

    def __init__(self, n: int, shown: bool) -> None:
        self.bar = tqdm(total=n, desc="enumerating generations", unit="prompt", leave=False, disable=not shown)
        self.base = self.nodes = 0
        self.shown = 0.0

    def on_pass(self, nodes: int, finished: int) -> None:
        """After a forward pass of ``nodes`` nodes, with ``finished`` prompts of the current group done."""

        self.nodes += nodes
        self.bar.set_postfix_str(f"{self.nodes:,} nodes", refresh=False)
        self._to(self.base + finished)
        if time.monotonic() - self.shown >= 0.5:  # redrawn while no prompt finishes, at most twice a second
            self.bar.refresh()
            self.shown = time.monotonic()

    def group_done(self, size: int) -> None:
        self.base += size
        self._to(self.base)

    def _to(self, k: int) -> None:
        if k > self.bar.n:
            self.bar.update(k - self.bar.n)

    def close(self) -> None:
        self.bar.close()


def _per_prompt(value: Any, n: int, name: str) -> list:
    if callable(value):
        return [value] * n
    values = list(value)
    if len(values) != n:
        raise ValueError(f"parse_exact: {len(values)} {name}s for {n} prompts")
    return values


def run_parse_requests(lm: Any, requests: Sequence[ParseRequest], *, batch_size: int = 32, top: int = 10,
                       progress: bool = False) -> list[ParseDistribution]:
    """:func:`parse_exact` over requests with possibly different settings (grouped, order kept)."""
    out: list[ParseDistribution | None] = [None] * len(requests)
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(requests):  # a hybrid tail needs the frontier, a longer tail budget open branches
        groups.setdefault((r.spec_key, r.tail is not None, opens_at_budget(r)), []).append(i)
    for ((t, p, max_new, residual, max_nodes, answer_residual, chain), hybrid, opened), idx in groups.items():
        spec = SamplingSpec(t, p) if chain is None else chain
        settings = ParseSettings(max_new, residual=residual, max_nodes=max_nodes, answer_residual=answer_residual,
                                 batch_size=batch_size, top=top, progress=progress, frontier=hybrid,
                                 open_at_budget=opened)
        res = parse_exact(lm, [requests[i].prompt for i in idx], spec, [requests[i].parser for i in idx], settings,
                          decided=[requests[i].decided for i in idx])
        if hybrid:
            complete_tails(lm, [requests[i] for i in idx], res, spec, settings)
        for i, d in zip(idx, res):
            out[i] = d
    return out  # type: ignore[return-value]
