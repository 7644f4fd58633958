"""``batch_size="auto"`` / ``token_budget="auto"``: how many tokens one forward pass may hold.

The scorer bounds every forward pass by a row count (``batch_size``) and a
number of padded tokens (``token_budget``, the parent cache's columns
included). ``auto`` derives them from the memory free on the model's device
and the model's shape:

- **free memory**: on a CUDA GPU ``torch.cuda.mem_get_info`` (free on the
  device) plus what torch's allocator holds but does not use; on Apple MPS the
  recommended working set minus what the driver holds; on the CPU the
  available RAM (``psutil``), when psutil is installed.
- **bytes per token** of a pass (:class:`ModelShape`): its key/value cache,
  counted ``KV_COPIES`` times (the scorer holds one merged cache block per
  tree level while a pass builds a row-selected copy of its parent's and
  concatenates its own to it), plus the activations of one decoder layer at a
  time (inference mode frees the previous layer's): residual stream, the
  attention projections, the MLP's three ``d_ff`` tensors, and the attention
  scores when the attention is ``eager`` (``heads x width``, softmax in
  float32) or just the mask otherwise (SDPA and flash kernels never build the
  score matrix).
- **the budget**: ``HEADROOM`` of the free memory, less a reserve for the
  float32 unembedding of 256 positions at a time (``engine.HEAD_CHUNK``),
  divided by the bytes per token at a reference width of ``REFERENCE_WIDTH``
  columns.

On a GPU, ``batch_size="auto"`` sets no row limit of its own: the token
budget decides how many rows fit. On the CPU a bigger pass is not faster, so
``auto`` keeps the fixed defaults (16 rows, 8192 tokens), lowered only when the
available RAM cannot hold them.

The estimate is a starting point, not a promise: a pass that still runs out of
memory is split in half and retried, and the scorer keeps at most half as many
rows and tokens per pass from then on (:meth:`probe.scoring.Scorer._back_off`);
no request is lost or scored twice, and the scores do not change beyond
floating-point rounding of differently shaped products.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

AUTO = "auto"
DEFAULT_BATCH_SIZE = 16
DEFAULT_TOKEN_BUDGET = 8192
HEADROOM = 0.85  # share of the free memory a pass may plan to use (allocator fragmentation, kernels' workspaces)
KV_COPIES = 4  # key/value caches alive per token: the blocks of two tree levels, a pass's selected copy and its extension
REFERENCE_WIDTH = 1024  # columns (cache + segment) the attention term is sized for; longer rows fall back on OOM back-off
HEAD_CHUNK = 256  # positions unembedded at once (probe.scoring.engine.HEAD_CHUNK)
MIN_TOKEN_BUDGET = 256
MAX_TOKEN_BUDGET = 1 << 20  # a sanity cap: beyond it no GPU gains anything


@dataclass(frozen=True)
class ModelShape:
    """What the memory of a forward pass depends on."""

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab: int
    dtype_bytes: int
    eager: bool

    @classmethod
    def of(cls, model: Any, dtype: Any = None) -> "ModelShape":
        """Read the shape from a Hugging Face model's (text) config; ``dtype`` the compute dtype
        (default: the first floating-point parameter's; a quantized model's compute dtype is its
        ``LoadedModel.dtype``)."""
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        d_model = int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "n_embd", 0) or 0)
        n_heads = int(getattr(cfg, "num_attention_heads", 0) or getattr(cfg, "n_head", 0) or 1)
        n_kv = int(getattr(cfg, "num_key_value_heads", 0) or n_heads)
        head_dim = widest_head(cfg, int(_read(cfg, "head_dim") or (d_model // n_heads if d_model else 0)))
        d_ff = int(getattr(cfg, "intermediate_size", 0) or getattr(cfg, "n_inner", 0) or 4 * d_model)
        n_layers = int(getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layer", 0) or 1)
        vocab = int(getattr(cfg, "vocab_size", 0) or 0)
        if dtype is None:
            dtype = next((p.dtype for p in model.parameters() if p.dtype.is_floating_point), torch.float32)
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        attn = str(getattr(cfg, "_attn_implementation", None) or getattr(model.config, "_attn_implementation", "") or "")
        return cls(n_layers, d_model, n_heads, n_kv, head_dim, d_ff, vocab,
                   torch.tensor([], dtype=dtype).element_size(), attn == "eager")

    @property
    def kv_bytes_per_token(self) -> int:
        """Keys and values of one token over every layer."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.dtype_bytes

    def activation_bytes_per_token(self, width: int = REFERENCE_WIDTH) -> int:
        """Peak activations of one token inside one decoder layer, with ``width`` attended columns."""
        b = self.dtype_bytes
        stream = 3 * self.d_model * b  # residual, normed input, attention / MLP output
        qkv = (self.n_heads + 2 * self.n_kv_heads) * self.head_dim * b
        mlp = 3 * self.d_ff * b  # gate, up, their product
        scores = self.n_heads * width * (b + 4) if self.eager else width * 4  # eager scores + float32 softmax, or the mask
        return stream + qkv + mlp + scores

    def bytes_per_token(self, width: int = REFERENCE_WIDTH) -> int:
        return KV_COPIES * self.kv_bytes_per_token + self.activation_bytes_per_token(width)

    @property
    def head_reserve(self) -> int:
        """The float32 unembedding of one chunk: logits, their exp for the log-sum-exp, the result."""
        return 3 * HEAD_CHUNK * self.vocab * 4


