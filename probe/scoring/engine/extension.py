"""Incremental extension: sequences grown a token at a time after prompts run once (parse's frontier, the
hybrid's tail, generation).

Two ways: :class:`Extension`, a left-padded KV cache extended in place (:meth:`Extending.extend`), and the
node store of :mod:`probe.scoring.engine.tree_cache`, which extends several paths of one prompt in a single
pass without copying a cache (:meth:`Extending.extend_tree`), for models whose attention it computes exactly.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from probe.errors import ProbeError
from probe.scoring.engine.capabilities import NO_CACHE
from probe.scoring.engine.head import logits_close
from probe.hf_compat import cache_kwargs, output_cache
from probe.scoring.engine.attention import attention_implementation
from probe.scoring.engine.tree_cache import FRONTIER_ATTENTION, FrontierPass, NodeStore, frontier_on, tree_ok


class Extending:
    """The engine's incremental extension (a part of :class:`probe.scoring.engine.Engine`)."""

    def begin(self, prompts: list[tuple[int, ...]]) -> tuple["Extension", torch.Tensor]:
        """Run ``prompts`` once (left-padded, :func:`left_pad`); their :class:`Extension` and the float32
        next-token logits ``[rows, vocab]`` after each prompt's last token. A model whose state padding would
        enter (capabilities' ``extend``) takes prompts of one length only (no padding)."""
        why = self.capabilities.extend
        if why and (len({len(p) for p in prompts}) > 1 or why == NO_CACHE):
            hint = "" if why == NO_CACHE else "; extend prompts of one length at a time (batch size 1)"
            raise ProbeError(f"{self.capabilities.model_type}: {why}{hint}")
        if why and not self.state_carried():
            raise ProbeError(f"{self.capabilities.model_type}: {NOT_CARRIED}")
        cache, mask, hidden = self.run_prefixes(list(prompts), with_hidden=True)
        return Extension(cache, mask, [len(p) for p in prompts]), self.logits(hidden[:, -1])

    def state_carried(self) -> bool:
        """Whether a model with a state of its own (capabilities' ``extend``) carries it from pass to pass in the
        cache the engine passes (a model whose layers keep it elsewhere, or refuse that cache, does not): one
        prompt extended by a token against a plain forward, once per model; the engine's counters unchanged."""
        known = _CARRIED.get(self.model)
        if known is None:
            counts = self.counters.as_dict()
            try:
                known = self._extends_exactly()
            finally:
                for name, value in counts.items():
                    setattr(self.counters, name, value)
            _CARRIED[self.model] = known
        return known

    def _extends_exactly(self) -> bool:
        vocab = int(getattr(self.config, "vocab_size", 0) or 0) or 8
        ids = [t % vocab for t in (1, 2, 3, 4)]
        try:
            with torch.inference_mode():
                cache, mask = self.run_prefixes([tuple(ids[:-1])])
                got = self.extend(Extension(cache, mask, [len(ids) - 1]), ids[-1:])
                plain = self.decoder(input_ids=torch.tensor([ids], device=self.device)).last_hidden_state
                want = self.logits(plain[:, -1])
        except Exception:  # noqa: BLE001  (a cache the model refuses, or a state it cannot take back)
            return False
        return logits_close(got.float().cpu(), want.float().cpu(), self.compute_dtype != torch.float32)

    def extension(self, blocks: list[list[torch.Tensor]]) -> "Extension":
        """An :class:`Extension` from key/value blocks ``[2, layers, heads, tokens, head_dim]``: row ``b``'s
        sequence so far is ``blocks[b]`` in order (kept from earlier passes), left-padded as :meth:`begin`
        pads. The blocks are copied into the new cache; they are left as they are."""
        lengths = [sum(x.shape[-2] for x in row) for row in blocks]
        width = max(lengths)
        first = blocks[0][0]
        n_layers, heads, dim = first.shape[1], first.shape[2], first.shape[4]
        kv = torch.empty((2, n_layers, len(blocks), heads, width, dim), dtype=first.dtype, device=first.device)
        mask = torch.zeros((len(blocks), width), dtype=torch.long)
        for b, (row, n) in enumerate(zip(blocks, lengths)):
            kv[:, :, b, :, : width - n, :] = 0  # padding: masked, but never uninitialised memory (NaN * 0)
            at = width - n
            for block in row:  # each block straight into place (no concatenated copy first)
                kv[:, :, b, :, at : at + block.shape[-2], :] = block
                at += block.shape[-2]
            mask[b, width - n:] = 1
        cache = DynamicCache(ddp_cache_data=[(kv[0, li], kv[1, li]) for li in range(n_layers)], config=self.model.config)
        return Extension(cache, mask, lengths)

    def extend(self, ext: "Extension", tokens: list[int]) -> torch.Tensor:
        """Append one token to each row of ``ext`` (in place: its cache, mask and lengths grow by one
        column); the float32 next-token logits ``[rows, vocab]`` after it."""
        ids = torch.tensor([[t] for t in tokens], dtype=torch.long)
        pos = torch.tensor([[n] for n in ext.lengths], dtype=torch.long)
        mask = torch.cat([ext.mask, torch.ones((len(tokens), 1), dtype=torch.long)], dim=1)
        self.counters.add(tokens_computed=len(tokens))
        out = self._decoder(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                            position_ids=pos.to(self.device), use_cache=True, **cache_kwargs(self.decoder, ext.cache))
        ext.cache, ext.mask, ext.lengths = output_cache(out), mask, [n + 1 for n in ext.lengths]
        return self.logits(out.last_hidden_state[:, -1])

    def tree_store(self, ext: "Extension") -> Any:
        """The :class:`probe.scoring.engine.tree_cache.NodeStore` of prompts run by :meth:`begin` (their cache, used
        as it is), for :meth:`extend_tree`; None where the model's attention is not one
        :func:`~probe.scoring.engine.tree_cache.frontier_attention` computes exactly (then :meth:`extend` it is). No
        window check: the enumeration refuses a prompt plus budget longer than the model's sliding window."""
        devices = {layer.keys.device for layer in ext.cache.layers}
        return NodeStore(ext.cache, ext.mask) if len(devices) == 1 and self.tree_fits(0) else None

    def tree_store_of(self, blocks: list[torch.Tensor], longest: int) -> Any:
        """A :class:`~probe.scoring.engine.tree_cache.NodeStore` of prompts given as key/value blocks ``[2, layers,
        kv_heads, length, head_dim]`` (:meth:`Extension.own`), for sequences of at most ``longest`` tokens
        (prompt and continuation); None where :meth:`extend_tree` would not be exact for them: the cases of
        :meth:`tree_store`, or a sliding window shorter than ``longest`` (the store attends to every column)."""
        if not blocks or len({b.device for b in blocks}) != 1 or not self.tree_fits(longest):
            return None
        return NodeStore.of_blocks(blocks)

    def tree_fits(self, longest: int) -> bool:
        """Whether :meth:`extend_tree` is exact for this model on sequences of at most ``longest`` tokens: its
        attention is one :func:`~probe.scoring.engine.tree_cache.frontier_attention` computes
        (:func:`~probe.scoring.engine.tree_cache.tree_ok`), its layers attend (no other kind), and no sliding window
        is shorter than ``longest`` (the store attends to every column)."""
        if self.capabilities.tree or not self._layer_kinds <= {"full_attention", "sliding_attention"}:
            return False
        if self.window is not None and longest > self.window:
            return False
        return tree_ok(self.model)

    def extend_tree(self, store: Any, tokens: list[int], prompts: list[int], paths: list[list[int]],
                    positions: list[int]) -> tuple[torch.Tensor, list[int]]:
        """One token after each of several paths of ``store``'s prompts, in one pass and without a cache copy
        (:mod:`probe.scoring.engine.tree_cache`): token ``tokens[i]`` after prompt row ``prompts[i]`` and the stored
        nodes ``paths[i]`` (first generated first), at position ``positions[i]``. Returns the float32
        next-token logits ``[len(tokens), vocab]`` and the new nodes' indices in the store."""
        n = len(tokens)
        first = store.count
        new = store.reserve(n)
        used = sorted(set(prompts))
        local = {p: i for i, p in enumerate(used)}
        slots, seen = [], {}
        for p in prompts:
            slots.append(seen.get(p, 0))
            seen[p] = slots[-1] + 1
        depth = 1 + max(len(x) for x in paths)
        path = torch.zeros((n, depth), dtype=torch.long)
        path_ok = torch.zeros((n, depth), dtype=torch.bool)
        for i, nodes in enumerate(paths):
            path[i, : len(nodes)] = torch.tensor(nodes, dtype=torch.long)
            path[i, len(nodes)] = first + i
            path_ok[i, : len(nodes) + 1] = True
        dev = store.valid.device
        rows = None if len(used) == store.valid.shape[0] else torch.tensor(used, device=dev)
        plan = FrontierPass(store, rows, torch.tensor([local[p] for p in prompts], device=dev),
                            torch.tensor(slots, device=dev), max(seen.values()), new, path.to(dev), path_ok.to(dev))
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        pos = torch.tensor([positions], dtype=torch.long, device=self.device)
        # a 4-D mask goes to the attention as it is (transformers builds none); frontier_attention ignores it
        mask = torch.zeros((1, 1, n, n), dtype=self.compute_dtype, device=self.device)
        self.counters.add(tokens_computed=n)
        with frontier_on(plan), attention_implementation(self._attention_owner, FRONTIER_ATTENTION):
            out = self._decoder(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)
        return self.logits(out.last_hidden_state[0]), list(range(first, first + n))  # no device sync


