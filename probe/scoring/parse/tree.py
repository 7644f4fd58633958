"""The enumeration behind :func:`~probe.scoring.parse.exact.parse_exact`: best-first over the generation trees of
a group of prompts, on the engine's forward pass.

A node is one generated token; its mass is the product of the sampler's step probabilities along its path
(float64). The frontier is a heap of children not yet expanded; a child below the pruning mass is not
queued and counts as residual. A branch ends at an end-of-sequence id, at the token budget, or where
``decided(text)`` says no continuation changes the parser's answer; then its text is parsed once.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

import torch

from probe.scoring.engine import Engine, pad_id_of
from probe.scoring.parse.schema import ParseDistribution, ParseSettings
from probe.scoring.sampler.chain import SamplerChain, TokenHistory, step_distribution
from probe.scoring.sampler.sampling import sampling_distribution
from probe.scoring.tokens import eos_ids

Parser = Callable[[str], Hashable | None]

#: float64 slack on the mass invariant (products and sums of step probabilities)
_EPS = 1e-9


def batch_decoder(tok: Any) -> Callable[[list[Sequence[int]]], list[str]]:
    """``ids lists -> texts`` equal to ``tok.decode(ids, skip_special_tokens=True)`` for each; a fast
    tokenizer's backend decodes the whole list in one call (the enumeration decodes millions of leaves)."""
    backend = getattr(tok, "_tokenizer", None)
    if backend is not None and hasattr(backend, "decode_batch") and getattr(tok, "is_fast", False):
        clean = bool(getattr(tok, "clean_up_tokenization_spaces", False))

        def fast(paths: list[Sequence[int]]) -> list[str]:
            texts = backend.decode_batch([list(p) for p in paths], skip_special_tokens=True)
            return [tok.clean_up_tokenization(t) for t in texts] if clean else texts

        return fast
    return lambda paths: [tok.decode(list(p), skip_special_tokens=True) for p in paths]


@dataclass
class _Node:
    """An expanded node: its parent (-1: the prompt), its path, and its keys and values: ``kv``
    ``[2, L, H, D]`` kept apart, or ``at``, its index in the group's store (:mod:`probe.scoring.engine.tree_cache`)."""

    parent: int
    path: tuple[int, ...]
    kv: Any = None
    at: int = -1


@dataclass
class _State:
    """One prompt's enumeration: the frontier heap ``(-mass, order, parent node, token)``, kept / pruned mass."""

    prompt: tuple[int, ...]
    kv: Any  # [2, L, H, P, D] (None when the store holds the prompt and nothing asks for it)
    parser: Parser
    decided: Callable[[str], bool] | None
    row: int = 0  # the prompt's row in the group's store
    heap: list = field(default_factory=list)
    nodes: list[_Node] = field(default_factory=list)
    probs: dict = field(default_factory=dict)
    rejected: float = 0.0
    accepted: float = 0.0  # running sum of probs (for the answer_residual target)
    pruned: float = 0.0
    pruned_at: dict = field(default_factory=dict)  # node -> (pruned mass, step probability bound): the tail's part
    opened: list = field(default_factory=list)  # (mass, path): branches left open at the token budget
    first: Any = None  # the prompt's next-token logits (kept for the hybrid's tail, with ``kv``)
    spent: int = 0
    texts: dict = field(default_factory=dict)  # text -> [mass, answer]
    parsed: dict = field(default_factory=dict)  # text -> answer (parse once)
    order: int = 0
    front: float = 0.0  # running sum of the heap's masses (exact fsum at the end)

    def push(self, mass: float, parent: int, token: int) -> None:
        self.order += 1
        self.front += mass
        heapq.heappush(self.heap, (-mass, self.order, parent, token))

    def pop(self) -> tuple[float, int, int]:
        neg, _, parent, token = heapq.heappop(self.heap)
        self.front += neg
        return -neg, parent, token

    def residual(self, exact: bool = False) -> float:
        if not self.heap:
            self.front = 0.0
        front = math.fsum(-e[0] for e in self.heap) if exact else self.front
        return self.pruned + max(0.0, front)


