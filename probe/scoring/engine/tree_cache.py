"""The enumeration's frontier passes over one key/value store, without copying a cache.

:mod:`probe.scoring.parse.exact` expands a batch of frontier nodes per forward
pass; each node is one new token after its prompt and its path. Run as batched
generation, every row needs its prompt's and its path's keys and values in a
cache of its own, so each pass copies a prompt's vectors into every row
(and transformers copies the cache again when it appends the new column).
Where the tree is wide (T = 0.7-0.8) that copying was about a quarter of the
parse stage on a CPU.

Here the group's prompts stay in the cache their one pass wrote, and every
expanded node's keys and values are written once into a store
(:class:`NodeStore`). A pass runs the picked tokens as one sequence, each at its
own position, and attends with :func:`frontier_attention` (registered with
transformers' ``AttentionInterface`` for the pass only): each query against its
own prompt's keys and the keys of its path (its ancestors and itself), the two
parts merged by their log-sum-exp, as split attention kernels do. Nothing is
copied but the few path vectors a query reads.

The arithmetic is a query's softmax over the keys it may see, the same keys as
the cached pass, so the numbers agree up to float rounding
(``tests/unit/test_tree_cache.py``, twelve architecture families). It is used where that holds by construction:
SDPA attention without soft-capping or attention sinks, and no sliding window
inside the prompt plus the tokens enumerated (the enumeration refuses those
anyway); :func:`tree_ok` says so, and the engine keeps the cached rows for the
rest.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
from transformers import AttentionInterface

__all__ = ["FRONTIER_ATTENTION", "FrontierPass", "NodeStore", "frontier_attention", "frontier_on", "tree_ok"]

#: the name transformers knows :func:`frontier_attention` by
FRONTIER_ATTENTION = "probe_frontier"
_PASS: ContextVar["FrontierPass | None"] = ContextVar("probe_frontier_pass", default=None)


def tree_ok(model: Any) -> bool:
    """Whether ``model``'s attention is plain scaled dot-product attention that :func:`frontier_attention`
    computes exactly: its implementation is SDPA, its logits are not soft-capped, no module carries
    attention sinks, and every attention module knows its layer (the store is per layer)."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if str(getattr(text, "_attn_implementation", None) or getattr(config, "_attn_implementation", "")) != "sdpa":
        return False
    if getattr(text, "attn_logit_softcapping", None):
        return False
    if any(hasattr(m, "sinks") for m in model.modules()):
        return False
    attention = [m for m in model.modules() if type(m).__name__.endswith("Attention")]
    return bool(attention) and all(isinstance(getattr(m, "layer_idx", None), int) for m in attention)


class NodeStore:
    """Keys and values of a group's prompts and of every node expanded after them, per layer.

    The prompts' are the cache of their one pass (``[prompts, kv_heads, width, head_dim]`` per layer,
    left-padded; ``valid`` marks their real columns), used as they are. A node's are written once, at its
    index, into ``[capacity, kv_heads, head_dim]`` per layer (the capacity doubles when full). Both are
    kept in float32, so a half-precision model's scores are summed as SDPA sums them."""

    def __init__(self, cache: Any, mask: torch.Tensor) -> None:
        layers = cache.layers
        self.keys = [layer.keys.float() for layer in layers]
        self.values = [layer.values.float() for layer in layers]
        self.valid = mask.to(device=self.keys[0].device, dtype=torch.bool)  # [prompts, width]
        self.count = 0
        self.node_keys: list[torch.Tensor | None] = [None] * len(layers)
        self.node_values: list[torch.Tensor | None] = [None] * len(layers)

    @classmethod
    def of_blocks(cls, blocks: list[torch.Tensor]) -> "NodeStore":
        """A store of prompts given as key/value blocks ``[2, layers, kv_heads, length, head_dim]`` (one per
        prompt, as :meth:`probe.scoring.engine.Extension.own` exports them), left-padded into one cache."""

        width = max(b.shape[-2] for b in blocks)
        first = blocks[0]
        n_layers, heads, dim = first.shape[1], first.shape[2], first.shape[4]
        kv = torch.zeros((2, n_layers, len(blocks), heads, width, dim), dtype=torch.float32, device=first.device)
        valid = torch.zeros((len(blocks), width), dtype=torch.bool, device=first.device)
        for b, block in enumerate(blocks):
            n = block.shape[-2]
            kv[:, :, b, :, width - n:] = block.float()
            valid[b, width - n:] = True
        layers = [SimpleNamespace(keys=kv[0, li], values=kv[1, li]) for li in range(n_layers)]
        return cls(SimpleNamespace(layers=layers), valid)

    def reserve(self, extra: int) -> torch.Tensor:
        """Indices for ``extra`` new nodes, on the store's device (growing the store when needed); they are
        ``count`` before the call onwards."""
        need = self.count + extra
        first = self.node_keys[0]
        if first is None or first.shape[0] < need:
            cap = max(need, 2 * (first.shape[0] if first is not None else 64))
            for li, k in enumerate(self.keys):
                grown = [torch.empty((cap, *k.shape[1:2], k.shape[-1]), dtype=torch.float32, device=k.device)
                         for _ in range(2)]
                old_k, old_v = self.node_keys[li], self.node_values[li]
                if old_k is not None and old_v is not None:
                    grown[0][: self.count] = old_k[: self.count]
                    grown[1][: self.count] = old_v[: self.count]
                self.node_keys[li], self.node_values[li] = grown
        index = torch.arange(self.count, need, device=self.keys[0].device)
        self.count = need
        return index


