"""Forward passes: shared prefixes computed once, log-softmax only where needed.

The engine runs *segments*: the tokens of a sequence from some position on,
after a KV cache holding the positions before it (a shared prefix computed
once, see :mod:`probe.scoring.engine.batching` for the prefix tree that decides
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
import inspect
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import DynamicCache

from probe.hf_compat import cache_kwargs, output_cache
from probe.scoring.engine.capabilities import decoder_of, engine_capabilities  # noqa: F401  (decoder_of: public here too)
from probe.scoring.engine.caches import (  # noqa: F401  (left_pad, pad_id_of: public here too, as before)
    cache_bytes, left_pad, merge_caches, pad_id_of, select_rows)
from probe.scoring.engine.counters import Counters
from probe.scoring.engine.extension import Extending, Extension  # noqa: F401  (Extension: public here too)
from probe.scoring.engine.host_memory import keep_freed_memory
from probe.scoring.engine.head import verified_head
from probe.scoring.engine.attention import attention_blocks, attention_implementation, tree_block_mask, tree_mask
from probe.scoring.engine.reading import (  # noqa: F401  (RowOutput, finite_and_logsumexp: public here too)
    HEAD_CHUNK, RowOutput, finite_and_logsumexp, read_positions, read_rows)
from probe.scoring.engine.rows import Row, common_prefix_length  # noqa: F401  (re-exported: the engine's input)
#: the memory-efficient kernel first: a packed-pass preference with no per-shape plan to build
#: (see Engine.attention_backends)
PACKED_SDPA_BACKENDS = ("EFFICIENT_ATTENTION", "FLASH_ATTENTION", "CUDNN_ATTENTION", "MATH")


def flex_attention_on(model: Any) -> Any:
    """Run ``model``'s attention through transformers' ``flex_attention`` implementation, then restore
    the one it had."""
    return attention_implementation(model, "flex_attention")


def sdpa_preference(names: tuple[str, ...] | None) -> Any:
    """A context in which SDPA tries the backends ``names`` (``torch.nn.attention.SDPBackend`` members) in
    that order; a no-op for None."""
    if not names:
        return contextlib.nullcontext()

    return sdpa_kernel([getattr(SDPBackend, n) for n in names], set_priority=True)


class Engine(Extending):
    """Runs groups of rows through a Hugging Face causal LM.

    ``keep_greedy``: the level path's read also keeps each scored token position's argmax token in
    :attr:`greedy` (row key -> tokens; what lm-eval's ``is_greedy`` compares); the packed pass is then not
    used (its read gathers the targets' log-probabilities only)."""

    def __init__(self, model: Any, pad_id: int, keep_greedy: bool = False) -> None:
        self.model = model
        self.decoder = decoder_of(model)
        self.head = model.get_output_embeddings()
        self.config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.pad_id = pad_id
        #: where the inputs go: the input embedding's device (with a ``device_map`` the model spans several
        #: devices: later layers, their KV caches and the head may live elsewhere; see :func:`select_rows`)
        self.device = input_device(model)
        # the head's transforms in each family's spelling (RecurrentGemma's cap, Inkling's muP divisor)
        self.softcap = getattr(self.config, "final_logit_softcapping", None) or getattr(
            self.config, "logits_soft_cap", None)
        self.logit_scale = getattr(self.config, "logit_scale", None)  # Cohere-style multiplier
        self.logits_scaling = getattr(self.config, "logits_scaling", None) or getattr(  # Granite-style divisor
            self.config, "logits_mup_width_multiplier", None)
        #: what the hardware sees (passes, tokens, copies), added to by the engine only; :meth:`counts` reads it
        self.counters = Counters()
        #: with ``keep_greedy``: per row key ``(ids, score_from)``, the argmax token at each scored position
        self.greedy: dict[tuple[tuple[int, ...], int], tuple[int, ...]] | None = {} if keep_greedy else None
        #: SDPA backends a packed pass prefers, in order (None: PyTorch's own choice, which on a Hopper GPU is
        #: cuDNN's attention for a masked pass). cuDNN builds a plan per new [rows, width] shape (0.6-1.1 s on
        #: an H200) but runs the attention faster; neither won every workload there, so PyTorch's choice stays
        #: the default. docs/scoring.md, "The attention kernel on a GPU".
        self.attention_backends: tuple[str, ...] | None = None
        #: the packed pass's attention: "sdpa" (the dense 4-D mask over whole rows), "blocks" (SDPA block by
        #: block, the default on a CPU: each subtree against its own keys and the stems above it, no work on
        #: the pairs the mask hides; one call per block and layer, too many small kernels for a GPU; SDPA
        #: models only, :func:`probe.scoring.engine.attention.block_attention`) or "flex" (FlexAttention with the tree mask as a
        #: BlockMask, which skips the tiles it hides whole; compiled on first use; models whose class supports
        #: it, full attention only, else "sdpa"). docs/scoring.md, "The attention kernel".
        self.attention_kernel = "blocks" if self.device.type == "cpu" else "sdpa"
        if self.device.type == "cpu":
            keep_freed_memory()  # process-wide, once: freed pass temporaries stay for the next layer
        self._layer_kinds = layer_kinds(self.config)
        self.window = int(self.config.sliding_window) if "sliding_attention" in self._layer_kinds else None
        #: which paths are exact for this model (:mod:`probe.scoring.engine.capabilities`): the driver's choice
        #: of packed, level or plain, the tree store and batched extension follow it
        self.capabilities = engine_capabilities(self)
        #: the output embedding, or the model's prediction head and it, as the model's own logits say (checked
        #: once per model: :mod:`probe.scoring.engine.head`; a model whose head matches neither is refused)
        self.head = verified_head(self)

    def counts(self) -> dict[str, int]:
        """Forward passes, tokens computed and raw tokens so far (``computed / raw`` is what sharing saves),
        padded and attended tokens, KV-cache bytes copied and host-device copies."""
        return self.counters.as_dict()

    def reset_counts(self) -> None:
        """Every counter back to 0 (a benchmark's next measured call)."""
        self.counters.reset()

    @property
    def forward_passes(self) -> int:
        return self.counters.forward_passes

    @property
    def tokens_run(self) -> int:
        """Non-pad tokens computed (``counts()["tokens_computed"]``)."""
        return self.counters.tokens_computed

    # -- the packed pass (probe.scoring.engine.packed) -------------------------------
    def packable(self, max_position: int) -> str | None:
        """Why a packed pass over positions up to ``max_position`` would not be exact for this model
        (None: it is). See docs/scoring.md, "The packed pass"."""
        if self.capabilities.packed:
            return self.capabilities.packed
        if self.greedy is not None:  # argmax tokens are read on the level path only
            return "the engine keeps greedy tokens"
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
        dtype = self.compute_dtype
        if self.window is None or max_position < self.window:
            return tree_mask(pre, end, pos, dtype)
        sliding = tree_mask(pre, end, pos, dtype, self.window)
        if len(self._layer_kinds) == 1:
            return sliding
        return {"full_attention": tree_mask(pre, end, pos, dtype), "sliding_attention": sliding}

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the attention scores (and so an additive mask) have: the queries', i.e. the first
        attention module's weights' (the input embedding's where none is found: an embedding kept in float32
        beside half-precision layers must not set the mask's)."""
        for module in self.decoder.modules():
            if type(module).__name__.endswith("Attention"):
                weight = next((p for p in module.parameters() if p.dtype.is_floating_point and p.ndim >= 2), None)
                if weight is not None:
                    return weight.dtype
                break
        emb = self.model.get_input_embeddings() if hasattr(self.model, "get_input_embeddings") else None
        weight = getattr(emb, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dtype.is_floating_point:
            return weight.dtype
        return torch.float32

    def run_packed(self, ids: torch.Tensor, pos: torch.Tensor, pre: torch.Tensor, end: torch.Tensor,
                   max_position: int, blocks: list[list[Any]] | None = None) -> torch.Tensor:
        """One packed forward pass over ``[rows, width]`` device tensors; the last hidden states
        ``[rows, width, d_model]``. ``blocks``: per row its attention blocks
        (:func:`probe.scoring.engine.packed.tree_blocks`), for the ``"blocks"`` attention kernel."""
        if self._flex_ok(max_position):
            with flex_attention_on(self.model):
                out = self._decoder(input_ids=ids, attention_mask=tree_block_mask(pre, end), position_ids=pos,
                                    use_cache=False)
            return out.last_hidden_state
        mask = self.masks(pre, end, pos, max_position)
        if blocks is not None and self._blocks_ok():
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
        (what :func:`probe.scoring.engine.attention.block_attention` runs per block; eager models keep their own)."""
        return (self.attention_kernel == "blocks"
                and str(getattr(self.config, "_attn_implementation", None) or "") == "sdpa")

    def _flex_ok(self, max_position: int) -> bool:
        """Whether this pass runs with FlexAttention: asked for, supported by the model's class, and no
        sliding window cuts in (its mask is not written as a block mask)."""
        return (self.attention_kernel == "flex" and bool(getattr(self.model, "_supports_flex_attn", False))
                and (self.window is None or max_position < self.window))

    # -- unembedding -------------------------------------------------------
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits for a few hidden states ``[n, d_model]``, as the model's own head computes them."""
        weight = next(self.head.parameters(), None)  # the output embedding's weight (a prediction head's first)
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
        self.counters.add(forward_passes=1)
        return self.decoder(**kwargs)

    def run_prefixes(self, prefixes: list[tuple[int, ...]], with_hidden: bool = False) -> tuple:
        """Left-padded pass over sequences starting at position 0; returns the KV cache and its attention mask
        (``with_hidden``: and the last hidden states ``[rows, width, d_model]``)."""
        ids, mask, pos = left_pad(prefixes, self.pad_id)
        self.counters.add(tokens_computed=sum(len(p) for p in prefixes),
                          tokens_padded=ids.numel() - sum(len(p) for p in prefixes))
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
        self.counters.add(tokens_computed=sum(lengths), tokens_padded=ids_t.numel() - sum(lengths))
        kwargs: dict[str, Any] = {}
        if cache is not None:
            index = torch.tensor(cache_rows, dtype=torch.long)
            sub = select_rows(cache, index)
            self.counters.add(kv_bytes_copied=cache_bytes(sub))
            mask = torch.cat([prefix_mask[index], mask], dim=1)
            kwargs.update(cache_kwargs(self.decoder, sub), use_cache=True)
        elif keep_cache:
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

    def merge_caches(self, parts: list[tuple[Any, torch.Tensor, list[int]]]) -> tuple[Any, torch.Tensor]:
        """One cache from rows ``keep`` of several ``(cache, mask, keep)`` pass caches
        (:func:`probe.scoring.engine.caches.merge_caches`); the bytes it copies are counted."""
        cache, mask = merge_caches(parts)
        self.counters.add(kv_bytes_copied=cache_bytes(cache))
        return cache, mask

    # -- the read ----------------------------------------------------------
    def read(self, hidden: torch.Tensor, rows: list[Row], starts: list[int], index: list[int] | None = None,
             sampling: tuple = ()) -> list[RowOutput]:
        """Log-probabilities of ``rows`` (hidden-state rows ``index``, default all) at their scored positions
        (:func:`~probe.scoring.engine.reading.read_rows`); with ``sampling`` specs, also their sampling
        log-probabilities from the same logits; with ``keep_greedy``, their argmax tokens in :attr:`greedy`."""
        if index is not None:
            hidden = hidden[torch.tensor(index, dtype=torch.long, device=hidden.device)]
        return read_rows(self.logits, hidden, rows, starts, sampling, self.greedy)

    def read_packed(self, hidden: torch.Tensor, where: list[torch.Tensor], chunks: list[tuple[int, int, int, int]],
                    sampling: tuple = ()) -> torch.Tensor:
        """A packed pass's read, left on the device (:func:`~probe.scoring.engine.reading.read_positions`)."""
        return read_positions(self.logits, hidden, where, chunks, sampling)


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
    try:
        src = inspect.getsource(type(decoder).forward)
    except (OSError, TypeError):
        return False
    return "attention_mask, dict)" in src


def input_device(model: Any) -> torch.device:
    """The device a model's inputs go to: its input embedding's (the first parameter's when it has none)."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    weight = getattr(emb, "weight", None)
    if isinstance(weight, torch.Tensor):
        return weight.device
    return next(model.parameters()).device
