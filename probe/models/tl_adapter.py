"""The TransformerLens 4.x backend as a model adapter: the same scorer, TransformerLens hook points.

``TransformerBridge.boot_transformers(hf_model=...)`` does not re-implement the
model: it swaps the Hugging Face module's submodules (embeddings, decoder
layers, attention, MLP, norms, unembedding) for bridge components that wrap the
originals and carry TransformerLens ``HookPoint`` s (``blocks.{i}.hook_resid_post``,
``blocks.{i}.attn.hook_z``, ...). The Hugging Face module keeps its
``forward``, ``get_decoder()``, ``get_output_embeddings()`` and KV cache, so the
scorer's own segment passes (explicit position ids, attention masks, a
``DynamicCache`` shared across prefix-tree segments) run unchanged *through*
the bridge, and every hook point fires in them.

:func:`to_transformer_lens` returns a :class:`~probe.models.LoadedModel` whose
``.model`` is that wrapped module; :func:`hook_points` gives capture the
bridge's ``hook_dict`` (name -> ``HookPoint``), so ``CaptureSpec`` registers on
TransformerLens' own hooks instead of torch hooks on discovered modules.

The bridge switches attention to eager (its attention hooks need the
pattern): scores equal an eager Hugging Face run (tested <= 1e-5) and differ
from SDPA by float noise (~1e-6); the model fingerprint records the attention
implementation, so a run is never resumed across the two.

>>> from probe.models import load_model                          # doctest: +SKIP
>>> lm = to_transformer_lens(load_model("smollm2"), copy=False)  # doctest: +SKIP
>>> "blocks.3.hook_resid_post" in hook_points(lm.model)          # doctest: +SKIP
True
"""

from __future__ import annotations

import copy as _copy
import dataclasses
import logging
from typing import Any


import torch

from probe.errors import ModelLoadError
from probe.hf_compat import cache_kwargs, output_cache

log = logging.getLogger(__name__)
BACKENDS = ("hf", "tl", "auto")
_BRIDGE_ATTR = "_probe_tl_bridge"  # kept in the module's __dict__: not a registered submodule (no cycle)


def bridge_of(model: Any) -> Any | None:
    """The ``TransformerBridge`` wrapping ``model`` (a module returned by :func:`to_transformer_lens`), else None."""
    return getattr(model, "__dict__", {}).get(_BRIDGE_ATTR)


def backend_name(model: Any) -> str:
    """``"tl"`` for a bridged model, else ``"hf"``."""
    return "hf" if bridge_of(model) is None else "tl"


def hook_points(model: Any) -> dict[str, Any] | None:
    """TransformerLens hook name -> ``HookPoint`` of a bridged ``model``; None for a plain one."""
    bridge = bridge_of(model)
    return None if bridge is None else dict(bridge.hook_dict)


def to_transformer_lens(lm: Any, copy: bool = True) -> Any:
    """``lm`` (a :class:`~probe.models.LoadedModel`) with its model wrapped by a TransformerLens 4.x
    ``TransformerBridge``; ``copy=False`` wraps ``lm.model`` in place (saves memory when ``lm`` was
    loaded for this run only). Raises :class:`~probe.errors.ModelLoadError` saying why when
    TransformerLens is missing or does not support the architecture."""
    if bridge_of(lm.model) is not None:
        return lm
    try:
        from transformer_lens.model_bridge import TransformerBridge
    except ImportError as exc:
        raise ModelLoadError(f"--backend tl needs TransformerLens >= 4 (pip install 'probe[interp]'): {exc}") from None
    model = _copy.deepcopy(lm.model) if copy else lm.model
    if getattr(model, "hf_device_map", None) and len(set(model.hf_device_map.values())) > 1:
        raise ModelLoadError("--backend tl: a model split over several devices (device_map) is not supported")
    tok = _copy.deepcopy(lm.tokenizer)
    # The bridge re-loads a tokenizer from the hub name unless the given one says it adds BOS. The scorer
    # feeds token ids, never text through the bridge, so claiming it is harmless and keeps us offline.
    tok.init_kwargs["add_bos_token"] = True
    tok.init_kwargs.setdefault("name_or_path", getattr(lm.tokenizer, "name_or_path", "") or "local")
    if not getattr(model.config, "architectures", None):  # the bridge picks its adapter by this name
        model.config.architectures = [type(model).__name__]
    param = next(model.parameters())
    name = getattr(model.config, "_name_or_path", "") or type(model).__name__
    try:
        bridge = TransformerBridge.boot_transformers(name, hf_model=model, tokenizer=tok, device=str(param.device),
                                                     dtype=param.dtype)
    except Exception as exc:  # unsupported architecture, config the adapter cannot map, ...
        raise ModelLoadError(f"--backend tl: TransformerLens cannot wrap {type(model).__name__} "
                             f"({type(exc).__name__}: {exc})") from None
    bridge.eval()
    _follow_cache_rename(model)
    _check_cached_pass(model)
    model.__dict__[_BRIDGE_ATTR] = bridge
    # the tokenizer stays the caller's: only the bridge's copy claims to add BOS
    if dataclasses.is_dataclass(lm):
        return dataclasses.replace(lm, model=model, extra={**getattr(lm, "extra", {}), "backend": "transformer_lens"})
    out = _copy.copy(lm)  # any object with .model and .tokenizer
    out.model = model
    return out


