"""Forward passes: shared prefixes computed once, log-softmax only where needed.

The engine runs *segments*: the tokens of a sequence from some position on,
after a KV cache holding the positions before it (a shared prefix computed
once, see :mod:`probe.scoring.batching` for the prefix tree that decides
which). Sequences that share nothing run as plain rows from position 0.

Only the hidden states at the positions whose next token is scored go through
the unembedding, in float32 and in chunks, so a ``[batch, seq, vocab]`` float32
tensor never exists.

Padding: top-level shared segments are left-padded, later segments and plain
rows right-padded (the attention mask hides the gaps); position ids are always
explicit, so a token's position never depends on its batch-mates.
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from probe.hf_compat import cache_kwargs, output_cache
from probe.scoring.rows import Row, common_prefix_length  # noqa: F401  (re-exported: the engine's input)
from probe.scoring.sampling import target_logprobs

HEAD_CHUNK = 256  # rows of hidden states unembedded at once: 256 x vocab float32 stays small
#: the memory-efficient kernel first: a packed-pass preference with no per-shape plan to build
#: (see Engine.attention_backends)
PACKED_SDPA_BACKENDS = ("EFFICIENT_ATTENTION", "FLASH_ATTENTION", "CUDNN_ATTENTION", "MATH")


def flex_attention_on(model: Any) -> Any:
    """Run ``model``'s attention through transformers' ``flex_attention`` implementation, then restore
    the one it had."""
    from probe.scoring.packed import attention_implementation

    return attention_implementation(model, "flex_attention")


def sdpa_preference(names: tuple[str, ...] | None) -> Any:
    """A context in which SDPA tries the backends ``names`` (``torch.nn.attention.SDPBackend`` members) in
    that order; a no-op for None."""
    if not names:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([getattr(SDPBackend, n) for n in names], set_priority=True)


@dataclass
class RowOutput:
    label_logprobs: dict[int, float] = field(default_factory=dict)
    token_logprobs: list[float] = field(default_factory=list)
    finite: bool = True
    #: per sampling spec of the call (see probe.scoring.sampling): the same numbers under that spec
    sampled_labels: list[dict[int, float]] = field(default_factory=list)
    sampled_tokens: list[list[float]] = field(default_factory=list)


class Engine:
    """Runs groups of rows through a Hugging Face causal LM."""

    def __init__(self, model: Any, pad_id: int) -> None:
        self.model = model
        self.decoder = model.get_decoder()
        self.head = model.get_output_embeddings()
        self.config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.pad_id = pad_id
        #: where the inputs go: the input embedding's device (with a ``device_map`` the model spans several
        #: devices: later layers, their KV caches and the head may live elsewhere; see :func:`select_rows`)
        self.device = input_device(model)
        self.softcap = getattr(self.config, "final_logit_softcapping", None)
        self.logit_scale = getattr(self.config, "logit_scale", None)  # Cohere-style multiplier
        self.logits_scaling = getattr(self.config, "logits_scaling", None)  # Granite-style divisor
        self.forward_passes = 0  # counted for benchmarks
        self.tokens_run = 0  # non-pad tokens actually computed
        self.tokens_raw = 0  # tokens of every scored sequence, each on its own (no prefix sharing): set by the Scorer
        self.tokens_padded = 0  # padding positions run (packed pass: row tails; level path: pad columns)
        self.tokens_attended = 0  # (query, key) pairs the attention masks let through, padding included
        self.kv_bytes_copied = 0  # key/value cache bytes copied (row selection and merging; 0 when packed)
        self.host_copies = 0  # host-device copies made by the packed pass and its read
        #: SDPA backends a packed pass prefers, in order (None: PyTorch's own choice, which on a Hopper GPU is
        #: cuDNN's attention for a masked pass). cuDNN builds a plan per new [rows, width] shape (0.6-1.1 s on
        #: an H200) but runs the attention faster; neither won every workload there, so PyTorch's choice stays
        #: the default. docs/scoring.md, "The attention kernel on a GPU".
        self.attention_backends: tuple[str, ...] | None = None
        #: the packed pass's attention: "sdpa" (the dense 4-D mask over whole rows), "blocks" (SDPA block by
        #: block, the default on a CPU: each subtree against its own keys and the stems above it, no work on
        #: the pairs the mask hides; one call per block and layer, too many small kernels for a GPU; SDPA
        #: models only, :func:`probe.scoring.packed.block_attention`) or "flex" (FlexAttention with the tree mask as a
        #: BlockMask, which skips the tiles it hides whole; compiled on first use; models whose class supports
        #: it, full attention only, else "sdpa"). docs/scoring.md, "The attention kernel".
        self.attention_kernel = "blocks" if self.device.type == "cpu" else "sdpa"
        if self.device.type == "cpu":
            from probe.scoring.host_memory import keep_freed_memory

            keep_freed_memory()  # process-wide, once: freed pass temporaries stay for the next layer
        self._layer_kinds = layer_kinds(self.config)
        self.window = int(self.config.sliding_window) if "sliding_attention" in self._layer_kinds else None

    def counts(self) -> dict[str, int]:
        """Forward passes, tokens computed and raw tokens so far (``computed / raw`` is what sharing saves),
        padded and attended tokens, KV-cache bytes copied and host-device copies."""
        return {"forward_passes": self.forward_passes, "tokens_computed": self.tokens_run,
                "tokens_raw": self.tokens_raw, "tokens_padded": self.tokens_padded,
                "tokens_attended": self.tokens_attended, "kv_bytes_copied": self.kv_bytes_copied,
                "host_device_copies": self.host_copies}

    # -- the packed pass (probe.scoring.packed) -------------------------------
    def packable(self, max_position: int) -> str | None:
        """Why a packed pass over positions up to ``max_position`` would not be exact for this model
        (None: it is). See docs/scoring.md, "The packed pass"."""
        if type(self)._read is not Engine._read:  # a subclass reading more per position (lm-eval's greedy flags)
            return "the engine's read is overridden"
        attn = str(getattr(self.config, "_attn_implementation", None) or "eager")
        if attn not in ("eager", "sdpa"):
            return f"attention implementation {attn!r} takes no 4-D mask"
        if not self._layer_kinds <= {"full_attention", "sliding_attention"}:
            return f"layer types {sorted(self._layer_kinds)}"
        if len(self._layer_kinds) > 1 and max_position >= (self.window or 0) and not _takes_mask_per_kind(self.decoder):
            return "full and sliding-window layers, and the model takes one mask for both"
        return None

    def masks(self, pre: torch.Tensor, end: torch.Tensor, pos: torch.Tensor, max_position: int) -> Any:
        """The pass's attention mask(s): one tensor, or one per layer kind when a window cuts in."""
        from probe.scoring.packed import tree_mask

        dtype = self.compute_dtype
        if self.window is None or max_position < self.window:
            return tree_mask(pre, end, pos, dtype)
        sliding = tree_mask(pre, end, pos, dtype, self.window)
        if len(self._layer_kinds) == 1:
            return sliding
        return {"full_attention": tree_mask(pre, end, pos, dtype), "sliding_attention": sliding}

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the attention scores (and so an additive mask) have: the input embedding's."""
        emb = self.model.get_input_embeddings() if hasattr(self.model, "get_input_embeddings") else None
        weight = getattr(emb, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dtype.is_floating_point:
            return weight.dtype
        return torch.float32

    def run_packed(self, ids: torch.Tensor, pos: torch.Tensor, pre: torch.Tensor, end: torch.Tensor,
                   max_position: int, blocks: list[list[Any]] | None = None) -> torch.Tensor:
        """One packed forward pass over ``[rows, width]`` device tensors; the last hidden states
        ``[rows, width, d_model]``. ``blocks``: per row its attention blocks
        (:func:`probe.scoring.packed.tree_blocks`), for the ``"blocks"`` attention kernel."""
        if self._flex_ok(max_position):
            from probe.scoring.packed import tree_block_mask

            with flex_attention_on(self.model):
                out = self._decoder(input_ids=ids, attention_mask=tree_block_mask(pre, end), position_ids=pos,
                                    use_cache=False)
            return out.last_hidden_state
        mask = self.masks(pre, end, pos, max_position)
        if blocks is not None and self._blocks_ok():
            from probe.scoring.packed import attention_blocks

            with attention_blocks(self._attention_owner, blocks):
                return self._decoder(input_ids=ids, attention_mask=mask, position_ids=pos,
                                     use_cache=False).last_hidden_state
        with sdpa_preference(self.attention_backends if ids.is_cuda else None):
            out = self._decoder(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)
        return out.last_hidden_state

    @property
    def _attention_owner(self) -> Any:
        """What a pass switches the attention implementation of: the decoder's own, so a composite model's
        other towers keep theirs (the whole model where the decoder cannot switch alone)."""
        return self.decoder if hasattr(self.decoder, "set_attn_implementation") else self.model

    def _blocks_ok(self) -> bool:
        """Whether this pass's attention runs block by block: asked for, and the model's attention is SDPA
        (what :func:`probe.scoring.packed.block_attention` runs per block; eager models keep their own)."""
        return (self.attention_kernel == "blocks"
                and str(getattr(self.config, "_attn_implementation", None) or "") == "sdpa")

    def _flex_ok(self, max_position: int) -> bool:
        """Whether this pass runs with FlexAttention: asked for, supported by the model's class, and no
        sliding window cuts in (its mask is not written as a block mask)."""
        return (self.attention_kernel == "flex" and bool(getattr(self.model, "_supports_flex_attn", False))
                and (self.window is None or max_position < self.window))

    def read_packed(self, hidden: torch.Tensor, where: list[torch.Tensor], chunks: list[tuple[int, int, int, int]],
                    sampling: tuple = ()) -> torch.Tensor:
        """The log-probabilities a pass reads, on the device, as one float64 tensor: the target pairs'
        log-probabilities, then 1.0/0.0 per position (all logits finite), then per sampling spec the
        pairs' sampling log-probabilities. ``where``: positions' rows and columns, pairs' positions and
        tokens (device tensors, :class:`probe.scoring.packed.ReadPlan`); ``chunks``: ``(first position,
        end, first pair, end)`` of each head chunk."""
        from probe.scoring.sampling import block_logprobs

        pos_row, pos_col, pair_pos, pair_tok = where
        picked = hidden[pos_row, pos_col]  # [positions, d_model]: one gather of every scored position
        lps, fins, sampled = [], [], []
        for a, b, pa, pb in chunks:
            logits = self.logits(picked[a:b])  # [chunk, vocab] float32
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

    # -- unembedding -------------------------------------------------------
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits for a few hidden states ``[n, d_model]``, as the model's own head computes them."""
        weight = getattr(self.head, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.device != hidden.device and weight.device.type != "meta":
            hidden = hidden.to(weight.device)  # a head on another device than the last layer (device_map)
        out = self.head(hidden).float()
        if self.logit_scale:
            out = out * self.logit_scale
        if self.logits_scaling:
            out = out / self.logits_scaling
        if self.softcap:
            out = torch.tanh(out / self.softcap) * self.softcap
        return out

    # -- forward passes ----------------------------------------------------
    def _decoder(self, **kwargs: Any) -> Any:
        self.forward_passes += 1
        return self.decoder(**kwargs)

    def run_prefixes(self, prefixes: list[tuple[int, ...]], with_hidden: bool = False) -> tuple:
        """Left-padded pass over sequences starting at position 0; returns the KV cache and its attention mask
        (``with_hidden``: and the last hidden states ``[rows, width, d_model]``)."""
        from transformers import DynamicCache

        ids, mask, pos = left_pad(prefixes, self.pad_id)
        self.tokens_run += sum(len(p) for p in prefixes)
        self.tokens_padded += ids.numel() - sum(len(p) for p in prefixes)
        cache = DynamicCache(config=self.model.config)
        out = self._decoder(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=pos.to(self.device),
            use_cache=True,
            **cache_kwargs(self.decoder, cache),
        )
        if with_hidden:
            return output_cache(out), mask, out.last_hidden_state
        return output_cache(out), mask

    # -- incremental extension (parse_exact's frontier, generation) ------------
    def begin(self, prompts: list[tuple[int, ...]]) -> tuple["Extension", torch.Tensor]:
        """Run ``prompts`` once (left-padded, :func:`left_pad`); their :class:`Extension` and the float32
        next-token logits ``[rows, vocab]`` after each prompt's last token."""
        cache, mask, hidden = self.run_prefixes(list(prompts), with_hidden=True)
        return Extension(cache, mask, [len(p) for p in prompts]), self.logits(hidden[:, -1])

    def extension(self, blocks: list[list[torch.Tensor]]) -> "Extension":
        """An :class:`Extension` from key/value blocks ``[2, layers, heads, tokens, head_dim]``: row ``b``'s
        sequence so far is ``blocks[b]`` in order (kept from earlier passes), left-padded as :meth:`begin`
        pads. The blocks are copied into the new cache; they are left as they are."""
        from transformers import DynamicCache

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
        self.tokens_run += len(tokens)
        out = self._decoder(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                            position_ids=pos.to(self.device), use_cache=True, **cache_kwargs(self.decoder, ext.cache))
        ext.cache, ext.mask, ext.lengths = output_cache(out), mask, [n + 1 for n in ext.lengths]
        return self.logits(out.last_hidden_state[:, -1])

    def tree_store(self, ext: "Extension") -> Any:
        """The :class:`probe.scoring.tree_cache.NodeStore` of prompts run by :meth:`begin` (their cache, used
        as it is), for :meth:`extend_tree`; None where the model's attention is not one
        :func:`~probe.scoring.tree_cache.frontier_attention` computes exactly (then :meth:`extend` it is). No
        window check: the enumeration refuses a prompt plus budget longer than the model's sliding window."""
        from probe.scoring.tree_cache import NodeStore

        devices = {layer.keys.device for layer in ext.cache.layers}
        return NodeStore(ext.cache, ext.mask) if len(devices) == 1 and self.tree_fits(0) else None

    def tree_store_of(self, blocks: list[torch.Tensor], longest: int) -> Any:
        """A :class:`~probe.scoring.tree_cache.NodeStore` of prompts given as key/value blocks ``[2, layers,
        kv_heads, length, head_dim]`` (:meth:`Extension.own`), for sequences of at most ``longest`` tokens
        (prompt and continuation); None where :meth:`extend_tree` would not be exact for them: the cases of
        :meth:`tree_store`, or a sliding window shorter than ``longest`` (the store attends to every column)."""
        from probe.scoring.tree_cache import NodeStore

        if not blocks or len({b.device for b in blocks}) != 1 or not self.tree_fits(longest):
            return None
        return NodeStore.of_blocks(blocks)

    def tree_fits(self, longest: int) -> bool:
        """Whether :meth:`extend_tree` is exact for this model on sequences of at most ``longest`` tokens: its
        attention is one :func:`~probe.scoring.tree_cache.frontier_attention` computes
        (:func:`~probe.scoring.tree_cache.tree_ok`), its layers attend (no other kind), and no sliding window
        is shorter than ``longest`` (the store attends to every column)."""
        from probe.scoring.tree_cache import tree_ok

        if not self._layer_kinds <= {"full_attention", "sliding_attention"}:
            return False
        if self.window is not None and longest > self.window:
            return False
        return tree_ok(self.model)

    def extend_tree(self, store: Any, tokens: list[int], prompts: list[int], paths: list[list[int]],
                    positions: list[int]) -> tuple[torch.Tensor, list[int]]:
        """One token after each of several paths of ``store``'s prompts, in one pass and without a cache copy
        (:mod:`probe.scoring.tree_cache`): token ``tokens[i]`` after prompt row ``prompts[i]`` and the stored
        nodes ``paths[i]`` (first generated first), at position ``positions[i]``. Returns the float32
        next-token logits ``[len(tokens), vocab]`` and the new nodes' indices in the store."""
        from probe.scoring.packed import attention_implementation
        from probe.scoring.tree_cache import FRONTIER_ATTENTION, FrontierPass, frontier_on

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
        self.tokens_run += n
        with frontier_on(plan), attention_implementation(self._attention_owner, FRONTIER_ATTENTION):
            out = self._decoder(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)
        return self.logits(out.last_hidden_state[0]), list(range(first, first + n))  # no device sync

    def run_segments(
        self,
        segments: list[tuple[tuple[int, ...], int]],
        cache: Any = None,
        prefix_mask: torch.Tensor | None = None,
        cache_rows: list[int] | None = None,
        keep_cache: bool = False,
    ) -> tuple[torch.Tensor, Any, torch.Tensor | None]:
        """Run ``ids[start:]`` of each ``(ids, start)`` (right-padded, explicit positions) after
        row ``cache_rows[i]`` of ``cache`` (positions ``0..start-1``) when a cache is given.

        Returns the last hidden states ``[rows, width, d_model]`` and, with
        ``keep_cache``, the extended cache and its attention mask (a shared
        segment that further rows build on)."""
        lengths = [len(ids) - s for ids, s in segments]
        width = max(lengths)
        ids_t = torch.full((len(segments), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(segments), width), dtype=torch.long)
        pos = torch.zeros((len(segments), width), dtype=torch.long)
        for i, ((ids, s), n) in enumerate(zip(segments, lengths)):
            ids_t[i, :n] = torch.tensor(ids[s:])
            mask[i, :n] = 1
            pos[i, :] = torch.arange(s, s + width)
        self.tokens_run += sum(lengths)
        self.tokens_padded += ids_t.numel() - sum(lengths)
        kwargs: dict[str, Any] = {}
        if cache is not None:
            index = torch.tensor(cache_rows, dtype=torch.long)
            sub = select_rows(cache, index)
            self.kv_bytes_copied += cache_bytes(sub)
            mask = torch.cat([prefix_mask[index], mask], dim=1)
            kwargs.update(cache_kwargs(self.decoder, sub), use_cache=True)
        elif keep_cache:
            from transformers import DynamicCache

            kwargs.update(cache_kwargs(self.decoder, DynamicCache(config=self.model.config)), use_cache=True)
        out = self._decoder(
            input_ids=ids_t.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=pos.to(self.device),
            **kwargs,
        )
        if keep_cache:
            return out.last_hidden_state, output_cache(out), mask
        return out.last_hidden_state, None, None

    @staticmethod
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

    def read(self, hidden: torch.Tensor, rows: list[Row], starts: list[int], index: list[int] | None = None,
             sampling: tuple = ()) -> list[RowOutput]:
        """Log-probabilities of ``rows`` (hidden-state rows ``index``, default all) at their scored positions;
        with ``sampling`` specs, also their sampling log-probabilities from the same logits."""
        if index is not None:
            hidden = hidden[torch.tensor(index, dtype=torch.long, device=hidden.device)]
        return self._read(hidden, rows, starts, sampling)

    def _read(self, hidden: torch.Tensor, rows: list[Row], starts: list[int], sampling: tuple = ()) -> list[RowOutput]:
        """Log-probabilities at the needed positions only, in float32 (sampling ones in float64)."""
        outputs = [RowOutput(sampled_labels=[{} for _ in sampling], sampled_tokens=[[] for _ in sampling])
                   for _ in rows]
        # (row, position in this pass, target ids)
        wanted: list[tuple[int, int, tuple[int, ...]]] = []
        for i, (r, s) in enumerate(zip(rows, starts)):
            if r.label_ids:
                wanted.append((i, len(r.ids) - 1 - s, r.label_ids))
            for j in range(max(r.score_from, s + 1), len(r.ids)):
                wanted.append((i, j - 1 - s, (r.ids[j],)))
        for c in range(0, len(wanted), HEAD_CHUNK):
            chunk = wanted[c : c + HEAD_CHUNK]
            h = hidden[torch.tensor([w[0] for w in chunk]), torch.tensor([w[1] for w in chunk])]
            logits = self.logits(h)
            finite_rows, norm = finite_and_logsumexp(logits)
            finite = finite_rows.tolist()
            sampled = target_logprobs(logits, [w[2] for w in chunk], sampling) if sampling else []
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
        return outputs


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
        width, layers = self.mask.shape[1], self.cache.layers
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


def _on(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``, copied only when it is elsewhere (a head on another GPU under a device_map)."""
    return t if t.device == device else t.to(device)


def layer_kinds(config: Any) -> set[str]:
    """The attention kinds of a (text) config's layers: its ``layer_types``, else all sliding-window
    when it has a window in use, else all full attention."""
    types = getattr(config, "layer_types", None)
    if types:
        return set(types)
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True) is not False:
        return {"sliding_attention"}
    return {"full_attention"}


def _takes_mask_per_kind(decoder: Any) -> bool:
    """Whether a decoder's forward accepts ``attention_mask`` as ``{layer kind: mask}`` (transformers'
    hybrid models: Gemma 2/3, Qwen 2/3, ...)."""
    import inspect

    try:
        src = inspect.getsource(type(decoder).forward)
    except (OSError, TypeError):
        return False
    return "attention_mask, dict)" in src


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


def input_device(model: Any) -> torch.device:
    """The device a model's inputs go to: its input embedding's (the first parameter's when it has none)."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    weight = getattr(emb, "weight", None)
    if isinstance(weight, torch.Tensor):
        return weight.device
    return next(model.parameters()).device


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