@dataclass
class FrontierPass:
    """One pass's plan: the store's prompt rows it reads (``rows``; None: all of them), per query its place
    among those (``prompt``) and among that prompt's queries (``slot``, below ``per_prompt``), its new node
    index (``new``) and its path's node indices, itself last (``path``, ``[queries, depth]``, valid where
    ``path_ok``)."""

    store: NodeStore
    rows: torch.Tensor | None
    prompt: torch.Tensor
    slot: torch.Tensor
    per_prompt: int
    new: torch.Tensor
    path: torch.Tensor
    path_ok: torch.Tensor


def frontier_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: Any, scaling: float | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """A frontier pass's attention (:class:`FrontierPass`, set by :func:`frontier_on`): the new keys and
    values go into the store at their nodes' indices, then each query attends to its prompt's keys and its
    path's. ``query`` ``[1, heads, queries, head_dim]``, ``key`` / ``value`` ``[1, kv_heads, queries,
    head_dim]``; the result ``[1, queries, heads, head_dim]`` as transformers' SDPA returns it."""
    plan = _PASS.get()
    if plan is None:
        raise RuntimeError("frontier attention needs the pass's plan (probe.scoring.engine.tree_cache.frontier_on)")
    if kwargs.get("softcap") or kwargs.get("s_aux") is not None:
        raise RuntimeError("frontier attention does not model soft-capped scores or attention sinks")
    store, layer = plan.store, int(module.layer_idx)
    n_q, heads, dim = query.shape[2], query.shape[1], query.shape[3]
    kv_heads = key.shape[1]
    group = heads // kv_heads
    scale = float(scaling if scaling is not None else dim ** -0.5)
    node_k, node_v = store.node_keys[layer], store.node_values[layer]
    assert node_k is not None and node_v is not None
    node_k[plan.new] = key[0].transpose(0, 1).float()  # [queries, kv_heads, head_dim]
    node_v[plan.new] = value[0].transpose(0, 1).float()
    # query head h reads kv head h // group (transformers' repeat_kv order): [queries, kv_heads, group, dim]
    q = query[0].transpose(0, 1).float().reshape(n_q, kv_heads, group, dim)

    # the prompt part, grouped by prompt: one batched product over each prompt's own keys, never copied
    keys, values, valid = store.keys[layer], store.values[layer], store.valid
    if plan.rows is not None:  # only the prompts with a query in this pass (a few, late in a group)
        keys, values, valid = keys[plan.rows], values[plan.rows], valid[plan.rows]
    rows, per = keys.shape[0], plan.per_prompt
    grouped = q.new_zeros(rows, per, kv_heads, group, dim)
    grouped[plan.prompt, plan.slot] = q
    grouped = grouped.permute(0, 2, 1, 3, 4).reshape(rows, kv_heads, per * group, dim)
    scores = torch.matmul(grouped, keys.transpose(-1, -2)) * scale  # [rows, kv_heads, per x group, width]
    scores.masked_fill_(~valid[:, None, None, :], float("-inf"))
    top = scores.amax(dim=-1, keepdim=True)  # every prompt has a real column: finite
    weights = torch.exp(scores - top)
    total = weights.sum(dim=-1)
    out = torch.matmul(weights, values)  # [rows, kv_heads, per x group, dim]

    def per_query(t: torch.Tensor) -> torch.Tensor:
        t = t.reshape(rows, kv_heads, per, group, *t.shape[3:]).transpose(1, 2)
        return t[plan.prompt, plan.slot]  # [queries, kv_heads, group, ...]

    p_out, p_top, p_total = per_query(out), per_query(top[..., 0]), per_query(total)

    # the path part: each query's ancestors and itself (a few vectors each)
    k_path, v_path = node_k[plan.path], node_v[plan.path]  # [queries, depth, kv_heads, dim]
    s_path = torch.einsum("qkgd,qjkd->qkgj", q, k_path) * scale
    s_path.masked_fill_(~plan.path_ok[:, None, None, :], float("-inf"))
    n_top = s_path.amax(dim=-1)  # the query's own key is always there: finite
    n_weights = torch.exp(s_path - n_top[..., None])
    n_total = n_weights.sum(dim=-1)
    n_out = torch.einsum("qkgj,qjkd->qkgd", n_weights, v_path)

    # the two softmax parts merged by their maxima (as split attention kernels merge blocks)
    both = torch.maximum(p_top, n_top)
    a, b = torch.exp(p_top - both), torch.exp(n_top - both)
    merged = (p_out * a[..., None] + n_out * b[..., None]) / (p_total * a + n_total * b)[..., None]
    return merged.reshape(1, n_q, heads, dim).to(query.dtype), None


@contextlib.contextmanager
def frontier_on(plan: FrontierPass) -> Any:
    """Make :func:`frontier_attention` available under its name with ``plan`` as the pass's plan."""

    AttentionInterface.register(FRONTIER_ATTENTION, frontier_attention)
    token = _PASS.set(plan)
    try:
        yield
    finally:
        _PASS.reset(token)
