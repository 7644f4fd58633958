"""Sampling-equivalent scores: what temperature / top-p sampling would do, computed exactly.

A :class:`SamplingSpec` names a sampling setting (temperature ``T``, nucleus
``top_p``). From the full-vocabulary logits the engine already has at a scored
position, the distribution a sampler draws from is

1. ``softmax(logits / T)`` over the whole vocabulary;
2. cut to the *nucleus*: the tokens sorted by logit, descending, **ties broken
   by the lower token id first**, and kept up to and including the first one at
   which their cumulative mass reaches ``top_p`` (the smallest such set; with
   ``top_p = 1`` nothing is cut, as in Hugging Face ``generate``);
3. renormalised over the nucleus.

A token outside the nucleus has probability 0 (log-probability ``-inf``).
The arithmetic runs in float64 from the float32 logits, so the nucleus edge
does not move with float32 rounding of the cumulative sum.

>>> import torch
>>> spec = SamplingSpec(temperature=1.0, top_p=0.5)
>>> sampling_distribution(torch.tensor([2.0, 1.0, 0.0]), spec).tolist()
[1.0, 0.0, 0.0]
>>> [round(p, 4) for p in sampling_distribution(torch.tensor([0.0, 0.0]), SamplingSpec(2.0)).tolist()]
[0.5, 0.5]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.

#: most float64 elements (rows x vocabulary) handled at once: bounds memory for large vocabularies
_ELEMENTS = 1 << 21
#: tokens ranked by a top-k before falling back to a full sort of the vocabulary (see _Ranked)
_TOP = 256


@dataclass(frozen=True)
class SamplingSpec:
    """One sampling setting: ``temperature > 0`` and ``0 < top_p <= 1``."""

    temperature: float
    top_p: float = 1.0

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"SamplingSpec: {name} must be a finite number, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.temperature <= 0:
            raise ValueError(f"SamplingSpec: temperature must be > 0, got {self.temperature!r} "
                             "(greedy decoding is the argmax of the exact scores)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingSpec: top_p must be in (0, 1], got {self.top_p!r}")

    def to_dict(self) -> dict[str, float]:
        return {"temperature": self.temperature, "top_p": self.top_p}


@dataclass(frozen=True)
class SampledLabel:
    """A label request under one spec: ``probs`` renormalised over the labels (NaN when no label
    can be sampled) and ``mass``, the chance that one sample is a label's first token."""

    spec: SamplingSpec
    probs: tuple[float, ...]
    mass: float

    def to_dict(self) -> dict[str, Any]:
        return {**self.spec.to_dict(), "probs": list(self.probs), "mass": self.mass}


@dataclass(frozen=True)
class SampledContinuation:
    """A continuation request under one spec: per option the summed tempered, nucleus-cut
    log-likelihood (``-inf`` when a token of the option falls outside the nucleus)."""

    spec: SamplingSpec
    logprobs: tuple[float, ...]
    token_logprobs: tuple[tuple[float, ...], ...]

    def to_dict(self) -> dict[str, Any]:
        return {**self.spec.to_dict(), "logprobs": list(self.logprobs)}


def as_specs(value: Any) -> tuple[SamplingSpec, ...]:
    """Specs from specs, ``{"temperature", "top_p"}`` mappings or ``(T, top_p)`` pairs (YAML, JSON)."""
    if value is None:
        return ()
    if isinstance(value, (SamplingSpec, dict)):
        value = [value]
    out = []
    for v in value:
        if isinstance(v, SamplingSpec):
            out.append(v)
        elif isinstance(v, dict):
            unknown = set(v) - {"temperature", "top_p"}
            if unknown or "temperature" not in v:
                raise ValueError(f"a sampling spec is {{temperature, top_p}}, got {v!r}")
            out.append(SamplingSpec(v["temperature"], v.get("top_p", 1.0)))
        else:
            out.append(SamplingSpec(*v))
    return tuple(out)