def _follow_cache_rename(model: Any) -> None:
    """Hand the KV cache to the bridge's attention under the name it reads.

    transformers 5.24 passes a decoder layer's cache to its attention as ``cache``; TransformerLens 4.3's
    attention components re-implement attention and read ``past_key_values`` (or ``layer_past``), so on
    5.24 they would neither extend nor update the cache and every cached segment would attend to itself
    alone. A keyword pre-hook copies ``cache`` to ``past_key_values`` when only the new name came; where
    both versions agree it does nothing.
    """
    try:
        from transformer_lens.model_bridge.generalized_components.attention import AttentionBridge
    except ImportError:  # a TransformerLens whose layout we do not know: the cached-pass check decides
        return

    def rename(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if kwargs.get("cache") is not None and kwargs.get("past_key_values") is None:
            kwargs = {**kwargs, "past_key_values": kwargs["cache"]}
        return args, kwargs

    for module in model.modules():
        if isinstance(module, AttentionBridge):
            module.register_forward_pre_hook(rename, with_kwargs=True)


def _check_cached_pass(model: Any) -> None:
    """Refuse, naming the versions, when a pass after a KV cache differs from the same tokens in one pass.

    The scorer's prefix sharing runs every shared segment through the cache, so a wrapper that drops the
    cache would give silently different numbers (this happened with transformers 5.24 and TransformerLens
    4.3 before :func:`_follow_cache_rename`). Three tokens on the model's own device: negligible next to
    loading it.
    """

    decoder = model.get_decoder()
    device = next(model.parameters()).device
    vocab = int(getattr(model.get_output_embeddings(), "out_features", 0) or model.config.get_text_config().vocab_size)
    ids = torch.tensor([[1 % vocab, 2 % vocab, 3 % vocab]], device=device)
    pos = torch.arange(3, device=device)[None]
    with torch.no_grad():
        full = decoder(input_ids=ids, position_ids=pos).last_hidden_state[:, -1].float()
        first = decoder(input_ids=ids[:, :2], position_ids=pos[:, :2], use_cache=True)
        cache = output_cache(first)
        last = decoder(input_ids=ids[:, 2:], position_ids=pos[:, 2:], use_cache=True,
                       **cache_kwargs(decoder, cache)).last_hidden_state[:, -1].float()
    gap = (full - last).abs().max().item()
    scale = max(full.abs().max().item(), 1.0)
    if cache is None or not gap <= 1e-3 * scale:
        from importlib import metadata

        versions = ", ".join(f"{name} {_version(metadata, name)}" for name in ("transformers", "transformer-lens"))
        raise ModelLoadError(
            f"--backend tl: with {versions}, the TransformerLens bridge gives a different result after a KV "
            f"cache than without one (max |diff| {gap:.3g}); probe's shared-prefix scoring would be wrong. "
            f"Use --backend hf, or the versions in probe's lock (requirements/cpu.lock).")


def _version(metadata: Any, name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "(not installed)"


def with_backend(lm: Any, backend: str, copy: bool = True) -> Any:
    """``lm`` on ``backend``: ``"hf"`` (unchanged), ``"tl"`` (:func:`to_transformer_lens`) or ``"auto"``
    (``tl`` where TransformerLens can wrap the model, else ``hf`` with a warning saying why)."""
    if backend == "hf":
        return lm
    if backend == "tl":
        return to_transformer_lens(lm, copy=copy)
    if backend == "auto":
        try:
            return to_transformer_lens(lm, copy=copy)
        except ModelLoadError as exc:
            log.warning("%s; using plain torch hooks (hf)", exc)
            return lm
    raise ModelLoadError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
