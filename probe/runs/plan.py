"""The plan a task run prints before any work: what it will generate and score, and about how long it takes.

The time is an estimate, never a promise: one short calibration on the loaded model (a forward pass over a
block of tokens, and one over a single token per row, timed after a warm-up pass) gives the seconds per
scored token and per generation step on this machine with its thread count; the plan multiplies them by
the tokens still to score (each distinct prompt once, then every option's own tokens; prompts that share a
beginning, such as a system prompt, are counted in full, so the prefix tree usually runs fewer) and
by the generation steps still to take (every chain run to its ``max_new_tokens``, so chains that stop early
make it faster). When the calibration cannot run (a model without a plain forward), a conservative rate
from the parameter count stands in, and the plan says so.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Sequence

from probe.runs.chunks import group_chunks
from probe.scoring.parse.exact import run_parse_requests


#: tokens per row of the timed block (long enough to be past the per-call overhead, short enough to be quick)
CALIBRATION_TOKENS = 64
#: the fallback rate: floating-point operations per second a busy CPU thread reaches at least
FALLBACK_FLOPS = 2e9


@dataclass(frozen=True)
class Rates:
    """Seconds per scored token (``token``) and per generation step of ``rows`` rows (``step``)."""

    token: float
    step: float
    rows: int
    how: str


def calibrate(lm: Any, rows: int) -> Rates:
    """Time the loaded model on this machine: a warm-up pass, a ``rows x CALIBRATION_TOKENS`` block and one
    token per row. Reads no data, draws no random numbers, writes nothing."""
    rows = max(1, min(int(rows), 8))  # 8 x 64 tokens: long enough to time, short on a busy CPU
    try:
        import torch

        model = lm.model
        device = next(model.parameters()).device
        tok = getattr(lm, "tokenizer", None)
        fill = getattr(tok, "eos_token_id", None)
        fill = int(fill) if isinstance(fill, int) else 0

        def timed(shape: tuple[int, int]) -> float:
            ids = torch.full(shape, fill, dtype=torch.long, device=device)
            t0 = time.perf_counter()
            with torch.inference_mode():
                model(input_ids=ids, use_cache=False)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return time.perf_counter() - t0

        timed((1, 8))  # warm-up: first-call allocations and kernel selection
        block = timed((rows, CALIBRATION_TOKENS))
        step = timed((rows, 1))
        # a decoding step also attends over its cache: count it as two single-token passes
        return Rates(block / (rows * CALIBRATION_TOKENS), 2 * step, rows,
                     f"a calibration pass on this machine: {device.type}, {_threads()} thread(s)")
    except Exception:  # noqa: BLE001 - any model the plain forward does not fit: the fallback rate
        n = _n_parameters(lm)
        per_token = 2 * n / FALLBACK_FLOPS if n else 0.01
        return Rates(per_token, per_token * rows, rows, "a conservative rate from the parameter count")


def _threads() -> int:
    try:
        import torch

        return int(torch.get_num_threads())
    except Exception:  # noqa: BLE001
        return 1


def _n_parameters(lm: Any) -> int:
    try:
        return sum(p.numel() for p in lm.model.parameters())
    except Exception:  # noqa: BLE001
        return 0


def duration(seconds: float) -> str:
    """``"~40 s"``, ``"~3 min"``, ``"~2.5 h"``.

    >>> duration(4.2), duration(185), duration(9000)
    ('~4 s', '~3 min', '~2.5 h')
    """
    if not math.isfinite(seconds):
        return "unknown"
    if seconds < 90:
        return f"~{max(seconds, 1):.0f} s"
    if seconds < 90 * 60:
        return f"~{seconds / 60:.0f} min"
    return f"~{seconds / 3600:.1f} h"


def scoring_tokens(encode: Any, requests: Sequence[Any], done: set[str], extra: Mapping[str, int] = {}) -> int:
    """Tokens the requests not yet ``done`` run: each distinct prompt once, then every option's own tokens
    after it (what a request's sequences share is computed once; what different prompts share, such as
    a system prompt, is counted for each, so the engine's prefix tree usually runs fewer). ``extra``:
    more tokens per request id (a chain not generated yet)."""
    total = 0
    prompts: set[int] = set()
    for r in requests:
        if r.id in done:
            continue
        try:
            enc = encode(r)
        except Exception:  # noqa: BLE001 - a request the encoder refuses fails later, with its own message
            continue
        n = int(enc.n_prompt_tokens or 0)
        seqs = enc.sequences
        if seqs and n:
            key = hash(tuple(seqs[0].ids[:n]))
            if key not in prompts:
                prompts.add(key)
                total += n
            total += sum(max(len(s.ids) - n, 0) for s in seqs)
        else:
            total += sum(len(s.ids) for s in seqs)
        total += int(extra.get(r.id, 0))
    return total


def computed_tokens(scorer: Any, requests: Sequence[Any], done: set[str], chunk_size: int,
                    extra: Mapping[str, int] = {}, progress: Any = None) -> int:
    """The tokens the engine computes for the requests not yet ``done``: each chunk the runner scores
    (:func:`probe.runs.chunks.group_chunks`, a chunk with any request left is scored whole) as the scorer's own
    prefix tree runs it, shared prefixes once (what ``timing.json``'s ``tokens_computed`` counts), plus ``extra``
    tokens per request id (a chain not generated yet). A model that runs each row alone (the plain path) counts
    every sequence in full. ``progress``: a :class:`probe.progress.Stage` advanced per request tokenized."""
    plain = getattr(getattr(getattr(scorer, "engine", None), "capabilities", None), "scoring_path", "") == "plain"
    total = 0
    for part in group_chunks(requests, chunk_size):
        if all(r.id in done for r in part):
            continue
        encoded = []
        for r in part:
            try:
                encoded.append(scorer.encode(r))
            except Exception:  # noqa: BLE001 - a request the encoder refuses fails later, with its own message
                pass
            if progress is not None:
                progress.advance()
            total += int(extra.get(r.id, 0)) if r.id not in done else 0
        if encoded:
            total += sum(len(r.ids) for r in scorer.rows(encoded)) if plain else tree_tokens(scorer.plan(encoded))
    return total


def tree_tokens(nodes: Sequence[Any]) -> int:
    """The tokens a prefix tree computes: every node's own span once."""
    return sum(n.width + tree_tokens(n.children) for n in nodes)


def generation_seconds(rates: Rates, gen_left: Sequence[Any], encode_prompt: Any, rows: int) -> float:
    """At most: every row-batch of the chains still to make runs to its longest ``max_new_tokens``."""
    if not gen_left:
        return 0.0
    rows = max(1, int(rows))
    seconds = 0.0
    for i in range(0, len(gen_left), rows):
        part = gen_left[i:i + rows]
        steps = max(int(getattr(g, "max_new_tokens", 0) or 0) for g in part)
        seconds += steps * rates.step * max(len(part) / rates.rows, 1.0)
        seconds += sum(encode_prompt(g) for g in part) * rates.token
    return seconds


#: nodes per prompt of the parse calibration: enough for a narrow tree (T = 0.1) to close, so its real size is seen
PARSE_CALIBRATION_NODES = 64
#: prompts the parse calibration enumerates (at most one batch)
PARSE_CALIBRATION_PROMPTS = 4


class ParseRate(NamedTuple):
    """What the parse calibration saw: seconds per enumerated node, and the share of its prompts whose
    enumeration closed within :data:`PARSE_CALIBRATION_NODES` nodes with their mean nodes (the others are
    expected to run to their node budget)."""

    per_node: float
    closed_share: float
    closed_nodes: float
    #: the calibration prompts' mean length in tokens (a node's cost grows with its prompt: its cache is copied)
    prompt_tokens: float = 0.0
    #: seconds a forward token of the hybrid's tail draws (batched as the run batches them; 0: no tail seen)
    tail_per_token: float = 0.0
    #: the share of the tail's token budget the draws spent (a draw stops at its end or once decided)
    tail_share: float = 1.0


def parse_node_seconds(lm: Any, parse_left: Sequence[Any], batch_size: int) -> ParseRate | None:
    """The parse calibration: prompts still to do spread over the list (:data:`PARSE_CALIBRATION_PROMPTS`), each
    enumerated to at most :data:`PARSE_CALIBRATION_NODES` nodes (the enumeration's own passes, cache and
    parser), timed; a hybrid request also draws a few tail samples (:data:`PARSE_CALIBRATION_DRAWS`), timed
    apart. Deterministic (seeded); the result is discarded. None when it cannot run."""

    cap = PARSE_CALIBRATION_NODES
    # a tail sampled past the enumeration (HBB's 2048 tokens) makes every calibration prompt's head run to its
    # cap and draw: half the prompts keep the plan within seconds of the model loading
    long_tail = any(getattr(r, "tail", None) is not None and getattr(r.tail, "max_new_tokens", None)
                    and r.tail.max_new_tokens > r.max_new_tokens for r in parse_left)
    most = PARSE_CALIBRATION_PROMPTS // 2 if long_tail else PARSE_CALIBRATION_PROMPTS
    k = max(1, min(int(batch_size), most, len(parse_left)))
    # spread over the list: a task lists its prompts by strategy, whose prompts and trees differ in size
    picks = sorted({round(i * (len(parse_left) - 1) / max(1, k - 1)) for i in range(k)})
    part = [_calibration_request(parse_left[i], cap) for i in picks]
    try:
        t0 = time.perf_counter()
        dists = run_parse_requests(lm, part, batch_size=batch_size, top=1)
        seconds = time.perf_counter() - t0
    except Exception:  # noqa: BLE001 - the estimate then falls back to the step rate
        return None
    nodes = [max(int(getattr(d, "nodes", 0) or 0), 1) for d in dists]
    if not nodes:
        return None
    closed = [n for n, r in zip(nodes, part) if n < r.max_nodes]
    tokens = [int(getattr(d, "prompt_tokens", 0) or 0) for d in dists]
    tail_s = sum(float(getattr(d, "tail_seconds", 0.0) or 0.0) for d in dists)
    hyb = [d.hybrid for d in dists if getattr(d, "hybrid", None) and d.hybrid.get("n_tail")]
    spent = sum(int(h["tokens"]) for h in hyb)
    budget = sum(int(h["n_tail"]) * int(h["max_new_tokens"]) for h in hyb)
    return ParseRate(max(seconds - tail_s, 0.0) / sum(nodes), len(closed) / len(nodes),
                     sum(closed) / len(closed) if closed else 0.0,
                     sum(t * n for t, n in zip(tokens, nodes)) / sum(nodes),
                     tail_s / spent if spent else 0.0, spent / budget if budget else 1.0)


#: tail draws a hybrid calibration prompt makes at most: enough to time the batched draws, few enough to be cheap
PARSE_CALIBRATION_DRAWS = 2
#: the calibration's tail draws stop at this many tokens (HBB's tails run to 2048): the seconds a tail token
#: are timed on them and scaled to the tail's own budget, so the plan prints within seconds, not after
#: four full-length draws
PARSE_CALIBRATION_TAIL_TOKENS = 32


def _calibration_request(r: Any, cap: int) -> Any:
    """``r`` enumerated to at most ``cap`` nodes; a hybrid tail cut to at most :data:`PARSE_CALIBRATION_DRAWS`
    draws (``ceil(K x residual)`` of K = that many) of at most :data:`PARSE_CALIBRATION_TAIL_TOKENS` tokens
    (still past the enumeration's budget where the tail samples past it)."""

    r = dataclasses.replace(r, max_nodes=min(cap, int(r.max_nodes or cap)))
    tail = getattr(r, "tail", None)
    if tail is None:
        return r
    k = min(int(tail.samples), PARSE_CALIBRATION_DRAWS)
    budget = tail.max_new_tokens
    if budget is not None and budget > PARSE_CALIBRATION_TAIL_TOKENS:
        budget = max(PARSE_CALIBRATION_TAIL_TOKENS, int(r.max_new_tokens) + 1)
    return dataclasses.replace(r, tail=dataclasses.replace(tail, samples=k, max_new_tokens=budget))


def tail_tokens(r: Any, nodes: float) -> float:
    """The forward tokens a hybrid request's tail may spend at most: ``ceil(K x residual)`` draws
    (:func:`probe.scoring.parse.hybrid.tail_budget`) of the tail's budget each, at most K of them (the
    residual is not known before the run); 0 without a tail. ``nodes``: unused (kept for callers)."""
    tail = getattr(r, "tail", None)
    if tail is None:
        return 0.0
    step = max(1, int(tail.max_new_tokens or r.max_new_tokens))
    return float(int(tail.samples) * step)


def parse_seconds(rates: Rates, parse_left: Sequence[Any], encode_prompt: Any,
                  per_node: ParseRate | None = None) -> float:
    """The parse stage's expected seconds: each prompt's nodes as the calibration saw them (a tree that
    closed there closes at its size, the others run to their node limit, ``max_nodes`` or 256 for the
    estimate) at the calibration's seconds a node (:func:`parse_node_seconds`) scaled by the prompt's length
    over the calibration's (each node's pass copies its prompt's cache); a tree left open then draws its
    hybrid tail: the tokens left of the K samples' budget (:func:`tail_tokens`) times the share the
    calibration's draws spent, at its seconds a tail token. Without a calibration, at most: every prompt to
    its limit, one cached token per node, the frontier batched ``rates.rows`` to a pass, and the whole tail
    budget at the step rate."""
    seconds = 0.0
    for r in parse_left:
        limit = int(getattr(r, "max_nodes", None) or 256)
        if per_node is not None:
            nodes = per_node.closed_share * min(per_node.closed_nodes, limit) + (1 - per_node.closed_share) * limit
            scale = encode_prompt(r) / per_node.prompt_tokens if per_node.prompt_tokens > 0 else 1.0
            seconds += nodes * per_node.per_node * scale
            seconds += ((1 - per_node.closed_share) * tail_tokens(r, limit) * per_node.tail_share
                        * per_node.tail_per_token)
        else:
            seconds += limit * rates.step / rates.rows + encode_prompt(r) * rates.token
            seconds += tail_tokens(r, limit) * rates.step / rates.rows
    return seconds


def plan_lines(task: str, n_items: int, n_requests: int, n_left: int, tokens: int, rates: Rates | None,
               gen_total: int = 0, gen_left: Sequence[Any] = (), gen_seconds: float = 0.0, note: str = "",
               exact: bool = True, parse_total: int = 0, parse_left: Sequence[Any] = (),
               parse_s: float = 0.0) -> list[str]:
    """The lines printed before any work: generations (how many, how long at most, why, how to skip them),
    the scoring (requests, tokens, estimated time), the exact enumeration of the paper's sampled answers
    (how many prompts, how long at most, how to skip it), then the total and what the estimate rests on."""
    lines = []
    if gen_total:
        most = max((int(getattr(g, "max_new_tokens", 0) or 0) for g in gen_left), default=0)
        when = f"estimated at most {duration(gen_seconds)}" if gen_left and rates else "nothing left to generate"
        lines.append(f"{task}: plan: {gen_total} generation(s) before scoring ({len(gen_left)} still to make"
                     + (f", up to {most} new tokens each" if gen_left else "") + f"): {when}"
                     + (f"; they are {note}" if note else "") + ".")
    count = f"{n_requests}" if exact else f"about {n_requests}"
    head = f"{task}: plan: {n_items} item(s) -> {count} request(s) to score"
    if not exact and not n_requests:
        lines.append(f"{task}: plan: {n_items} item(s); the requests to score are counted once the generations "
                     "exist.")
    elif n_left == 0:
        lines.append(f"{head}: every one already scored (nothing to score).")
    else:
        est = f"; estimated {duration(tokens * rates.token)}" if rates else ""
        lines.append(f"{head} ({n_left} still to score, {tokens:,} tokens to compute"
                     f"{' with the chains' if gen_total else ', shared prefixes once'})"
                     f"{est}" + ("" if gen_left or parse_left or not rates else f" ({_basis(rates)})") + ".")
    if parse_total:
        most = max((int(getattr(r, "max_nodes", None) or 0) for r in parse_left), default=0)
        when = f"estimated {duration(parse_s)}" if parse_left and rates else "nothing left to enumerate"
        lines.append(f"{task}: plan: then {parse_total} prompt(s) whose sampled, parsed answer is enumerated "
                     f"exactly (the paper's own procedure; {len(parse_left)} still to do"
                     + (f", up to {most} nodes each" if most else "")
                     + (", then ceil(K x residual) tail draws each, at most the paper's K" if any(
                         getattr(r, "tail", None) is not None for r in parse_left) else "")
                     + f"): {when}; skip with --set parse_exact=false.")
    if rates and (gen_left or parse_left):
        total = tokens * rates.token + gen_seconds + parse_s
        lines.append(f"{task}: plan: estimated {duration(total)} in all ({_basis(rates)}).")
    return lines


def _basis(rates: Rates) -> str:
    return (f"from {rates.how}; an estimate, not a measurement: shared prompt prefixes and chains that stop early "
            "make it shorter, a busier machine longer")
