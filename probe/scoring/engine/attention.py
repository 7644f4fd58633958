"""The packed pass's attention: the tree mask, its FlexAttention form, and SDPA run block by block.

A token of a packed row (:mod:`probe.scoring.engine.packed`) may attend to an earlier token of the row only when
that token's node is its own node or an ancestor of it; :func:`tree_mask` writes that rule as an additive mask
(``window``: a sliding-window layer's extra cut), :func:`tree_block_mask` as a FlexAttention ``BlockMask``, and
:func:`block_attention` computes the same attention block by block, skipping the pairs the mask hides.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Any

import torch
from torch.nn.attention.flex_attention import create_block_mask
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from probe.scoring.engine.packed import Block


def tree_mask(pre: torch.Tensor, end: torch.Tensor, pos: torch.Tensor, dtype: torch.dtype,
              window: int | None = None) -> torch.Tensor:
    """The additive ``[rows, 1, width, width]`` mask (0: attend, dtype min: not) from ``[rows, width]``
    node numbers, subtree ends and positions; ``window``: a sliding-window layer's."""
    col = torch.arange(pre.shape[1], device=pre.device)
    q_pre = pre[:, :, None]  # [rows, query, 1]
    seen = (col[None, None, :] <= col[None, :, None]) & (pre[:, None, :] <= q_pre) & (q_pre < end[:, None, :])
    if window is not None:
        seen &= (pos[:, :, None] - pos[:, None, :]) < window
    out = torch.zeros(seen.shape, dtype=dtype, device=pre.device)
    out.masked_fill_(~seen, torch.finfo(dtype).min)
    return out[:, None]


#: the name transformers knows :func:`block_attention` by (``AttentionInterface``)
BLOCK_ATTENTION = "probe_tree_blocks"
_BLOCKS: ContextVar[list[list[Block]] | None] = ContextVar("probe_tree_blocks", default=None)


def block_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention run block by block (:func:`tree_blocks`, set by :func:`attention_blocks`):
    each block's queries against its context's and its own keys, under the same mask. The same attention
    as over the whole row (every key a query may see is among them), without the work on pairs of different
    branches or trees, which the mask hides anyway: a row of ``w`` tokens in branches of ``b`` costs about
    ``w x (stem + b)`` instead of ``w x w``. Padding columns are in no block; their output is zero (nothing
    attends to them or reads them)."""
    blocks = _BLOCKS.get()
    rows, _, width, _ = query.shape
    if blocks is None or len(blocks) != rows:
        raise RuntimeError("block attention needs the pass's blocks (probe.scoring.engine.attention.attention_blocks)")
    out = query.new_zeros(rows, width, query.shape[1], value.shape[-1])  # sdpa's [rows, width, heads, dim]
    for r, row in enumerate(blocks):
        for s, e, ctx in row:
            spans = (*ctx, (s, e))  # in row order: the context's columns come first in the row too
            k = torch.cat([key[r : r + 1, :, a:b] for a, b in spans], dim=2) if ctx else key[r : r + 1, :, s:e]
            v = torch.cat([value[r : r + 1, :, a:b] for a, b in spans], dim=2) if ctx else value[r : r + 1, :, s:e]
            mask = None
            if attention_mask is not None:
                rows_of = attention_mask[r : r + 1, :, s:e]
                mask = torch.cat([rows_of[..., a:b] for a, b in spans], dim=-1) if ctx else rows_of[..., s:e]
            part, _ = sdpa_attention_forward(module, query[r : r + 1, :, s:e], k, v, mask, **kwargs)
            out[r, s:e] = part[0]
    return out, None


@contextlib.contextmanager
def attention_implementation(model: Any, name: str) -> Any:
    """Run ``model``'s attention through transformers' implementation ``name``, then restore the one it had."""
    before = getattr(model.config, "_attn_implementation", None) or "sdpa"
    model.set_attn_implementation(name)
    try:
        yield
    finally:
        model.set_attn_implementation(before)


@contextlib.contextmanager
def attention_blocks(model: Any, blocks: list[list[Block]]) -> Any:
    """Run ``model``'s attention as :func:`block_attention` over ``blocks`` (per row, its blocks), then
    restore the implementation it had (SDPA: the one it computes per block)."""
    AttentionInterface.register(BLOCK_ATTENTION, block_attention)
    token = _BLOCKS.set(blocks)
    try:
        with attention_implementation(model, BLOCK_ATTENTION):
            yield
    finally:
        _BLOCKS.reset(token)


def tree_block_mask(pre: torch.Tensor, end: torch.Tensor) -> Any:
    """The tree mask of :func:`tree_mask` (no window) as a FlexAttention ``BlockMask``: key j is seen by
    query i when j is not later in the row and j's node is i's or an ancestor of it. The block mask
    records which 128 x 128 tiles hold any seen pair, so the kernel skips the rest."""

    def seen(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return (kv <= q) & (pre[b, kv] <= pre[b, q]) & (pre[b, q] < end[b, kv])

    rows, width = pre.shape
    return create_block_mask(seen, rows, None, width, width, device=pre.device)
