"""The hybrid estimator's tail draws: frontier entries completed with the paper's sampler, batched.

Each draw starts from a frontier entry :func:`~probe.scoring.parse.exact.parse_exact` left (a path, and for a
pruned entry the step mass under which pruning left its child out) and samples with the whole sampler chain
to the tail's budget. The draws of every request advance together, one token a step: over one key/value
store of their prompts where the model's attention allows it (:meth:`probe.scoring.engine.Engine.extend_tree`),
else in batches of rows, each with a cache (:meth:`~probe.scoring.engine.Engine.extend`). Each draw has its own
random stream, so a request's draws are the same in any batch or order. :func:`~probe.scoring.parse.hybrid.complete_tails`
is the entry point.
"""

from __future__ import annotations

import gc
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from probe.scoring.engine import Engine, pad_id_of, select_rows
from probe.scoring.engine.memory import HEADROOM, ModelShape, free_bytes
from probe.scoring.sampler.chain import TokenHistory, sample_next, step_distribution

#: positions (prompt + budget) a batch of tail draws holds at most: 64 rows of short answers, fewer long ones
TAIL_BATCH_TOKENS = 1 << 15
#: on a GPU the batch grows to what its free memory holds (:func:`tail_tokens`), up to this many rows
TAIL_MAX_ROWS = 4096


