"""Which of the engine's paths are exact for a model, decided before any pass from what its config and code say.

Every path computes a sequence's numbers as a plain forward of that sequence alone would, but each assumes
something about the model:

- **packed** (:mod:`probe.scoring.engine.packed`): many sequences in one row under a tree mask, each token at its
  own position id. Needs attention-only layers that take a 4-D mask and position ids, every window one the mask
  models (``sliding_window`` by layer kind), and no bias computed from columns or the mask (ALiBi).
- **level** (the level-by-level KV-cache path): shared prefixes kept in a cache, left-padded then extended.
  Needs attention-only layers and explicit positions; windows only where the driver knows them.
- **plain**: each sequence alone, unpadded, no shared prefix: exact for any model that runs at all.
- **tree** (parse_exact's node store, :mod:`probe.scoring.engine.tree_cache`): its own attention over stored
  keys. Needs SDPA dispatched through transformers' attention interface, one store per layer, plain keys.
- **extend** (left-padded batched extension: generation, parse_exact's cached rows): padding enters the state of
  a state-space or recurrent layer, so such models extend unpadded rows only, and only where the engine's cache
  carries their state (a decoder without a key/value cache argument: never; else checked once,
  :meth:`probe.scoring.engine.extension.Extending.state_carried`).
- **capture** (activation hooks on the blocks): a block's output must be the stream the next block reads (not
  so where the stream is rescaled between blocks at inference).

What no path computes exactly is refused (:func:`check_supported`: one line naming the model type and why),
before weights are loaded where the config decides it.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

from probe.errors import ProbeError
from probe.scoring.engine.tree_cache import tree_ok

#: layer kinds whose only state is keys and values, with masks the packed pass models
ATTENTION = frozenset({"full_attention", "sliding_attention"})
#: layer kinds with no sequence mixing at all (an MLP or experts in place of attention)
STATELESS = frozenset({"mlp", "moe", "dense", "sparse"})
#: layer kinds that carry a recurrent or state-space state (padding or a shared prefix enters it)
STATEFUL = frozenset({"linear_attention", "conv", "mamba", "recurrent", "hybrid", "hybrid_sliding", "ssm", "rwkv"})
#: cache layer classes (transformers' ``DynamicCache(config=...)``) that hold keys and values only
KV_LAYERS = frozenset({"DynamicLayer", "DynamicSlidingWindowLayer", "DummyLayer"})
#: a sequence longer than this has more than 2^32 query x key pairs, past which SDPA's memory-efficient kernel
#: has returned wrong values on CUDA: such a sequence runs alone, with that kernel excluded (the driver)
KERNEL_SAFE_TOKENS = 65_536
#: the SDPA backends such a sequence runs with (the memory-efficient kernel left out), in order
LONG_SDPA_BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "MATH")


NO_CACHE = "no key/value cache (nothing to share a prefix through or to extend)"


@dataclass(frozen=True)
class Capabilities:
    """Per path, why it is not exact for the model (None: it is); ``refused``: why none is."""

    model_type: str
    packed: str | None = None
    level: str | None = None
    tree: str | None = None
    extend: str | None = None
    capture: str | None = None
    refused: str | None = None

    @property
    def scoring_path(self) -> str:
        """The path scoring takes: ``packed``, ``level`` or ``plain`` (each row alone)."""
        if self.packed is None:
            return "packed"
        return "level" if self.level is None else "plain"

    def refuse(self) -> None:
        """Raise the one-line :class:`~probe.errors.ProbeError` when no path is exact."""
        if self.refused:
            raise ProbeError(f"{self.model_type}: {self.refused}")


def decoder_of(model: Any) -> Any:
    """The module that maps ids to last hidden states: ``model.get_decoder()``, else (where that is the model
    itself or a module without ``input_ids``, e.g. a head named ``decoder``) the model's base model."""
    first = model.get_decoder() if hasattr(model, "get_decoder") else None
    for decoder in (first, getattr(model, "base_model", None), getattr(model, "model", None)):
        try:
            if (decoder is not None and decoder is not model
                    and "input_ids" in inspect.signature(decoder.forward).parameters):
                return decoder
        except (TypeError, ValueError):
            continue
    return first if first is not None else model


def _text(config: Any) -> Any:
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def layer_kinds(config: Any) -> set[str]:
    """The kinds of a (text) config's layers in every spelling: ``layer_types``, ``block_types`` /
    ``layers_block_type`` (hybrid models), GPT-Neo's ``attention_layers`` (``local``: a window counted in
    columns); else all sliding-window when a window is in use, else all full attention."""
    for key in ("layer_types", "layers_block_type", "block_types"):
        types = getattr(config, key, None)
        if types and isinstance(types, (list, tuple)) and all(isinstance(t, str) for t in types):
            return set(types)
    neo = getattr(config, "attention_layers", None)
    if neo and isinstance(neo, (list, tuple)):
        return {"full_attention" if t == "global" else "local_attention" for t in neo}
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True) is not False:
        return {"sliding_attention"}
    return {"full_attention"}


def _cache_layers(config: Any) -> set[str]:
    """The cache layer classes transformers builds for the config (empty where it builds none)."""
    try:
        from transformers import DynamicCache

        return {type(layer).__name__ for layer in DynamicCache(config=config).layers}
    except Exception:  # noqa: BLE001  (a config the cache cannot read: decided by its layer kinds alone)
        return set()


def _alibi(config: Any) -> bool:
    """Whether attention adds ALiBi biases (computed from columns or from the mask, not position ids)."""
    if getattr(config, "alibi", False) is True:
        return True
    attn = getattr(config, "attn_config", None)
    return bool(getattr(attn, "alibi", False) or (isinstance(attn, dict) and attn.get("alibi")))


