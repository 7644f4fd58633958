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

import heapq
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

# The schema lives in parse_schema (no torch); re-exported here, where callers import it.
from probe.scoring.parse.schema import ParseDistribution, ParseRequest
from probe.scoring.tokens import eos_ids  # noqa: F401 (public here too, as before)
from probe.scoring.tokens import prompt_ids as _encode

Parser = Callable[[str], Hashable | None]

#: float64 slack on the mass invariant (products and sums of step probabilities)
_EPS = 1e-9


def parse_exact(
    lm: Any,
    prompts: Sequence[str | Sequence[int]],
    spec: Any,
    *,
    max_new_tokens: int,
    parser: Parser | Sequence[Parser],
    decided: Callable[[str], bool] | Sequence[Callable[[str], bool] | None] | None = None,
    residual: float = 0.01,
    max_nodes: int | None = None,
    answer_residual: float | None = None,
    prune: float | None = None,
    batch_size: int = 32,
    prompt_batch: int = 16,
    top: int = 10,
    progress: bool = False,
    frontier: bool = False,
    open_at_budget: bool = False,
) -> list[ParseDistribution]:
    """The distribution of ``parser(generation)`` under sampling with ``spec``, for each prompt.

    ``spec``: a ``SamplingSpec`` (temperature, top-p) or a ``SamplerChain`` (the whole sampler, per path).
    ``prompts``: strings (encoded as the engine encodes a prompt) or token-id lists (used as given).
    ``parser``: ``text -> answer | None`` for all prompts, or one per prompt.
    ``decided``: optional ``text -> bool`` (one, or one per prompt): True when no continuation of ``text`` can
    change the parser's answer, which ends the branch early (never asked of a text ending in an unfinished
    multi-byte character, U+FFFD, whose continuations rewrite it). ``residual``: stop a prompt once the mass
    not enumerated is at most this. ``max_nodes``: most forward tokens per prompt (None: no limit).
    ``answer_residual``: also go on until the residual is at most this fraction of the prompt's parsed mass
    (``sum(probs)``), so the answer *given* that the parser returned one is certified to about this precision
    (a paper that samples until an answer parses reads that conditional, about which an absolute ``residual``
    says little where few generations parse); never below ``residual * answer_residual`` (nor past ``max_nodes``).
    ``prune``: children below this path mass are not expanded and count as
    residual (default: the smallest stopping residual / 1000). ``batch_size``: nodes per forward pass;
    ``prompt_batch``: prompts enumerated together (their caches held at once).
    ``top``: most probable generations kept per prompt. ``frontier``: also give each result the tail it left
    (:func:`frontier_of`), for the hybrid estimator; ``open_at_budget``: a branch reaching ``max_new_tokens``
    undecided is not parsed but left open (residual, in the frontier), for a tail sampled to a longer budget.
    """
    import torch

    _check_arguments(spec, max_new_tokens, residual, answer_residual)
    n = len(prompts)
    parsers = _per_prompt(parser, n, "parser")
    decideds = _per_prompt(decided, n, "decided") if decided is not None else [None] * n
    prune = _default_prune(residual, answer_residual) if prune is None else float(prune)
    encoded = _encode_prompts(lm.tokenizer, prompts)
    out: list[ParseDistribution] = []
    groups = [range(a, min(n, a + prompt_batch)) for a in range(0, n, prompt_batch)]
    bar = _Progress(n, progress)
    with torch.inference_mode():
        enum = _Enumerator(lm, spec, max_new_tokens, residual, max_nodes, prune, batch_size, top, answer_residual)
        enum.export_frontier, enum.on_pass = bool(frontier), (bar.on_pass if progress else None)
        enum.open_at_budget = bool(open_at_budget)
        for g in groups:
            out.extend(enum.run([encoded[i] for i in g], [parsers[i] for i in g], [decideds[i] for i in g]))
            bar.group_done(len(g))
    bar.close()
    return out


def _check_arguments(spec: Any, max_new_tokens: int, residual: float, answer_residual: float | None) -> None:
    from probe.scoring.sampler.chain import SamplerChain
    from probe.scoring.sampler.sampling import SamplingSpec

    if not isinstance(spec, (SamplingSpec, SamplerChain)):
        raise TypeError("parse_exact: spec must be a SamplingSpec or a SamplerChain")
    if max_new_tokens < 1:
        raise ValueError(f"parse_exact: max_new_tokens must be >= 1, got {max_new_tokens!r}")
    if not 0 <= residual < 1:
        raise ValueError(f"parse_exact: residual must be in [0, 1), got {residual!r}")
    if answer_residual is not None and not 0 < answer_residual <= 1:
        raise ValueError(f"parse_exact: answer_residual must be in (0, 1], got {answer_residual!r}")


