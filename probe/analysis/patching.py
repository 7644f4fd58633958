"""Activation patching between paired prompts (explicit <-> implicit, group A <-> group B).

For a *target* prompt and a *source* prompt (its pair), the source's
activation at a hook and position replaces the target's at the aligned
position, and we measure the change in the log-probability of a chosen option
label (e.g. the stereotyped one) at the target's last token:

    effect[layer, position] = log P_patched(label) - log P_clean(label)

Positions are aligned by name, so prompts of different lengths can be paired:
``last`` (last prompt token) and ``span:FIELD`` (last token of a span) pick one
token in each prompt; ``mean`` spans do not name a single token and are
rejected. All layers of one position run as one batch (row ``i`` patched at
layer ``i``), and only the tokens from the patched position on are re-run
(the prefix is cached).

Patching a prompt with its own activations changes nothing (tested: below
1e-5, the float32 difference between a cached and an uncached forward).

>>> eff = patch_effects(lm.model, lm.tokenizer, target, source, label="A", positions=["last"])  # doctest: +SKIP
>>> eff.shape    # (n_layers, n_positions)  # doctest: +SKIP
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import numpy as np
import torch

from probe.activations.extract import EncodedItem, HFBackend, collate, encode_item, pad_id
from probe.activations.hooks import HOOK_KINDS, intervene
from probe.activations.items import ActivationItem
from probe.activations.positions import parse_positions
from probe.hf_compat import cache_kwargs, output_cache
from probe.scoring.tokens import Encoder


def _label_logprob(logits_last: torch.Tensor, variants: Sequence[int]) -> torch.Tensor:
    logp = torch.log_softmax(logits_last.float(), dim=-1)
    return torch.logsumexp(logp[..., list(variants)], dim=-1)


def _encode(enc: Encoder, item: ActivationItem, label: str, positions: Sequence[str]) -> tuple[EncodedItem, list[int]]:
    specs = parse_positions(list(positions))
    for s in specs:
        if s.kind not in ("last", "span"):
            raise ValueError(f"patching needs single-token positions (last, span:FIELD), got {s.name!r}")
    if label not in item.labels:
        raise ValueError(f"item {item.id!r}: label {label!r} is not one of its labels {item.labels}")
    e = encode_item(enc, item, specs)
    missing = [n for n, p in e.positions.items() if not p]
    if missing:
        raise ValueError(f"item {item.id!r} lacks the span(s) {missing}")
    return e, list(e.label_variants[item.labels.index(label)])


@torch.no_grad()
def patch_effects(model: torch.nn.Module, tokenizer: Any, target: ActivationItem, source: ActivationItem,
                  label: str, positions: Sequence[str] = ("last",), hook: str = "resid_post",
                  layers: Sequence[int] | None = None) -> np.ndarray:
    """``[n_layers, n_positions]`` change in ``log P(label)`` on ``target`` when patched from ``source``.

    Patching position ``t`` cannot change anything before ``t``, so the target's
    prefix is run once with a KV cache and only the suffix from ``t`` is re-run,
    for all layers at once (row ``i`` patched at layer ``i``). The clean
    reference goes through the same cached path.
    """
    if hook not in HOOK_KINDS:
        raise ValueError(f"hook must be one of {HOOK_KINDS}, got {hook!r}")
    backend = HFBackend(model)
    layout = backend.layout
    layers = list(range(layout.n_layers)) if layers is None else [i % layout.n_layers for i in layers]
    enc = Encoder(tokenizer)
    tgt, variants = _encode(enc, target, label, positions)
    src, _ = _encode(enc, source, source.labels[0] if source.labels else label, positions)
    pad = pad_id(tokenizer)
    device = next(model.parameters()).device
    names = [f"blocks.{i}.hook_{hook}" for i in layers]
    _, src_acts = backend.run(collate([src], pad, "left", device), names, list(positions))
    n, total = len(layers), len(tgt.ids)
    ids = torch.tensor([tgt.ids], device=device)
    out = np.zeros((n, len(positions)), np.float32)
    for j, pos in enumerate(positions):
        t = tgt.positions[pos][0]
        cache = None
        if t > 0:
            cache = output_cache(model(input_ids=ids[:, :t], position_ids=torch.arange(t, device=device)[None],
                                       use_cache=True))

        def run(edits: dict) -> torch.Tensor:
            c = None
            if cache is not None:
                c = copy.deepcopy(cache)
                c.batch_repeat_interleave(n)
            pos_ids = torch.arange(t, total, device=device)[None].expand(n, -1)
            with intervene(model, edits, layout):
                logits = model(input_ids=ids[:, t:].expand(n, -1), position_ids=pos_ids, **cache_kwargs(model, c),
                               use_cache=c is not None, logits_to_keep=1).logits
            return _label_logprob(logits[:, -1], variants)

        edits = {}
        for row, name in enumerate(names):
            vec = torch.from_numpy(src_acts[f"{name}@{pos}"][0])

            def edit(h: torch.Tensor, _row=row, _vec=vec) -> torch.Tensor:
                h = h.clone()
                h[_row, 0] = _vec.to(h.device, h.dtype)  # suffix coordinates: the patched token is first
                return h

            edits[name] = edit
        out[:, j] = (run(edits) - run({})).cpu().numpy()
    return out


def patch_pairs(model: torch.nn.Module, tokenizer: Any,
                pairs: Sequence[tuple[ActivationItem, ActivationItem, str]], positions: Sequence[str] = ("last",),
                hook: str = "resid_post", progress: bool = False) -> np.ndarray:
    """:func:`patch_effects` for ``(target, source, label)`` pairs: ``[n_pairs, n_layers, n_positions]``."""
    from tqdm import tqdm

    res = [patch_effects(model, tokenizer, t, s, lab, positions, hook)
           for t, s, lab in tqdm(pairs, disable=not progress, desc="patching")]
    return np.stack(res) if res else np.zeros((0, 0, len(positions)), np.float32)
