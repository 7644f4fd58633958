"""The key/value caches the level path and incremental extension keep: the pad rule, row selection, merging
and size.

A cache row's numbers never depend on its batch-mates: rows are padded on one side with explicit positions,
and padding is masked out.
"""

from __future__ import annotations

import copy
from typing import Any

import torch


def left_pad(seqs: list[tuple[int, ...]] | list[list[int]], pad_id: int | None) -> tuple[torch.Tensor, torch.Tensor,
                                                                                            torch.Tensor]:
    """The pad rule of every pass that keeps a cache (prompts before extension, batched generation):
    ``[rows, width]`` host ids (left-padded with ``pad_id``), attention mask (1 on real tokens) and
    positions (each row's own, from 0 at its first token), so a row's numbers never depend on its
    batch-mates."""
    width = max(len(p) for p in seqs)
    ids = torch.full((len(seqs), width), pad_id if pad_id is not None else 0, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    pos = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, p in enumerate(seqs):
        ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
        mask[i, width - len(p):] = 1
        pos[i, width - len(p):] = torch.arange(len(p))
    return ids, mask, pos


def pad_id_of(tokenizer: Any, default: int | None = 0) -> int | None:
    """The one pad rule of the scorer, parse_exact and generation: the tokenizer's pad token, else its
    end-of-sequence token, else ``default`` (padding is masked out, so any id is exact)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return pad if pad is not None else default


def merge_caches(parts: list[tuple[Any, torch.Tensor, list[int]]]) -> tuple[Any, torch.Tensor]:
    """One cache from rows ``keep`` of several ``(cache, mask, keep)`` pass caches of different widths.

    Narrower caches are padded on the right (masked), so siblings from
    different passes can run in one later pass. Full-attention layers only:
    a gap would shift a sliding window.
    """
    width = max(m.shape[1] for _, m, _ in parts)
    first = parts[0][0]
    merged = copy.copy(first)
    merged.layers = [copy.copy(layer) for layer in first.layers]
    for li, layer in enumerate(merged.layers):
        for attr in ("keys", "values"):
            blocks = []
            for cache, mask, keep in parts:
                t = getattr(cache.layers[li], attr)
                t = t[torch.tensor(keep, dtype=torch.long, device=t.device)]
                blocks.append(torch.nn.functional.pad(t, (0, 0, 0, width - t.shape[-2])))
            setattr(layer, attr, torch.cat(blocks, dim=0))
    mask = torch.cat([torch.nn.functional.pad(m[torch.tensor(keep, dtype=torch.long)], (0, width - m.shape[1])) for _, m, keep in parts])
    return merged, mask


def select_rows(cache: Any, index: torch.Tensor) -> Any:
    """A shallow copy of ``cache`` keeping batch rows ``index`` (a CPU tensor) in every layer.

    Each layer's index goes to that layer's own device: under a ``device_map``
    the layers (and their caches) live on several GPUs, and PyTorch refuses to
    index a tensor on one GPU with indices on another. The shared cache is left
    intact (selection rebinds the copy's tensors).
    """
    sub = copy.copy(cache)
    sub.layers = [copy.copy(layer) for layer in cache.layers]
    on: dict[torch.device, torch.Tensor] = {}
    for layer in sub.layers:
        keys = getattr(layer, "keys", None)
        device = keys.device if isinstance(keys, torch.Tensor) else index.device
        if device not in on:
            on[device] = index.to(device)
        layer.batch_select_indices(on[device])
    return sub


def cache_bytes(cache: Any) -> int:
    """Bytes of the keys and values a cache holds."""
    total = 0
    for layer in getattr(cache, "layers", ()):
        for attr in ("keys", "values"):
            t = getattr(layer, attr, None)
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total