def widest_head(cfg: Any, head_dim: int) -> int:
    """The widest attention head of any layer: ``head_dim``, a global layers' ``global_head_dim`` and the
    per-layer overrides (``per_layer_config``, Gemma 4), so a budget sized by it holds every layer's keys.

    >>> from types import SimpleNamespace
    >>> widest_head(SimpleNamespace(per_layer_config={"05": {"head_dim": 512}}, global_head_dim=None), 256)
    512
    """
    dims = [head_dim, int(_read(cfg, "global_head_dim") or 0)]
    per_layer = _read(cfg, "per_layer_config")  # {"05": {...}} as written, or one config per layer (5.25's view)
    layers = per_layer.values() if isinstance(per_layer, dict) else per_layer if per_layer is not None else ()
    for layer in layers:
        dims.append(int((layer.get("head_dim") if isinstance(layer, dict) else _read(layer, "head_dim")) or 0))
    return max(dims)


def _read(cfg: Any, name: str) -> Any:
    """``cfg.name``, or None where it is missing or varies by layer (transformers 5.25 raises on reading such
    an attribute of the whole config: Gemma 4's ``head_dim``; :func:`widest_head` reads each layer's)."""
    try:
        return getattr(cfg, name, None)
    except Exception:  # noqa: BLE001  (AmbiguousGlobalPerLayerAttributeError, not an AttributeError)
        return None


def model_devices(model: Any) -> list[torch.device]:
    return sorted({p.device for p in model.parameters()}, key=str)


def free_bytes(device: torch.device | str) -> int | None:
    """Memory a pass may use on ``device``; None when it cannot be known (CPU without psutil)."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        # blocks torch's caching allocator holds but no tensor uses are free for the next pass too
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + max(cached, 0))
    if device.type == "mps":
        mps = getattr(torch, "mps", None)
        if mps is not None and hasattr(mps, "recommended_max_memory"):
            return max(0, int(mps.recommended_max_memory()) - int(mps.driver_allocated_memory()))
        return None
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


@dataclass(frozen=True)
class BatchPlan:
    """The batch size and token budget a scorer runs with, and how they were found (provenance)."""

    batch_size: int
    token_budget: int
    requested_batch_size: int | str
    requested_token_budget: int | str
    device: str
    free_bytes: int | None = None
    bytes_per_token: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def fit_token_budget(shape: ModelShape, free: int, width: int = REFERENCE_WIDTH) -> int:
    """Padded tokens of one pass that ``free`` bytes hold (at least ``MIN_TOKEN_BUDGET``: below it the
    out-of-memory back-off takes over)."""
    usable = HEADROOM * free - shape.head_reserve
    n = int(usable // max(1, shape.bytes_per_token(width)))
    return max(MIN_TOKEN_BUDGET, min(MAX_TOKEN_BUDGET, n))


def plan(lm: Any, batch_size: int | str = DEFAULT_BATCH_SIZE, token_budget: int | str = DEFAULT_TOKEN_BUDGET,
         free: int | None = None) -> BatchPlan:
    """Resolve ``batch_size`` / ``token_budget`` (positive ints or ``"auto"``) for the model of ``lm``.

    ``free``: bytes to plan for instead of asking the device (tests, or a
    share of a GPU used by other processes).

    >>> from types import SimpleNamespace
    >>> plan(SimpleNamespace(model=None), 8, 4096).token_budget
    4096
    """
    _check("batch_size", batch_size)
    _check("token_budget", token_budget)
    if batch_size != AUTO and token_budget != AUTO:
        devices = model_devices(lm.model) if hasattr(getattr(lm, "model", None), "parameters") else []
        return BatchPlan(int(batch_size), int(token_budget), batch_size, token_budget,
                         str(devices[0]) if devices else "unknown")
    model = lm.model
    devices = model_devices(model)
    device = devices[0] if devices else torch.device("cpu")
    on_cpu = all(d.type == "cpu" for d in devices)
    try:
        shape: ModelShape | None = ModelShape.of(model, getattr(lm, "dtype", None) if getattr(lm, "quantization", None)
                                                 else None)
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):  # a wrapper without a readable config
        shape = None
    if free is None:
        # a model spread over several GPUs: plan for the fullest one
        known = [f for f in (free_bytes(d) for d in devices or [device]) if f is not None]
        free = min(known) if known else None
    fit = fit_token_budget(shape, free) if free is not None and shape is not None else None
    if token_budget == AUTO:
        if on_cpu:
            budget = DEFAULT_TOKEN_BUDGET if fit is None else min(DEFAULT_TOKEN_BUDGET, fit)
        else:
            budget = fit if fit is not None else DEFAULT_TOKEN_BUDGET
    else:
        budget = int(token_budget)
    if batch_size == AUTO:
        rows = min(DEFAULT_BATCH_SIZE, budget) if on_cpu else budget  # GPU: the token budget decides
    else:
        rows = int(batch_size)
    return BatchPlan(rows, budget, batch_size, token_budget, str(device), free,
                     shape.bytes_per_token() if fit is not None and shape is not None else None)


def _check(name: str, value: Any) -> None:
    if value == AUTO:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer or 'auto', got {value!r}")


def generation_batch_size(batch: BatchPlan) -> int:
    """Rows per ``generate`` call for a run whose scorer uses ``batch``: generation keeps a growing
    cache per row and has no out-of-memory back-off, so an automatic plan on a GPU gives it at most
    64 rows (and no more than a quarter of the scoring budget at 512 tokens a row); on the CPU the
    scoring batch size (16), as before ``auto`` existed, so greedy chains do not change."""
    if batch.requested_batch_size != AUTO or batch.device.startswith("cpu"):
        return batch.batch_size
    return max(1, min(64, batch.batch_size, batch.token_budget // 2048 or 1))