def sampling_distribution(logits: Any, spec: SamplingSpec) -> Any:
    """The full distribution (float64, same shape as ``logits``, last axis the vocabulary) a
    sampler draws from under ``spec``; the reference form of :func:`target_logprobs`."""
    import torch

    z = logits.double() / spec.temperature
    probs = torch.softmax(z, dim=-1)
    if spec.top_p >= 1:
        return probs
    if logits.dim() == 1 and logits.shape[0] > NUCLEUS_CANDIDATES:
        cut = _nucleus_from_candidates(logits.double(), probs, spec.top_p)
        if cut is not None:
            return cut / cut.sum(dim=-1, keepdim=True)
    order = torch.sort(logits.double(), dim=-1, descending=True, stable=True).indices  # stable: lower id first on ties
    sorted_p = probs.gather(-1, order)
    keep_sorted = _exclusive(torch.cumsum(sorted_p, dim=-1)) < spec.top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    cut = torch.where(keep, probs, torch.zeros_like(probs))
    return cut / cut.sum(dim=-1, keepdim=True)


#: tokens ranked first when cutting one nucleus: a sort of the whole vocabulary is needed only when these
#: hold less than top_p of the mass
NUCLEUS_CANDIDATES = 1024


def _nucleus_from_candidates(v: Any, probs: Any, top_p: float) -> Any:
    """The nucleus-cut probabilities of one row (``v`` float64 logits ``[vocab]``), ranking only the
    tokens at or above the :data:`NUCLEUS_CANDIDATES`-th largest logit (every tie at that value
    included): they are the first of the full stable ranking, so where they hold at least ``top_p``
    (summed in rank order, as the full cumulative sum sums them) no later token can be kept and the cut
    is the full ranking's, bit for bit. None where they hold less."""
    import torch

    threshold = torch.topk(v, NUCLEUS_CANDIDATES).values[-1]
    ids = (v >= threshold).nonzero()[:, 0]  # ascending ids: the stable sort below keeps them on ties
    order = torch.sort(v[ids], descending=True, stable=True).indices
    ranked = ids[order]
    cum = torch.cumsum(probs[ranked], dim=-1)
    if not bool(cum[-1] >= top_p):
        return None
    keep = torch.zeros_like(probs, dtype=torch.bool)
    keep[ranked] = _exclusive(cum) < top_p
    return torch.where(keep, probs, torch.zeros_like(probs))


def target_logprobs(logits: Any, targets: Sequence[Sequence[int]], specs: Sequence[SamplingSpec]) -> list[list[list[float]]]:
    """Sampling log-probabilities of token ids under each spec, from one block of logits.

    ``logits``: ``[n, vocab]`` (any float dtype, any device); ``targets[k]``: the
    token ids read at row ``k``. Returns ``out[s][k][j]`` = log-probability of
    ``targets[k][j]`` under ``specs[s]`` (``-inf`` outside the nucleus). Rows are
    ranked once and shared by all specs; rows run in blocks of bounded size.
    """
    import torch

    n, vocab = logits.shape
    out: list[list[list[float]]] = [[] for _ in specs]
    step = block_rows(vocab)
    for a in range(0, n, step):
        block = logits[a : a + step]
        tgt = list(targets[a : a + step])
        flat_rows = torch.tensor([k for k, t in enumerate(tgt) for _ in t], dtype=torch.long, device=block.device)
        flat_ids = torch.tensor([i for t in tgt for i in t], dtype=torch.long, device=block.device)
        values = block_logprobs(block, flat_rows, flat_ids, specs).tolist()
        for s in range(len(specs)):
            i = 0
            for t in tgt:
                out[s].append(values[s][i : i + len(t)])
                i += len(t)
    return out


