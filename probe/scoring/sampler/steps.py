"""The steps of a :class:`~probe.scoring.sampler.chain.SamplerChain` on a batch of float64 scores.

Each step takes scores ``z`` (``[n, vocab]``) and the chains' numbers as
``[n, 1]`` columns (:class:`Params`); ``chains`` are ``SamplerChain`` objects and
``history`` a ``TokenHistory`` (not imported: the chain module imports this one).
The rules and their sources are in :mod:`probe.scoring.sampler.chain`.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any, Sequence

import torch

#: tokens ranked by a top-k before falling back to a full sort of the vocabulary (top-p's edge)
TOP = 256


class Params:
    """The chains' numbers as ``[n, 1]`` float64 columns on the logits' device."""

    def __init__(self, chains: Sequence[Any] | None, device: Any, cols: dict | None = None) -> None:
        if cols is not None:
            self.__dict__.update(cols)
            return
        for f in fields(chains[0]):
            if f.name != "order":
                values = [[float(getattr(c, f.name))] for c in chains]
                setattr(self, f.name, torch.tensor(values, dtype=torch.float64, device=device))
        self.truncates = torch.tensor([c.truncates for c in chains], dtype=torch.bool, device=device)

    def select(self, idx: Any) -> "Params":
        return Params(None, None, {k: v[idx] for k, v in self.__dict__.items()})


def penalised(z: Any, par: Params, chains: Sequence[Any], history: Any) -> Any:
    """Step 1: repetition penalty (prompt + generated ids), then frequency and presence (generated only)."""

    rep = any(c.uses_prompt for c in chains)
    add = any(c.frequency_penalty != 0 or c.presence_penalty != 0 for c in chains)
    if not (rep or add):
        return z
    if history is None or len(history) != z.shape[0]:
        raise ValueError("step_distribution: a chain with a penalty needs each path's TokenHistory "
                         f"({z.shape[0]} rows)")
    n, vocab = z.shape
    history = history.to(z.device)
    if rep:
        ids = _ids(history.seen, vocab)
        seen = torch.zeros(n, vocab + 1, dtype=torch.bool, device=z.device).scatter_(1, ids, True)[:, :vocab]
        penalised = torch.where(z < 0, z * par.repetition_penalty, z / par.repetition_penalty)
        z = torch.where(seen & (par.repetition_penalty != 1), penalised, z)
    if add:
        ids = _ids(history.generated, vocab)
        counts = torch.zeros(n, vocab + 1, dtype=torch.float64, device=z.device)
        counts = counts.scatter_add_(1, ids, history.counts.to(torch.float64))[:, :vocab]
        z = z - counts * par.frequency_penalty
        z = z - (counts > 0).to(torch.float64) * par.presence_penalty
    return z


def _ids(ids: Any, vocab: int) -> Any:
    """Padding (-1) and ids past the vocabulary go to the extra column ``vocab``, dropped after the scatter."""

    ids = ids.to(torch.long)
    return torch.where((ids < 0) | (ids >= vocab), torch.full_like(ids, vocab), ids)


def truncated(z: Any, par: Params, order: str) -> Any:
    """Steps 3-5 on tempered scores ``z``: top-k, top-p, min-p (vLLM: min-p first)."""
    if order == "vllm":
        z = _min_p(z, par)
    z = _top_k(z, par)
    z = _top_p(z, par)
    if order == "transformers":
        z = _min_p(z, par)
    return z


def _top_k(z: Any, par: Params) -> Any:
    k = par.top_k.to(torch.long).clamp(max=z.shape[-1])  # 0: off; at least the vocabulary: keeps all
    on = k[:, 0] > 0
    if not bool(on.any()):
        return z
    kth = torch.topk(z, int(k.max()), dim=-1).values.gather(-1, (k - 1).clamp(min=0))
    return torch.where(on[:, None] & (z < kth), torch.full_like(z, -math.inf), z)


def _top_p(z: Any, par: Params) -> Any:
    """Keep the tokens ranked (score desc, id asc) before the first at which the mass reaches top-p."""

    on = par.top_p[:, 0] < 1
    if not bool(on.any()):
        return z
    probs = torch.softmax(z, dim=-1)
    vals, ids = _ranked_prefix(z, min(z.shape[-1], TOP))
    edge_val, edge_id, sure = _edge(vals, ids, probs, par.top_p)
    if vals.shape[-1] < z.shape[-1]:
        unsure = (~sure & on).nonzero()[:, 0]
        if len(unsure):  # the edge may lie past the prefix, or tie with a token outside it: rank the whole row
            full_vals, full_ids = torch.sort(z[unsure], dim=-1, descending=True, stable=True)
            fv, fi, _ = _edge(full_vals, full_ids, probs[unsure], par.top_p[unsure])
            edge_val, edge_id = edge_val.clone(), edge_id.clone()
            edge_val[unsure], edge_id[unsure] = fv, fi
    ids_all = torch.arange(z.shape[-1], device=z.device)
    inside = (z > edge_val) | ((z == edge_val) & (ids_all <= edge_id))
    return torch.where(on[:, None] & ~inside, torch.full_like(z, -math.inf), z)


def _ranked_prefix(z: Any, k: int) -> tuple[Any, Any]:
    """The first ``k`` tokens of each row ranked by (score desc, id asc)."""

    vals, ids = torch.topk(z, k, dim=-1)  # ties in any order: put lower ids first
    by_id = torch.argsort(ids, dim=-1)
    vals, ids = vals.gather(-1, by_id), ids.gather(-1, by_id)
    by_val = torch.sort(vals, dim=-1, descending=True, stable=True).indices
    return vals.gather(-1, by_val), ids.gather(-1, by_val)


def _edge(vals: Any, ids: Any, probs: Any, top_p: Any) -> tuple[Any, Any, Any]:
    """Per row the score and id of the last kept token, and whether the ranked prefix settles it."""

    cum = torch.cumsum(probs.gather(-1, ids), dim=-1)
    before = torch.nn.functional.pad(cum[..., :-1], (1, 0))  # mass ranked strictly before each token
    last = ((before < top_p).sum(dim=-1, keepdim=True) - 1).clamp(min=0)  # the first token is always in
    edge_val, edge_id = vals.gather(-1, last), ids.gather(-1, last)
    return edge_val, edge_id, (edge_val > vals[:, -1:])[:, 0]


def _min_p(z: Any, par: Params) -> Any:
    on = par.min_p[:, 0] > 0
    if not bool(on.any()):
        return z
    probs = torch.softmax(z, dim=-1)
    top = probs.amax(dim=-1, keepdim=True)
    # the top token stays even where min_p * top rounds above it
    drop = (probs < par.min_p * top) & (probs < top)
    return torch.where(on[:, None] & drop, torch.full_like(z, -math.inf), z)
