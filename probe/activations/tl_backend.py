"""TransformerLens 4.x: the scoring-path adapter, and TransformerLens' own forward as a reference.

The backend of ``probe run --backend tl``, ``probe.evaluate(backend="tl")`` and
``probe activations --backend tl`` is a model adapter,
:func:`probe.models.tl_adapter.to_transformer_lens` (re-exported here): the
Hugging Face module wrapped by a ``TransformerBridge``, run by the one
:class:`~probe.scoring.Scorer` (segment passes, KV cache, prefix sharing), with
``CaptureSpec`` hooks registered on the bridge's own ``HookPoint`` s.

:class:`TLBackend` is *not* on that path: it runs TransformerLens' own
``run_with_cache`` over a padded :class:`Batch`, a reference the tests compare
both the plain-hook and the adapter captures with. It boots offline from an
already loaded model (``hf_model=`` a deep copy, so the bridge's
eager-attention switch never touches the caller's model).

:func:`make_backend` picks the reference bridge where the architecture is
supported and falls back to plain torch hooks
(:class:`probe.activations.extract.HFBackend`) otherwise, saying why.

Note: the bridge forces eager attention. For bit-level parity, load the HF
model with ``attn_implementation="eager"`` too (SDPA reorders float ops, ~1e-6).
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Sequence

import torch

from probe.activations.extract import Batch, HFBackend
from probe.models.tl_adapter import bridge_of, hook_points, to_transformer_lens, with_backend  # noqa: F401

log = logging.getLogger(__name__)


class TLBackend:
    """Capture through ``transformer_lens.model_bridge.TransformerBridge`` (raw HF weights, no folding)."""

    name = "transformer_lens"

    def __init__(self, model: torch.nn.Module, tokenizer: Any) -> None:
        from transformer_lens.model_bridge import TransformerBridge

        device = next(model.parameters()).device
        dtype = next(model.parameters()).dtype
        tok = copy.deepcopy(tokenizer)
        # The bridge re-creates a tokenizer "with BOS" from its hub name unless the given one already
        # says it adds BOS. We feed token ids, never text, so claim it and stay offline.
        tok.init_kwargs["add_bos_token"] = True
        tok.init_kwargs.setdefault("name_or_path", getattr(tokenizer, "name_or_path", "local") or "local")
        name = getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.bridge = TransformerBridge.boot_transformers(name, hf_model=copy.deepcopy(model), tokenizer=tok,
                                                          device=str(device), dtype=dtype)
        self.model = model  # for the device; the bridge holds its own copy
        self.bridge.eval()

    @torch.no_grad()
    def run(self, batch: Batch, hook_names: Sequence[str], positions: Sequence[str]):
        missing = [n for n in hook_names if n not in self.bridge.hook_dict]
        if missing:
            raise KeyError(f"TransformerBridge has no hooks {missing}")
        logits, cache = self.bridge.run_with_cache(
            batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
            names_filter=list(hook_names), return_cache_object=False)
        select = batch.positions_fn(positions)
        acts: dict = {}
        for name in hook_names:
            for pos, rows in select(cache[name]).items():
                acts[f"{name}@{pos}"] = rows.to("cpu", torch.float32).numpy()
        rows = torch.arange(len(batch.items), device=logits.device)
        return logits[rows, batch.last_index.to(logits.device)].float(), acts


def make_backend(model: torch.nn.Module, tokenizer: Any, kind: str = "hf"):
    """``kind``: ``"hf"`` (plain hooks), ``"tl"`` (TransformerLens, error if unsupported) or
    ``"auto"`` (TransformerLens where it works, else plain hooks with a warning)."""
    if kind == "hf":
        return HFBackend(model)
    if kind not in ("tl", "auto"):
        raise ValueError(f"backend must be hf, tl or auto, got {kind!r}")
    try:
        return TLBackend(model, tokenizer)
    except Exception as exc:  # unsupported architecture, missing package, ...
        if kind == "tl":
            raise
        log.warning("TransformerLens backend unavailable (%s: %s); using plain torch hooks",
                    type(exc).__name__, exc)
        return HFBackend(model)
