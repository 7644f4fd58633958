"""Plain-torch forward hooks on any Hugging Face causal LM, named like TransformerLens.

:func:`discover` finds the decoder layers, each layer's attention and MLP
submodules, the final norm and the unembedding of a model without knowing its
class, so the same code runs on Llama, Qwen, Gemma, GPT-2, GPT-NeoX, ...

Hook names follow TransformerLens, so results compare across backends:

===========================  ============================================  ========================
name                         what it is                                    HF equivalent
===========================  ============================================  ========================
``blocks.{i}.hook_resid_pre``   input of decoder layer ``i``               ``hidden_states[i]``
``blocks.{i}.hook_resid_post``  output of decoder layer ``i``              ``hidden_states[i+1]``
                                                                           (not for the last layer:
                                                                           HF applies the final norm)
``blocks.{i}.hook_attn_out``    attention output added to the residual
``blocks.{i}.hook_mlp_out``     MLP output added to the residual
``ln_final.hook_normalized``    output of the final norm                   ``hidden_states[-1]``
===========================  ============================================  ========================

(For models with extra post-attention norms, e.g. Gemma, ``hook_attn_out`` is
the attention module's output *before* that norm.)

:func:`wire` is the one place forward hooks are registered and removed: it hands
each named hook's value ``[batch, pos, d_model]`` to a *tap*, whose returned
tensor (if any) replaces it. Everything that reads or writes activations is a
tap on it:

* the scorer's capture (:class:`probe.activations.CaptureSpec`, the Runner's
  ``capture=``) reads the planned positions in the scoring passes, and its
  ``edits`` write them (activation patching, :mod:`probe.analysis.patching`);
* :func:`intervene` replaces a hook's value through a function; steering
  (:mod:`probe.analysis.steering`) adds a vector with it;
* :func:`capture` keeps selected positions of a forward pass of your own, on the
  CPU in float32 (memory bounded by ``batch x positions x d_model``).

>>> with capture(model, ["blocks.0.hook_resid_post"], lambda h: {"last": h[:, -1]}) as cap:  # doctest: +SKIP
...     model(input_ids)
>>> cap.pop()["blocks.0.hook_resid_post@last"].shape  # (batch, d_model)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np
import torch
from torch import nn

from probe.models.tl_adapter import hook_points

#: The hook kinds ``--hooks`` accepts, in their TransformerLens spelling.
HOOK_KINDS = ("resid_pre", "resid_post", "attn_out", "mlp_out")
FINAL_NORM_HOOK = "ln_final.hook_normalized"

_ATTN_NAMES = ("self_attn", "attn", "attention", "self_attention")
_MLP_NAMES = ("mlp", "feed_forward", "ffn", "block_sparse_moe")
_NORM_NAMES = ("norm", "ln_f", "final_layer_norm", "final_layernorm", "final_norm")
_HOOK_RE = re.compile(r"^blocks\.(\d+)\.hook_(resid_pre|resid_post|attn_out|mlp_out)$")

#: A function from a hook's output ``[batch, pos, d_model]`` to named ``[batch, d_model]`` rows.
PositionsFn = Callable[[torch.Tensor], dict[str, torch.Tensor]]


@dataclass(frozen=True)
class ModelLayout:
    """Where a causal LM keeps the parts the hooks attach to."""

    layers: tuple[nn.Module, ...]
    attn: tuple[nn.Module, ...]
    mlp: tuple[nn.Module, ...]
    final_norm: nn.Module | None
    lm_head: nn.Module
    d_model: int

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def module_for(self, hook_name: str) -> tuple[nn.Module, bool]:
        """The module whose output (or input, when the flag is True) is ``hook_name``."""
        if hook_name == FINAL_NORM_HOOK:
            if self.final_norm is None:
                raise KeyError(f"this model has no final norm for {hook_name!r}")
            return self.final_norm, False
        m = _HOOK_RE.match(hook_name)
        if not m:
            raise KeyError(f"unknown hook name {hook_name!r}; expected blocks.I.hook_{{{','.join(HOOK_KINDS)}}} "
                           f"or {FINAL_NORM_HOOK}")
        i, kind = int(m.group(1)), m.group(2)
        if i >= self.n_layers:
            raise KeyError(f"{hook_name!r}: the model has {self.n_layers} layers")
        if kind == "resid_pre":
            return self.layers[i], True
        if kind == "resid_post":
            return self.layers[i], False
        return (self.attn if kind == "attn_out" else self.mlp)[i], False


def discover(model: nn.Module) -> ModelLayout:
    """Find decoder layers, attention/MLP submodules, final norm and unembedding.

    The decoder layers are the longest ``nn.ModuleList`` whose length equals the
    config's layer count (falling back to the longest ModuleList).
    """
    n_cfg = _config_layers(model)
    best: tuple[str, nn.ModuleList] | None = None
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) > 0:
            if n_cfg is not None and len(mod) != n_cfg:
                continue
            if best is None or len(mod) > len(best[1]):
                best = (name, mod)
    if best is None:
        raise ValueError(f"cannot find the decoder layers of {type(model).__name__}")
    prefix, layers = best
    attn = tuple(_child(layer, _ATTN_NAMES, "attention") for layer in layers)
    mlp = tuple(_child(layer, _MLP_NAMES, "MLP") for layer in layers)
    lm_head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if lm_head is None:
        raise ValueError(f"{type(model).__name__} has no output embeddings (lm_head)")
    # The final norm is a sibling of the layer list (model.model.norm, transformer.ln_f, ...).
    parent = model.get_submodule(prefix.rsplit(".", 1)[0]) if "." in prefix else model
    final_norm = next((getattr(parent, n) for n in _NORM_NAMES if isinstance(getattr(parent, n, None), nn.Module)),
                      None)
    d_model = int(getattr(model.config, "hidden_size", None) or lm_head.weight.shape[1])
    return ModelLayout(tuple(layers), attn, mlp, final_norm, lm_head, d_model)


def _config_layers(model: nn.Module) -> int | None:
    cfg = getattr(model, "config", None)
    cfg = getattr(cfg, "text_config", None) or cfg
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        if isinstance(getattr(cfg, key, None), int):
            return getattr(cfg, key)
    return None


def _child(layer: nn.Module, names: tuple[str, ...], what: str) -> nn.Module:
    for n in names:
        if isinstance(getattr(layer, n, None), nn.Module):
            return getattr(layer, n)
    raise ValueError(f"cannot find the {what} submodule of {type(layer).__name__} (looked for {names})")


def hook_names(layout: ModelLayout, layers: str | Iterable[int] = "all",
               kinds: Iterable[str] = ("resid_post",)) -> list[str]:
    """Expand a layer selection and hook kinds into hook names.

    ``layers`` is ``"all"``, a comma list such as ``"0,5,-1"`` (negative counts
    from the end) or an iterable of ints.

    >>> import types
    >>> fake = types.SimpleNamespace(n_layers=4)
    >>> hook_names(fake, "0,-1", ["resid_post", "mlp_out"])
    ['blocks.0.hook_resid_post', 'blocks.0.hook_mlp_out', 'blocks.3.hook_resid_post', 'blocks.3.hook_mlp_out']
    """
    n = layout.n_layers
    if isinstance(layers, str):
        idx = list(range(n)) if layers.strip() == "all" else [int(x) for x in layers.split(",") if x.strip()]
    else:
        idx = list(layers)
    out: list[str] = []
    for i in idx:
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise ValueError(f"layer {i} is out of range for a model with {n} layers")
        for k in kinds:
            if k not in HOOK_KINDS:
                raise ValueError(f"unknown hook kind {k!r}; choose from {', '.join(HOOK_KINDS)}")
            name = f"blocks.{j}.hook_{k}"
            if name not in out:
                out.append(name)
    return out


def _first(output: object) -> torch.Tensor:
    return output[0] if isinstance(output, (tuple, list)) else output  # type: ignore[return-value]


#: ``tap(hook_name, hidden [batch, pos, d_model])``: read the hook's value, and return a tensor of the same
#: shape to replace it (or None to leave it unchanged).
Tap = Callable[[str, torch.Tensor], "torch.Tensor | None"]


def _post_hook(name: str, tap: Tap) -> Callable:
    """A forward hook handing the output (its first element for a tuple) to ``tap``."""
    def hook(_m: nn.Module, _i: object, out: object) -> object:
        if isinstance(out, (tuple, list)):
            new = tap(name, out[0])
            return None if new is None else (new, *out[1:])  # keep attention weights, caches, ...
        return tap(name, out)  # type: ignore[arg-type]
    return hook


def _pre_hook(name: str, tap: Tap) -> Callable:
    """A forward pre-hook handing the layer's input (positional or ``hidden_states=``) to ``tap``."""
    def hook(_m: nn.Module, args: tuple, kwargs: dict) -> object:
        new = tap(name, args[0] if args else kwargs["hidden_states"])
        if new is None:
            return None
        return ((new, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": new})
    return hook


@contextlib.contextmanager
def wire(model: nn.Module, names: Iterable[str], tap: Tap, layout: ModelLayout | None = None) -> Iterator[None]:
    """The one forward-hook wiring: while the block runs, each forward pass hands every named hook's value
    to ``tap(name, hidden)``, whose returned tensor (if any) replaces it.

    Capture (:func:`capture`, the scorer's :class:`probe.activations.CaptureSpec`), patching (its ``edits``)
    and steering (:func:`intervene`) are taps on this wiring. ``resid_pre`` is the layer's input (a
    pre-hook); every other name is a module's output. On a TransformerLens-bridged model (``--backend tl``)
    with no ``layout`` given, the hooks go on the bridge's own ``HookPoint`` s, named as TransformerLens
    names them. Hooks are removed on exit, even after an error; an unknown name raises ``KeyError`` before
    any hook is registered.
    """
    names = list(dict.fromkeys(names))
    points = hook_points(model) if layout is None else None
    if points is not None:
        missing = [n for n in names if n not in points]
        if missing:
            raise KeyError(f"TransformerBridge has no hook {missing[0]!r} (e.g. {', '.join(list(points)[:4])})")
        plan = [(points[n], False) for n in names]
    else:
        layout = layout or discover(model)
        plan = [layout.module_for(n) for n in names]
    handles = []
    try:
        for name, (module, is_input) in zip(names, plan):
            if is_input:
                handles.append(module.register_forward_pre_hook(_pre_hook(name, tap), with_kwargs=True))
            else:
                handles.append(module.register_forward_hook(_post_hook(name, tap)))
        yield
    finally:
        for h in handles:
            h.remove()


class Capture:
    """Collects ``{hook}@{position}`` rows per batch; see :func:`capture`."""

    def __init__(self, positions_fn: PositionsFn) -> None:
        self.positions_fn = positions_fn  # may be swapped between batches (new padding)
        self._rows: dict[str, list[np.ndarray]] = {}

    def _record(self, name: str, h: torch.Tensor) -> None:
        # h: [batch, pos, d_model]; each position's rows: [batch, d_model]
        for pos, rows in self.positions_fn(h.detach()).items():
            self._rows.setdefault(f"{name}@{pos}", []).append(rows.to("cpu", torch.float32).numpy())

    def pop(self) -> dict[str, np.ndarray]:
        """Everything recorded since the last pop, ``[rows, d_model]`` float32 per key."""
        out = {k: np.concatenate(v, axis=0) for k, v in self._rows.items()}
        self._rows = {}
        return out


@contextlib.contextmanager
def capture(model: nn.Module, names: Iterable[str], positions_fn: PositionsFn,
            layout: ModelLayout | None = None) -> Iterator[Capture]:
    """Keep only ``positions_fn``'s rows of each named hook (a read-only tap on :func:`wire`).

    Each forward inside the block appends ``[batch, d_model]`` CPU float32 rows
    per ``{hook}@{position}``; call :meth:`Capture.pop` after each batch.
    Hooks are removed on exit, even after an error. Runs record activations
    through the Runner instead (``capture=``, :class:`probe.activations.CaptureSpec`);
    this is for a forward pass of your own.
    """
    cap = Capture(positions_fn)

    def tap(name: str, h: torch.Tensor) -> None:
        cap._record(name, h)

    with wire(model, names, tap, layout or discover(model)):
        yield cap


#: ``fn(hidden [batch, pos, d_model]) -> new hidden`` (same shape); may edit a copy.
EditFn = Callable[[torch.Tensor], torch.Tensor]


@contextlib.contextmanager
def intervene(model: nn.Module, edits: dict[str, EditFn], layout: ModelLayout | None = None) -> Iterator[None]:
    """Replace hook outputs while the block runs: ``edits`` maps hook name to a function (a writing tap on
    :func:`wire`; steering is built on it).

    ``resid_pre`` edits change the layer's input; all others its output (the
    rest of a tuple output, such as attention weights, is kept).
    """
    with wire(model, edits, lambda name, h: edits[name](h), layout or discover(model)):
        yield
