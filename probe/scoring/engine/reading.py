"""The engine's read: log-probabilities at the scored positions only, from float32 logits in chunks, so a
``[batch, seq, vocab]`` float32 tensor never exists.

Two layouts: :func:`read_rows` (the level path: per row, its label position first, then its scored tokens
in order, copied to the host per chunk) and :func:`read_positions` (the packed pass: every scored position of
a pass gathered at once, the result left on the device for one copy at the end of a call).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from probe.scoring.engine.rows import Row
from probe.scoring.sampler.sampling import block_logprobs, target_logprobs

HEAD_CHUNK = 256  # rows of hidden states unembedded at once: 256 x vocab float32 stays small

Logits = Callable[[torch.Tensor], torch.Tensor]  # hidden states [n, d_model] -> float32 logits [n, vocab]


@dataclass
class RowOutput:
    label_logprobs: dict[int, float] = field(default_factory=dict)
    token_logprobs: list[float] = field(default_factory=list)
    finite: bool = True
    #: per sampling spec of the call (see probe.scoring.sampler.sampling): the same numbers under that spec
    sampled_labels: list[dict[int, float]] = field(default_factory=list)
    sampled_tokens: list[list[float]] = field(default_factory=list)


def read_rows(logits_of: Logits, hidden: torch.Tensor, rows: list[Row], starts: list[int], sampling: tuple = (),
              greedy: dict | None = None) -> list[RowOutput]:
    """Log-probabilities of ``rows`` at their scored positions, row ``i`` in ``hidden[i]`` from position
    ``starts[i]`` on, in float32 (sampling ones in float64). ``greedy``: a dict that also receives, per row
    key ``(ids, score_from)``, the argmax token at each scored token position (first index on ties)."""
    outputs = [RowOutput(sampled_labels=[{} for _ in sampling], sampled_tokens=[[] for _ in sampling])
               for _ in rows]
    argmaxes: list[list[int]] = [[] for _ in rows]
    wanted = _wanted(rows, starts)
    for c in range(0, len(wanted), HEAD_CHUNK):
        chunk = wanted[c : c + HEAD_CHUNK]
        h = hidden[torch.tensor([w[0] for w in chunk]), torch.tensor([w[1] for w in chunk])]
        logits = logits_of(h)
        finite_rows, norm = finite_and_logsumexp(logits)
        finite = finite_rows.tolist()
        sampled = target_logprobs(logits, [w[2] for w in chunk], sampling) if sampling else []
        top = logits.argmax(dim=-1).tolist() if greedy is not None else None
        # every target of the chunk gathered at once: one device-to-host copy per chunk, not per position
        at = [k for k, w in enumerate(chunk) for _ in w[2]]
        ks = torch.tensor(at, dtype=torch.long, device=logits.device)
        ts = torch.tensor([t for w in chunk for t in w[2]], dtype=torch.long, device=logits.device)
        flat = (logits[ks, ts] - norm[ks]).tolist()
        first = 0
        for k, (i, _, targets) in enumerate(chunk):
            lp = flat[first : first + len(targets)]
            first += len(targets)
            out = outputs[i]
            out.finite &= bool(finite[k])
            if rows[i].label_ids and not out.label_logprobs and targets is rows[i].label_ids:
                out.label_logprobs = dict(zip(targets, lp))
                for s, per_spec in enumerate(sampled):
                    out.sampled_labels[s] = dict(zip(targets, per_spec[k]))
            else:
                out.token_logprobs.append(lp[0])
                for s, per_spec in enumerate(sampled):
                    out.sampled_tokens[s].append(per_spec[k][0])
                if top is not None:
                    argmaxes[i].append(top[k])
    if greedy is not None:
        greedy.update({(r.ids, r.score_from): tuple(a) for r, a in zip(rows, argmaxes)})
    return outputs


def _wanted(rows: list[Row], starts: list[int]) -> list[tuple[int, int, tuple[int, ...]]]:
    """``(row, position in the pass, target ids)`` of every read: a row's label position first, then its
    scored tokens in order."""
    wanted = []
    for i, (r, s) in enumerate(zip(rows, starts)):
        if r.label_ids:
            wanted.append((i, len(r.ids) - 1 - s, r.label_ids))
        for j in range(max(r.score_from, s + 1), len(r.ids)):
            wanted.append((i, j - 1 - s, (r.ids[j],)))
    return wanted


def read_positions(logits_of: Logits, hidden: torch.Tensor, where: list[torch.Tensor],
                   chunks: list[tuple[int, int, int, int]], sampling: tuple = ()) -> torch.Tensor:
    """The log-probabilities a packed pass reads, on the device, as one float64 tensor: the target pairs'
    log-probabilities, then 1.0/0.0 per position (all logits finite), then per sampling spec the
    pairs' sampling log-probabilities. ``where``: positions' rows and columns, pairs' positions and
    tokens (device tensors, :class:`probe.scoring.engine.read_plan.ReadPlan`); ``chunks``: ``(first position,
    end, first pair, end)`` of each head chunk."""
    pos_row, pos_col, pair_pos, pair_tok = where
    picked = hidden[pos_row, pos_col]  # [positions, d_model]: one gather of every scored position
    lps, fins, sampled = [], [], []
    for a, b, pa, pb in chunks:
        logits = logits_of(picked[a:b])  # [chunk, vocab] float32
        at, tok = _on(pair_pos[pa:pb] - a, logits.device), _on(pair_tok[pa:pb], logits.device)
        finite, norm = finite_and_logsumexp(logits)
        fins.append(finite)
        lps.append(logits[at, tok] - norm[at])
        if sampling:
            sampled.append(block_logprobs(logits, at, tok, sampling))
    parts = [torch.cat(lps).double(), torch.cat(fins).double()]
    if sampling:
        parts.append(torch.cat(sampled, dim=1).flatten())
    return torch.cat(parts)


def _on(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``, copied only when it is elsewhere (a head on another GPU under a device_map)."""
    return t if t.device == device else t.to(device)


def finite_and_logsumexp(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``logits [n, vocab]``: whether every logit is finite, and the row's logsumexp, bit for bit
    ``torch.isfinite(logits).all(-1)`` and ``torch.logsumexp(logits, -1)``, from one reduction to the
    maximum. A row's logits are all finite iff its largest and its smallest are (the maximum is NaN when
    one is NaN), so the check reads the row twice instead of writing four [n, vocab] temporaries; the
    logsumexp is PyTorch's own steps (an infinite maximum shifts by 0) on that maximum."""
    top = logits.amax(dim=-1)
    finite = torch.isfinite(top) & torch.isfinite(logits.amin(dim=-1))
    shift = top.masked_fill(top.abs() == math.inf, 0)
    return finite, torch.sum((logits - shift.unsqueeze(-1)).exp_(), dim=-1).log_().add_(shift)