def block_rows(vocab: int) -> int:
    """Rows of logits handled at once by :func:`block_logprobs` (bounds its float64 memory)."""
    return max(1, _ELEMENTS // max(vocab, 1))


def block_logprobs(block: Any, flat_rows: Any, flat_ids: Any, specs: Sequence[SamplingSpec]) -> Any:
    """``[specs, pairs]`` float64 sampling log-probabilities of tokens ``flat_ids`` at rows ``flat_rows``
    of one block of logits ``[rows, vocab]`` (at most :func:`block_rows` rows), on the block's device."""
    import torch

    block = block.double()
    tl = block[flat_rows, flat_ids]  # target logits
    ranked = _Ranked(block) if any(s.top_p < 1 for s in specs) else None
    rows = []
    for spec in specs:
        lse = torch.logsumexp(block / spec.temperature, dim=-1)
        lp = tl / spec.temperature - lse[flat_rows]
        if ranked is not None and spec.top_p < 1:
            edge_logit, edge_id, nucleus_mass = ranked.edge(spec, lse)
            # in the nucleus iff (logit, -id) ranks at or above the last kept token's
            el, ei = edge_logit[flat_rows], edge_id[flat_rows]
            inside = (tl > el) | ((tl == el) & (flat_ids <= ei))
            lp = torch.where(inside, lp - torch.log(nucleus_mass)[flat_rows], torch.full_like(lp, -math.inf))
        rows.append(lp)
    return torch.stack(rows) if rows else block.new_zeros((0, len(flat_ids)))


class _Ranked:
    """The tokens of a block of logits ranked by (logit desc, id asc), for nucleus edges.

    A full sort of the vocabulary costs ~40x a top-k, and nuclei are mostly
    short: the edge is looked for among the top :data:`_TOP` tokens first, and
    only rows whose edge is not strictly above the smallest of those (nucleus
    longer, or a tie that may straddle the cut) are fully sorted. Both give
    the same prefix in the same order, hence the same numbers."""

    def __init__(self, block: Any) -> None:
        import torch

        self.block = block
        k = min(block.shape[-1], _TOP)
        self.complete = k == block.shape[-1]
        vals, ids = torch.topk(block, k, dim=-1)  # ties in any order: put lower ids first
        by_id = torch.argsort(ids, dim=-1)
        vals, ids = vals.gather(-1, by_id), ids.gather(-1, by_id)
        by_val = torch.sort(vals, dim=-1, descending=True, stable=True).indices
        self.vals, self.ids = vals.gather(-1, by_val), ids.gather(-1, by_val)

    def edge(self, spec: SamplingSpec, lse: Any) -> tuple[Any, Any, Any]:
        """Per row: the logit and id of the last nucleus token, and the nucleus mass."""
        import torch

        el, ei, mass = _edge(self.vals, self.ids, spec, lse)
        if self.complete:
            return el, ei, mass
        unsure = (~(el > self.vals[:, -1])).nonzero()[:, 0]
        if len(unsure):
            full_vals, full_ids = torch.sort(self.block[unsure], dim=-1, descending=True, stable=True)
            fel, fei, fmass = _edge(full_vals, full_ids, spec, lse[unsure])
            el, ei, mass = el.clone(), ei.clone(), mass.clone()
            el[unsure], ei[unsure], mass[unsure] = fel, fei, fmass
        return el, ei, mass


def _edge(vals: Any, ids: Any, spec: SamplingSpec, lse: Any) -> tuple[Any, Any, Any]:
    """Nucleus edge from ranked logits ``vals`` / ``ids`` (a prefix of the full ranking suffices)."""
    import torch

    cum = torch.cumsum(torch.exp(vals / spec.temperature - lse[:, None]), dim=-1)
    kept = (_exclusive(cum) < spec.top_p).sum(dim=-1)  # >= 1: the first token is always in
    last = (kept - 1)[:, None]
    return vals.gather(-1, last)[:, 0], ids.gather(-1, last)[:, 0], cum.gather(-1, last)[:, 0]


def sampled_label(spec: SamplingSpec, token_logprobs: dict[int, float], variants: Iterable[Sequence[int]],
                  finite: bool) -> SampledLabel:
    """Per label, the summed sampling probability of its token variants; renormalised and their mass."""
    per_label = [math.fsum(math.exp(token_logprobs[t]) for t in v) for v in variants]
    mass = math.fsum(per_label)
    if not finite or not math.isfinite(mass):
        return SampledLabel(spec, tuple(math.nan for _ in per_label), math.nan)
    probs = tuple(p / mass for p in per_label) if mass > 0 else tuple(math.nan for _ in per_label)
    return SampledLabel(spec, probs, mass)


def sampled_continuation(spec: SamplingSpec, token_logprobs: Sequence[Sequence[float]]) -> SampledContinuation:
    """Per option, the sum of its tokens' sampling log-probabilities (``-inf`` when any is ``-inf``)."""
    tokens = tuple(tuple(t) for t in token_logprobs)
    return SampledContinuation(spec, tuple(math.fsum(t) for t in tokens), tokens)


def _exclusive(cum: Any) -> Any:
    """From a cumulative sum over the ranked tokens, the mass ranked *before* each one (0 for the first)."""
    import torch

    return torch.nn.functional.pad(cum[..., :-1], (1, 0))