class Enumerator:
    """Best-first enumeration of generation trees over a group of prompts, on the engine's forward pass.

    ``on_pass``: called after each forward pass with (nodes in it, prompts of the group finished): the
    progress bar."""

    #: frontier passes over one key/value store (:mod:`probe.scoring.engine.tree_cache`) where the model allows it;
    #: else each row gets a cache of its prompt and path (:meth:`~probe.scoring.engine.Engine.extension`)
    use_tree = True

    def __init__(self, lm: Any, spec: Any, settings: ParseSettings,
                 on_pass: Callable[[int, int], None] | None = None) -> None:
        self.lm, self.spec, self.max_new = lm, spec, settings.max_new_tokens
        self.plain = _plain_spec(spec)
        self.target, self.max_nodes, self.prune = settings.residual, settings.max_nodes, settings.pruning()
        self.answer_residual = settings.answer_residual
        self.export_frontier, self.open_at_budget = bool(settings.frontier), bool(settings.open_at_budget)
        self.on_pass = on_pass
        self.store: Any = None
        self.batch_size, self.top = max(1, int(settings.batch_size)), settings.top
        tok = lm.tokenizer
        self.engine = Engine(lm.model, pad_id=pad_id_of(tok))
        self.eos = eos_ids(lm)
        self.decode = batch_decoder(tok)
        sliding = getattr(self.engine.config, "sliding_window", None)
        self.sliding = int(sliding) if sliding else None

    # -- the loop ---------------------------------------------------------------------------------------
    def run(self, prompts: list[tuple[int, ...]], parsers: list[Parser],
            decideds: list[Callable[[str], bool] | None]) -> list[ParseDistribution]:
        if self.sliding is not None and max(len(p) for p in prompts) + self.max_new > self.sliding:
            raise ValueError(f"parse_exact: a prompt plus max_new_tokens exceeds the model's sliding window "
                             f"({self.sliding} tokens), which the enumeration's cache does not model")
        states = self._prefill(prompts, parsers, decideds)
        while True:
            batch = self._pick(states)
            if not batch:
                break
            self._expand(states, batch)
            if self.on_pass is not None:  # progress inside a group: nodes expanded, prompts finished
                self.on_pass(len(batch), sum(not self._active(s) for s in states))
        return [self._result(s) for s in states]

    def _target(self, s: _State) -> float:
        """The residual this prompt stops at: ``residual``, or with ``answer_residual`` the smaller of that and
        ``answer_residual`` x the parsed mass so far, never below ``residual x answer_residual``."""
        if self.answer_residual is None:
            return self.target
        return max(self.target * self.answer_residual, min(self.target, self.answer_residual * s.accepted))

    def _active(self, s: _State) -> bool:
        if not s.heap or s.residual() <= self._target(s):
            return False
        return self.max_nodes is None or s.spent < self.max_nodes

    def _pick(self, states: list[_State]) -> list[tuple[int, float, int, int]]:
        """Up to ``batch_size`` frontier entries ``(state, mass, parent, token)``, the most probable of each
        active prompt in turn (every prompt advances in every pass). A prompt stops contributing once the
        picked mass covers what its residual exceeds the target by: more could not be needed this pass."""
        active = [i for i, s in enumerate(states) if self._active(s)]
        need = {i: states[i].residual() - self._target(states[i]) for i in active}
        budget = {i: (self.max_nodes - states[i].spent if self.max_nodes is not None else 1 << 60) for i in active}
        picked: list[tuple[int, float, int, int]] = []
        while active and len(picked) < self.batch_size:
            nxt = []
            for i in active:
                if len(picked) >= self.batch_size:
                    break
                s = states[i]
                if not s.heap or budget[i] <= 0 or need[i] <= 0:
                    continue
                mass, parent, token = s.pop()
                picked.append((i, mass, parent, token))
                need[i] -= mass
                budget[i] -= 1
                nxt.append(i)
            active = nxt
        return picked

    # -- forward passes ---------------------------------------------------------------------------------
    def _prefill(self, prompts: list[tuple[int, ...]], parsers: list[Parser],
                 decideds: list[Callable[[str], bool] | None]) -> list[_State]:
        """Run the prompts once (the engine's :meth:`~probe.scoring.engine.Engine.begin`), keep each one's
        keys and values and queue its first tokens."""
        ext, logits = self.engine.begin(list(prompts))
        # the frontier's passes attend to the prompts' cache as it is, where the model allows (one store)
        self.store = self.engine.tree_store(ext) if self.use_tree else None
        own = ext.own() if self.store is None or self.export_frontier else [None] * len(prompts)
        states = []
        for b, (p, kv, parser, dec) in enumerate(zip(prompts, own, parsers, decideds)):
            s = _State(prompt=p, kv=kv, parser=parser, decided=dec, row=b)  # the prompt's own positions, no padding
            if self.export_frontier:
                s.first = logits[b].float().cpu()
            self._children(s, -1, (), 1.0, logits[b])
            states.append(s)
        return states

    def _expand(self, states: list[_State], batch: list[tuple[int, float, int, int]]) -> None:
        """One forward token per picked frontier entry: each after its prompt and path, through the engine's
        :meth:`~probe.scoring.engine.Engine.extend` (the pad and cache rules live there)."""
        eng = self.engine
        rows = []
        for i, mass, parent, token in batch:
            s = states[i]
            path = s.nodes[parent].path if parent >= 0 else ()
            rows.append((s, mass, parent, token, path))
        if self.store is not None:  # one pass over the store: no cache copied
            logits, at = eng.extend_tree(self.store, [t for _, _, _, t, _ in rows], [s.row for s, *_ in rows],
                                         [[s.nodes[j].at for j in _chain(s, parent)] for s, _, parent, _, _ in rows],
                                         [len(s.prompt) + len(path) for s, _, _, _, path in rows])
            for b, (s, mass, parent, token, path) in enumerate(rows):
                s.spent += 1
                s.nodes.append(_Node(parent, path + (token,), at=at[b]))
                self._children(s, len(s.nodes) - 1, path + (token,), mass, logits[b])
            return
        ext = eng.extension([[s.kv] + [s.nodes[j].kv.unsqueeze(-2) for j in _chain(s, parent)]
                             for s, _, parent, _, _ in rows])
        logits = eng.extend(ext, [t for _, _, _, t, _ in rows])
        new = ext.last()  # [2, L, B, H, D]
        for b, (s, mass, parent, token, path) in enumerate(rows):
            s.spent += 1
            s.nodes.append(_Node(parent, path + (token,), new[:, :, b].clone()))
            self._children(s, len(s.nodes) - 1, path + (token,), mass, logits[b])

    # -- the tree ---------------------------------------------------------------------------------------
    def _children(self, s: _State, node: int, path: tuple[int, ...], mass: float, logits: Any) -> None:
        """Resolve or queue the children of an expanded node with its next-token ``logits``."""

        dist = self._step(s, path, logits) * mass  # float64 path masses
        keep = (dist >= self.prune).nonzero()[:, 0]
        kept = dist[keep]
        order = torch.argsort(kept, descending=True, stable=True)
        keep, kept = keep[order].tolist(), kept[order].tolist()
        cut = max(0.0, float(dist.sum()) - math.fsum(kept)) if len(kept) < dist.shape[0] else 0.0
        s.pruned += cut
        if cut > 0:
            s.pruned_at[node] = (cut, self.prune / mass)
        depth = len(path) + 1
        last = depth >= self.max_new
        ends = [(t, m) for t, m in zip(keep, kept) if m > 0 and t in self.eos]
        rest = [(t, m) for t, m in zip(keep, kept) if m > 0 and t not in self.eos]
        if ends:
            self._leaf(s, self._decode([path])[0], math.fsum(m for _, m in ends))
        if not rest:
            return
        if last or s.decided is not None:
            texts = self._decode([path + (t,) for t, _ in rest])
            for (t, m), text in zip(rest, texts):
                # a text ending in U+FFFD holds an unfinished multi-byte character that later tokens complete:
                # it is not a prefix of its continuations' texts, so it decides nothing yet
                done = ((not last or self.open_at_budget) and s.decided is not None
                        and not text.endswith("\ufffd") and s.decided(text))
                if last and not done and self.open_at_budget:  # the tail samples it on to its longer budget
                    s.pruned += m
                    s.opened.append((m, path + (t,)))
                elif last or done:
                    self._leaf(s, text, m)
                else:
                    s.push(m, node, t)
        else:
            for t, m in rest:
                s.push(m, node, t)

    def _step(self, s: _State, path: tuple[int, ...], logits: Any) -> Any:
        """The node's next-token distribution (float64 ``[vocab]``): the sampler applied with the node's own
        history, the prompt's ids and the path's (penalties count them, as ``generate`` does per sequence)."""
        if self.plain is not None:  # temperature / top-p only: the SamplingSpec's numbers, bit for bit
            return sampling_distribution(logits.float().cpu(), self.plain)
        history = TokenHistory.from_ids([s.prompt], [path]) if self.spec.uses_history else None
        return step_distribution(logits.float().cpu().unsqueeze(0), self.spec, history).probs[0]

    def _decode(self, paths: list[tuple[int, ...]]) -> list[str]:
        return self.decode(paths)

    def _leaf(self, s: _State, text: str, mass: float) -> None:
        if text in s.parsed:
            answer = s.parsed[text]
        else:
            answer = s.parser(text)
            s.parsed[text] = answer
        if answer is None:
            s.rejected += mass
        else:
            s.probs[answer] = s.probs.get(answer, 0.0) + mass
            s.accepted += mass
        entry = s.texts.setdefault(text, [0.0, answer])
        entry[0] += mass

    def _result(self, s: _State) -> ParseDistribution:
        residual = s.residual(exact=True)
        total = math.fsum(s.probs.values()) + s.rejected + residual
        # float64 products of step probabilities sum to 1 up to ~1e-12; fold that rounding into the residual so
        # the invariant holds exactly, and never below 0
        residual = max(0.0, residual + (1.0 - total)) if abs(1.0 - total) < 1e-6 else residual
        top = sorted(((t, m, a) for t, (m, a) in s.texts.items()), key=lambda x: -x[1])[: self.top]
        out = ParseDistribution(dict(sorted(s.probs.items(), key=lambda kv: -kv[1])), s.rejected, residual,
                                s.spent, len(s.prompt), top)
        if self.export_frontier:
            out.frontier = frontier_of(s)
            out.prompt_cache = (s.kv, s.first)
        return out