def _encode_prompts(tok: Any, prompts: Sequence[str | Sequence[int]]) -> list:
    encoded = [_encode(tok, p) for p in prompts]
    for i, ids in enumerate(encoded):
        if not ids:
            raise ValueError(f"parse_exact: prompt {i} encodes to no tokens")
    return encoded


def _default_prune(residual: float, answer_residual: float | None) -> float:
    """The smallest stopping residual / 1000: children below it are not worth a pass."""
    return (residual * answer_residual if answer_residual is not None else residual) / 1000


class _Progress:
    """The enumeration's bar: prompts finished, moved after every forward pass (not per group of prompts: one
    group can take minutes), and the nodes expanded so far beside it."""

    def __init__(self, n: int, shown: bool) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=n, desc="enumerating generations", unit="prompt", leave=False, disable=not shown)
        self.base = self.nodes = 0
        self.shown = 0.0

    def on_pass(self, nodes: int, finished: int) -> None:
        """After a forward pass of ``nodes`` nodes, with ``finished`` prompts of the current group done."""
        import time

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


def _per_prompt(value: Any, n: int, name: str) -> list:
    if callable(value):
        return [value] * n
    values = list(value)
    if len(values) != n:
        raise ValueError(f"parse_exact: {len(values)} {name}s for {n} prompts")
    return values


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


class _Enumerator:
    """Best-first enumeration of generation trees over a group of prompts, on the engine's forward pass."""

    #: called after each forward pass with (nodes in it, prompts of the group finished): the progress bar
    on_pass: Callable[[int, int], None] | None = None
    #: frontier passes over one key/value store (:mod:`probe.scoring.engine.tree_cache`) where the model allows it;
    #: else each row gets a cache of its prompt and path (:meth:`~probe.scoring.engine.Engine.extension`)
    use_tree = True

    def __init__(self, lm: Any, spec: Any, max_new: int, residual: float, max_nodes: int | None, prune: float,
                 batch_size: int, top: int, answer_residual: float | None = None) -> None:
        from probe.scoring.engine import Engine, pad_id_of

        self.lm, self.spec, self.max_new = lm, spec, max_new
        self.plain = _plain_spec(spec)
        self.target, self.max_nodes, self.prune = residual, max_nodes, prune
        self.answer_residual = answer_residual
        self.export_frontier = self.open_at_budget = False
        self.store: Any = None
        self.batch_size, self.top = max(1, int(batch_size)), top
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
        import torch

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
            from probe.scoring.sampler.sampling import sampling_distribution

            return sampling_distribution(logits.float().cpu(), self.plain)
        from probe.scoring.sampler.chain import TokenHistory, step_distribution

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
    from probe.scoring.sampler.chain import SamplerChain

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


def run_parse_requests(lm: Any, requests: Sequence[ParseRequest], *, batch_size: int = 32, top: int = 10,
                       progress: bool = False) -> list[ParseDistribution]:
    """:func:`parse_exact` over requests with possibly different settings (grouped, order kept)."""
    from probe.scoring.sampler.sampling import SamplingSpec

    from probe.scoring.parse.hybrid import complete_tails, opens_at_budget

    out: list[ParseDistribution | None] = [None] * len(requests)
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(requests):  # a hybrid tail needs the frontier, a longer tail budget open branches
        groups.setdefault((r.spec_key, r.tail is not None, opens_at_budget(r)), []).append(i)
    for ((t, p, max_new, residual, max_nodes, answer_residual, chain), hybrid, opened), idx in groups.items():
        spec = SamplingSpec(t, p) if chain is None else chain
        res = parse_exact(lm, [requests[i].prompt for i in idx], spec, max_new_tokens=max_new,
                          parser=[requests[i].parser for i in idx],
                          decided=[requests[i].decided for i in idx], residual=residual,
                          max_nodes=max_nodes, answer_residual=answer_residual, batch_size=batch_size, top=top,
                          progress=progress, frontier=hybrid, open_at_budget=opened)
        if hybrid:
            complete_tails(lm, [requests[i] for i in idx], res, spec)
        for i, d in zip(idx, res):
            out[i] = d
    return out  # type: ignore[return-value]