#: why a model whose state the engine's cache does not carry is refused extension
NOT_CARRIED = ("its state is not carried from one pass to the next by the cache the engine passes (an extended "
               "prompt differs from a plain forward), so it cannot be extended")
#: model -> whether it carries its state in the engine's cache (:meth:`Extending.state_carried`)
_CARRIED: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()


@dataclass
class Extension:
    """Sequences extended a token at a time by :meth:`Engine.extend`: their KV cache, left-padded (every
    row's last token in the last column), the attention mask over its columns (host, int64) and each
    row's length. The one place parse_exact's frontier and generation keep a cache."""

    cache: Any
    mask: torch.Tensor
    lengths: list[int]

    def own(self) -> list[torch.Tensor]:
        """Each row's keys and values without its padding, ``[2, layers, heads, length, head_dim]`` (copies
        of those columns only)."""
        width, layers = self.mask.shape[1], getattr(self.cache, "layers", None)
        if not layers or not all(isinstance(getattr(layer, "keys", None), torch.Tensor) for layer in layers):
            raise ProbeError("this model's cache holds more than keys and values (state-space or recurrent "
                             "layers): its rows cannot be kept and rebuilt apart")
        if len({tuple(t.shape[1:]) for layer in layers for t in (layer.keys, layer.values)}) > 1:
            raise ProbeError("this model's keys and values differ in width or length by layer (latent attention, "
                             "per-layer head sizes or windowed caches): its rows cannot be kept as one block")
        return [torch.stack([torch.stack([layer.keys[b, :, width - n:] for layer in layers]),
                             torch.stack([layer.values[b, :, width - n:] for layer in layers])])
                for b, n in enumerate(self.lengths)]

    def last(self) -> torch.Tensor:
        """The last column's keys and values ``[2, layers, rows, heads, head_dim]`` (the tokens just added;
        only that column is copied)."""
        layers = self.cache.layers
        return torch.stack([torch.stack([layer.keys[:, :, -1] for layer in layers]),
                            torch.stack([layer.values[:, :, -1] for layer in layers])])

    def repeat(self, k: int) -> None:
        """Each row ``k`` times in a row (in place): ``k`` continuations share one prompt's pass."""
        self.cache.batch_repeat_interleave(k)
        self.mask = self.mask.repeat_interleave(k, dim=0)
        self.lengths = [n for n in self.lengths for _ in range(k)]