def frontier_of(s: _State) -> list[tuple[float, tuple[tuple[int, ...], float | None]]]:
    """The tail a prompt's enumeration left, as ``(mass, (path, below))`` entries that partition it: each open
    branch (its path, ``below`` None) and each expanded node's pruned children (the node's path, ``below``
    the step probability under which a child was pruned); for :mod:`probe.scoring.parse.hybrid`."""
    out = []
    for neg, _, parent, token in s.heap:
        path = (s.nodes[parent].path if parent >= 0 else ()) + (token,)
        out.append((-neg, (path, None)))
    for node, (mass, below) in s.pruned_at.items():
        out.append((mass, (s.nodes[node].path if node >= 0 else (), below)))
    out.extend((mass, (path, None)) for mass, path in s.opened)
    return out


def _plain_spec(spec: Any) -> Any:
    """The :class:`SamplingSpec` of ``spec`` when it sets only temperature and top-p (else None)."""
    if not isinstance(spec, SamplerChain):
        return spec
    if set(spec.steps()) <= {"temperature", "top_p"}:
        return spec.to_spec()
    return None


def _chain(s: _State, node: int) -> list[int]:
    """The expanded nodes from the first generated token down to ``node`` (empty for the prompt)."""
    out = []
    while node >= 0:
        out.append(node)
        node = s.nodes[node].parent
    return out[::-1]