def _forward_params(model: Any) -> set[str]:
    """The arguments of the model's decoder's ``forward`` (empty where they cannot be read)."""
    try:
        return set(inspect.signature(type(decoder_of(model)).forward).parameters)
    except (TypeError, ValueError):
        return set()


def _recurrent(model: Any) -> bool:
    """Whether the decoder keeps a state of its own: no position ids and no key/value cache argument
    (RWKV's ``state``, Mamba's ``cache_params``)."""
    params = _forward_params(model)
    return bool(params) and not params & {"position_ids", "past_key_values", "cache", "layer_past"}


@functools.lru_cache(maxsize=None)
def _dispatches(cls: type) -> bool:
    """Whether an attention class computes its scores through transformers' attention interface."""
    try:
        src = inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False
    return "ALL_ATTENTION_FUNCTIONS" in src or "attention_interface" in src


def _mask_reason(model: Any) -> str | None:
    """Why the decoder would not take the packed pass's 4-D mask as it is: it builds its mask itself
    from a 2-D one without transformers' mask functions (which pass a 4-D mask through)."""
    try:
        src = inspect.getsource(type(decoder_of(model)).forward)
    except (OSError, TypeError):
        return None
    if "causal_mask" in src or "create_mask" in src or "mask_function" in src:
        return None
    return "the decoder builds its own mask from a 2-D one (a 4-D tree mask is not passed through)"


def _tree_reason(text: Any, model: Any) -> str | None:
    """Why parse_exact's node store would not be exact for ``model`` (beyond the path-wide reasons)."""

    if getattr(text, "kv_lora_rank", None):
        return "latent attention (keys and values of other widths than the queries)"
    attention = [m for m in model.modules() if type(m).__name__.endswith("Attention")]
    if not all(_dispatches(type(m)) for m in attention):
        return "attention computed outside transformers' attention interface"
    index = [getattr(m, "layer_idx", None) for m in attention]
    if len(set(index)) != len(index):
        return "attention modules share a layer index (one store per layer)"
    if any(hasattr(m, "lambda_q1") or hasattr(m, "lambda_init") for m in attention):
        return "differential attention (two softmaxes per head)"
    if not tree_ok(model):
        return "attention not plain SDPA (eager, soft-capped scores or attention sinks)"
    return None


def capabilities(config: Any, model: Any = None) -> Capabilities:
    """Which paths are exact for a model of ``config`` (``model``: its module, for what only the code says:
    whether it takes position ids and how its attention is computed)."""
    text = _text(config)
    model_type = str(getattr(text, "model_type", "") or getattr(config, "model_type", "") or "model")
    if getattr(config, "is_encoder_decoder", False):
        return Capabilities(model_type, *(["an encoder-decoder"] * 4),
                            refused="an encoder-decoder model; probe scores decoder-only language models")
    kinds = layer_kinds(text)
    state = sorted(kinds & STATEFUL) or sorted(c for c in _cache_layers(text) - KV_LAYERS if "Linear" in c)
    if not state and model is not None and _recurrent(model):
        state = ["a recurrent state of its own"]
    unknown = sorted(kinds - ATTENTION - STATELESS - STATEFUL)
    whole = None  # a reason no shared-prefix path is exact
    if state:
        whole = f"state-space or recurrent layers ({', '.join(state)}): a shared prefix or padding enters the state"
    elif model is not None and "position_ids" not in _forward_params(model):
        whole = "no position ids (positions follow the columns: recurrent layers or biases from the column index)"
    elif _alibi(text):
        whole = "ALiBi biases computed from the columns or the mask, not from position ids"
    elif "local_attention" in kinds:
        whole = "local attention windows counted in columns (window_size), not positions"
    elif unknown:
        whole = f"layer kinds {', '.join(unknown)} (masks the shared-prefix paths do not model)"
    packed = whole
    if whole is None and model is not None:
        params = _forward_params(model)
        if params and not params & {"past_key_values", "cache", "layer_past"}:
            whole = NO_CACHE
        packed = whole or _mask_reason(model)
    extend = (f"state-space or recurrent layers ({', '.join(state)}): extension pads rows of different lengths, "
              "and padding enters the state") if state else None
    params = _forward_params(model) if model is not None else set()
    if params and not params & {"past_key_values", "cache", "layer_past"}:
        extend = NO_CACHE  # a state the decoder keeps under its own argument is not carried from pass to pass
    extend = extend or (whole if whole == NO_CACHE else None)
    tree = whole or extend
    if tree is None and model is not None:
        tree = _tree_reason(text, model)
    return Capabilities(model_type, packed=packed, level=whole, tree=tree, extend=extend,
                        capture=_capture_reason(text))


def _capture_reason(config: Any) -> str | None:
    """Why a block's output (what capture hooks read) is not the residual stream the next block reads: the
    stream rescaled between blocks at inference (RWKV's ``rescale_every``, within the model's depth)."""
    every = getattr(config, "rescale_every", 0)
    layers = getattr(config, "num_hidden_layers", 0)
    if isinstance(every, int) and isinstance(layers, int) and 0 < every <= layers:
        return (f"the residual stream is halved every {every} layers at inference (rescale_every), so a block's "
                "output is not the stream the next block reads; capture is not exact")
    return None


def engine_capabilities(engine: Any) -> Capabilities:
    """:func:`capabilities` of an engine's model, with what the engine itself cannot run (a packed pass needs
    a 4-D mask the attention implementation takes, and one mask per layer kind where a window cuts in)."""
    return capabilities(engine.model.config, engine.model)


def check_supported(config: Any) -> None:
    """Refuse, before any weight is loaded, a model no path of probe computes exactly: raises
    :class:`~probe.errors.ProbeError` with one line naming the model type and the reason."""
    capabilities(config).refuse()