def tail_tokens(model: Any, free: int | None = None) -> int:
    """Positions (prompt + budget) one batch of tail draws may hold: :data:`TAIL_BATCH_TOKENS` on a CPU; on a GPU
    as many as ``HEADROOM`` of its free memory holds (``free``: bytes to plan for, default the device's), each
    position's keys and values over every layer plus one layer's gathered, head-expanded copy. A draw runs
    long answers (2048 tokens) a token a pass, so a pass of a few rows leaves a GPU idle; a batch
    that still runs out of memory is halved and run again (:func:`complete_rows`)."""

    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    if device.type != "cuda" and free is None:
        return TAIL_BATCH_TOKENS
    try:
        shape = ModelShape.of(model)
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        return TAIL_BATCH_TOKENS
    free = free_bytes(device) if free is None else int(free)
    if not free:
        return TAIL_BATCH_TOKENS
    per = shape.kv_bytes_per_token + 2 * 2 * shape.n_heads * shape.head_dim * shape.dtype_bytes
    return max(TAIL_BATCH_TOKENS, int(HEADROOM * free - shape.head_reserve) // max(1, per))


def pick_frontier(frontier: Sequence[tuple[float, Any]], n: int, rng: Any) -> list[Any]:
    """``n`` frontier handles drawn in proportion to their mass (as :func:`draw_tail` draws them)."""

    mass = np.asarray([m for m, _ in frontier], dtype=float)
    return [frontier[int(i)][1] for i in rng.choice(len(frontier), size=n, p=mass / mass.sum())]


def draw_generator(seed: int, j: int) -> Any:
    """Draw ``j``'s own random stream: a draw's tokens depend on nothing else in its batch or its order."""

    return torch.Generator().manual_seed((int(seed) + int(j)) % (1 << 63))


def prompt_vectors(engine: Any, ids: Sequence[int], prompt_cache: Any) -> tuple[Any, Any, int]:
    """A prompt's keys and values ``[2, layers, heads, P, dim]``, its next-token logits ``[vocab]`` and the
    forward tokens spent on them: the enumeration's (``prompt_cache``, free) or one pass of the engine."""

    if prompt_cache is not None:
        kv, first = prompt_cache
        return kv, first.reshape(-1).float().cpu(), 0
    with torch.inference_mode():
        ext, logits = engine.begin([tuple(ids)])
    return ext.own()[0], logits[0].float().cpu(), len(ids)


@dataclass
class TailRow:
    """One tail draw: the prompt's ids, keys and values and next-token logits; the frontier ``path`` and the
    pruned entry's ``below`` (None for an open entry); the draw's generator; the parser, ``decided`` and the
    budget."""

    prompt: Sequence[int]
    kv: Any
    first: Any
    path: list
    below: float | None
    gen: Any
    parser: Callable[[str], Any]
    decided: Callable[[str], bool] | None
    max_new: int


def complete_rows(engine: Any, rows: Sequence[TailRow], chain: Any, eos: set[int], tokenizer: Any,
                  batch_size: int = 64) -> tuple[list[Any], list[int]]:
    """Each row completed and parsed, ``batch_size`` rows at a time; per row its answer and forward tokens.

    The rows of a batch advance together, one :meth:`~probe.scoring.engine.Engine.extend` a step: a row
    first runs its frontier path a token a step, then samples. A row leaves the batch at an
    end-of-sequence id, its budget, or once ``decided(text)`` (no continuation changes the answer). A batch
    that runs out of device memory runs again in halves (each draw restarted from its stream's start, so the
    draws do not change), and the smaller batches stay."""
    answers: list[Any] = [None] * len(rows)
    tokens = [0] * len(rows)
    step, a = max(1, int(batch_size)), 0
    while a < len(rows):
        states = [r.gen.get_state() for r in rows[a:a + step]]
        try:
            done = _complete_batch(engine, rows[a:a + step], chain, eos, tokenizer)
        except (RuntimeError, MemoryError) as exc:
            from probe.scoring.scorer import is_oom

            if step == 1 or not is_oom(exc):
                raise
            done = None
        if done is None:
            # out of memory: the batch again in halves, each draw from where its stream started (the same
            # draws), and the smaller batches from then on; the failed batch's tensors are freed first (out
            # of the except block, whose traceback still holds them)
            for r, st in zip(rows[a:a + step], states):
                r.gen.set_state(st)
            _free_device_memory()
            failed, step = min(step, len(rows) - a), max(1, min(step, len(rows) - a) // 2)
            # said as the scorer's back-off says it: the run goes on, slower, with the same numbers
            warnings.warn(f"out of memory with {failed} tail draws in one batch; continuing with at most {step} "
                          "(the draws are unchanged)", RuntimeWarning, stacklevel=2)
            continue
        for i, (ans, t) in enumerate(done, start=a):
            answers[i], tokens[i] = ans, t
        a += len(done)
    return answers, tokens


def _free_device_memory() -> None:
    """What a failed batch left in the allocator, returned before the smaller batches run."""

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _complete_batch(engine: Any, rows: Sequence[TailRow], chain: Any, eos: set[int], tokenizer: Any
                    ) -> list[tuple[Any, int]]:
    """One batch of :func:`complete_rows`: per row its answer and forward tokens."""
    chunk = [_Draw(r) for r in rows]
    # one key/value store where the model allows: the prompts are read where they are, shared frontier
    # paths run once, and nothing is copied when a draw ends (else a cache per row)
    prompts: dict[int, int] = {}  # a prompt's vectors (shared by its draws) -> its row in the store
    blocks = []
    for d in chunk:
        if id(d.row.kv) not in prompts:
            prompts[id(d.row.kv)] = len(blocks)
            blocks.append(d.row.kv)
    longest = max(len(d.row.prompt) + max(d.row.max_new, len(d.row.path)) for d in chunk)
    store = engine.tree_store_of(blocks, longest)
    if store is not None:
        _advance_tree(engine, store, chunk, [prompts[id(d.row.kv)] for d in chunk], chain, eos, tokenizer)
    else:
        _advance(engine, chunk, chain, eos, tokenizer)
    return [(d.row.parser(_text(tokenizer, d.path, eos)), d.spent) for d in chunk]


class _Draw:
    """A row's state while it advances: its path so far, tokens of it in the cache, and whether it is done."""

    def __init__(self, row: TailRow) -> None:
        self.row, self.path, self.fed, self.below = row, list(row.path), 0, row.below
        self.spent = 0  # forward tokens counted to this draw (a shared path prefix: to the first that needs it)
        self.done, self.fresh = False, True  # fresh: not yet checked for its end


def _text(tokenizer: Any, path: Sequence[int], eos: set[int]) -> str:
    return tokenizer.decode([t for t in path if t not in eos], skip_special_tokens=True)


def _finished(d: _Draw, eos: set[int], tokenizer: Any) -> bool:
    """Whether a draw stops before sampling again: its budget, an end-of-sequence id, or ``decided``."""
    path = d.path
    if len(path) >= d.row.max_new or (path and path[-1] in eos):
        return True
    if d.row.decided is None or not path:
        return False
    text = _text(tokenizer, path, eos)
    return not text.endswith("\ufffd") and bool(d.row.decided(text))


def _advance(engine: Any, draws: list[_Draw], chain: Any, eos: set[int], tokenizer: Any) -> None:
    """Run a batch of draws to their ends (in place): each step samples every row whose path is in the cache
    (and not finished), drops finished rows, and feeds every live row its next token in one forward pass."""

    logits = torch.stack([d.row.first for d in draws])
    with torch.inference_mode():
        ext = engine.extension([[d.row.kv] for d in draws])
        live = list(range(len(draws)))  # the rows of ``ext``, in order
        while live:
            _sample_step(draws, live, logits, chain, eos, tokenizer)
            keep = [k for k, i in enumerate(live) if not draws[i].done]
            if len(keep) < len(live):
                index = torch.tensor(keep, dtype=torch.long)
                ext.cache, ext.mask = select_rows(ext.cache, index), ext.mask[index]
                ext.lengths, live = [ext.lengths[k] for k in keep], [live[k] for k in keep]
            if not live:
                break
            out = engine.extend(ext, [draws[i].path[draws[i].fed] for i in live]).float().cpu()
            for k, i in enumerate(live):
                draws[i].fed += 1
                draws[i].spent += 1
                if draws[i].fed == len(draws[i].path):
                    logits[i] = out[k]


def _advance_tree(engine: Any, store: Any, draws: list[_Draw], prompt_of: list[int], chain: Any, eos: set[int],
                  tokenizer: Any) -> None:
    """:func:`_advance` over one key/value store (:meth:`~probe.scoring.engine.Engine.extend_tree`), step for
    step: each pass, every live draw feeds its next token (of its frontier path, or the one it just sampled).
    Draws move in lockstep (the k-th pass feeds every draw's k-th token), so draws whose sequences agree so far
    feed the same token after the same node in the same pass: it runs once, counted to the first of them.
    A draw's tokens and answer are those of :func:`_advance` (the same logits up to float rounding)."""

    logits = torch.stack([d.row.first for d in draws])
    last = [-1 - p for p in prompt_of]  # each draw's last node in the store (-1 - its prompt row: none yet)
    nodes: list[list[int]] = [[] for _ in draws]
    with torch.inference_mode():
        live = list(range(len(draws)))
        while live:
            _sample_step(draws, live, logits, chain, eos, tokenizer)
            live = [i for i in live if not draws[i].done]
            if not live:
                break
            made: dict[tuple[int, int], int] = {}  # (last node, token) -> its row in this pass
            first: list[int] = []  # per row, the draw it is counted to
            for i in live:
                key = (last[i], draws[i].path[draws[i].fed])
                if key not in made:
                    made[key] = len(first)
                    first.append(i)
            out, at = engine.extend_tree(store, [draws[i].path[draws[i].fed] for i in first],
                                         [prompt_of[i] for i in first], [nodes[i] for i in first],
                                         [len(draws[i].row.prompt) + draws[i].fed for i in first])
            out = out.float().cpu()
            for i in first:
                draws[i].spent += 1
            for i in live:
                d = draws[i]
                row = made[(last[i], d.path[d.fed])]
                last[i] = at[row]
                nodes[i].append(at[row])
                d.fed += 1
                if d.fed == len(d.path):
                    logits[i] = out[row]


def _sample_step(draws: list[_Draw], live: list[int], logits: Any, chain: Any, eos: set[int], tokenizer: Any) -> None:
    """One sampled token for every live draw whose path is all fed and that is not finished (checked once
    before its first sample, and after each), in place; ``logits``: each draw's next-token logits."""
    ready = []
    for i in live:
        d = draws[i]
        if d.fed == len(d.path):
            d.done = d.done or (d.fresh and _finished(d, eos, tokenizer))
            d.fresh = False
            if not d.done:
                ready.append(i)
    if ready:
        _sample(draws, ready, logits[ready], chain)
        for i in ready:  # a row at its end needs no further pass
            draws[i].done = _finished(draws[i], eos, tokenizer)


def _sample(draws: list[_Draw], ready: list[int], logits: Any, chain: Any) -> None:
    """One sampled token for each ready row, each from its own generator."""

    history = TokenHistory.from_ids([draws[i].row.prompt for i in ready], [draws[i].path for i in ready])
    probs = step_distribution(logits, chain, history).probs
    for k, i in enumerate(ready):
        below = draws[i].below
        if below is not None:  # a pruned entry: only the children pruning left out
            probs[k] = torch.where(probs[k] < below, probs[k], torch.zeros_like(probs[k]))
            draws[i].below = None
    picks = sample_next(probs, [draws[i].row.gen for i in ready])
    for k, i in enumerate(ready):
        draws[i].path.append(int(picks[k]))


class CachedCompleter:
    """Completes tail entries of one prompt through the engine's extension API (:func:`complete_rows`): the
    prompt runs once, a draw runs its frontier path and then one token a step, and draws of one call advance
    together. Stops at an end-of-sequence id, the budget, or once ``decided(text)``. ``prompt_cache``: the
    enumeration's prompt vectors ``[2, layers, heads, P, dim]`` and next-token logits, so the prompt is not run
    again (None: run here, counted in ``tokens``). Draw ``j`` (counted over calls) has its own stream from
    ``seed``. ``tokens``: forward tokens spent."""

    def __init__(self, lm: Any, prompt_ids: Sequence[int], chain: Any, max_new_tokens: int,
                 parser: Callable[[str], Any], decided: Callable[[str], bool] | None, eos: set[int],
                 seed: int = 0, prompt_cache: Any = None, batch_size: int = 64) -> None:

        self.lm, self.prompt, self.chain = lm, tuple(prompt_ids), chain
        self.max_new, self.parser, self.decided, self.eos = int(max_new_tokens), parser, decided, set(eos)
        self.seed, self.batch_size, self.drawn = int(seed), int(batch_size), 0
        self.engine = Engine(lm.model, pad_id=pad_id_of(lm.tokenizer))
        self.kv, self.first, self.tokens = prompt_vectors(self.engine, self.prompt, prompt_cache)

    def __call__(self, handle: tuple[Sequence[int], float | None], rng: Any = None) -> Any:
        return self.complete([handle])[0]

    def complete(self, handles: Sequence[tuple[Sequence[int], float | None]]) -> list[Any]:
        """The parsed answers of ``handles`` (``(path, below)``), completed together."""
        rows = [TailRow(self.prompt, self.kv, self.first, list(path), below, draw_generator(self.seed, self.drawn + j),
                        self.parser, self.decided, self.max_new) for j, (path, below) in enumerate(handles)]
        self.drawn += len(rows)
        answers, used = complete_rows(self.engine, rows, self.chain, self.eos, self.lm.tokenizer, self.batch_size)
        self.tokens += sum(used)
        return answers
