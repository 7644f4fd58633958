"""Load any Hugging Face causal LM: a built-in name, a ``.gguf`` file, a local
directory or a hub id (offline when ``HF_HUB_OFFLINE=1``).

GGUF files are de-quantized by transformers, which is slow (~35 s for
SmolLM2-135M, ~110 s for Gemma-3-270M). The first load converts the file once
and caches the result as safetensors + tokenizer under
``$PROBE_CACHE/models/<sha256 prefix>/``; later loads read the cache (~1 s).

>>> from probe.models import load_model        # doctest: +SKIP
>>> lm = load_model("smollm2")                 # doctest: +SKIP
>>> lm.info()["file_sha256"][:8]               # doctest: +SKIP
'...'
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from probe.errors import ModelLoadError, did_you_mean
from probe.models.builtins import BUILTINS, builtin_gguf_path, check_installed
from probe.models.preflight import read_config
from probe.paths import cache_dir

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.

DTYPES = ("float32", "bfloat16", "float16", "auto")
CACHE_FORMAT = 1  # bump when the cache layout changes


@dataclass
class LoadedModel:
    """A model, its tokenizer and where they came from (for provenance)."""

    model: Any
    tokenizer: Any
    name: str
    source: str
    file_sha256: str | None = None
    revision: str | None = None
    dtype: str = "float32"
    device: str = "cpu"
    quantization: str | None = None
    extra: dict = field(default_factory=dict)
    #: what the caller asked for (``auto`` included) before it was resolved to ``device`` / ``dtype``
    device_requested: str | None = None
    dtype_requested: str | None = None
    #: the weights' own format when it is not plain float, e.g. ``GGUF Q4_1`` (de-quantized at load)
    weights_format: str | None = None

    @property
    def max_length(self) -> int | None:
        cfg = getattr(self.model, "config", None)
        cfg = getattr(cfg, "get_text_config", lambda: cfg)()
        n = getattr(cfg, "max_position_embeddings", None)
        return int(n) if n else None

    def info(self) -> dict:
        """Everything needed to say which model produced a number."""
        return {
            "name": self.name,
            "source": self.source,
            "file_sha256": self.file_sha256,
            "revision": self.revision,
            "dtype": self.dtype,
            "device": self.device,
            # what a reader of bias numbers must know: bitsandbytes at load, or the file's own quantization
            "quantization": self.quantization or (f"{self.weights_format}, de-quantized to {self.dtype}"
                                                  if self.weights_format else None),
            "weights_format": self.weights_format,
            "device_requested": self.device_requested,
            "dtype_requested": self.dtype_requested,
            "architecture": type(self.model).__name__,
            "n_parameters": sum(p.numel() for p in self.model.parameters()),
            "tokenizer": type(self.tokenizer).__name__,
            "vocab_size": len(self.tokenizer),
            **self.extra,
        }


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def resolve_device(device: str = "auto") -> str:
    """``auto``: ``cuda`` when a CUDA GPU is visible, else ``cpu``; an explicit device is checked.

    Apple's ``mps`` is used only when asked for: it has no float64, which the
    sampling-equivalent scores (:mod:`probe.scoring.sampler.sampling`) compute in.
    """
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(device, str) or not re.fullmatch(r"cpu|meta|(cuda|mps|xpu)(:\d+)?", device):
        raise ModelLoadError(f"unknown device {device!r}; choose auto, cpu, cuda, cuda:N, mps or xpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} requested but no CUDA GPU is available (torch {torch.__version__})")
    if device.startswith("mps") and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ModelLoadError(f"device {device!r} requested but Apple MPS is not available (torch {torch.__version__})")
    return device


def resolve_dtype(dtype: str, device: str) -> str:
    """The dtype name ``dtype`` means on ``device`` (already resolved).

    ``auto``: ``bfloat16`` on a CUDA GPU that supports it
    (``torch.cuda.is_bf16_supported()``: Ampere and later), else ``float32``
    (the CPU, MPS, older GPUs: float16 would be faster there but overflows on
    some models, which marks scores non-finite; ask for it with ``float16``).
    Tolerances of bfloat16 against float32: ``docs/scoring.md``.
    """
    import torch

    if dtype not in DTYPES:
        raise ModelLoadError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if dtype != "auto":
        return dtype
    if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bfloat16"
    return "float32"


def _resolve_device(device: str) -> str:  # kept for callers of the private name
    return resolve_device(device)


def _resolve_dtype(dtype: str, device: str):
    import torch

    name = resolve_dtype(dtype, device)
    return name, getattr(torch, name)


def load_model(
    name_or_path: str = "smollm2",
    *,
    device: str = "auto",
    dtype: str = "auto",
    load_in_8bit: bool = False,
    load_in_4bit: bool = False,
    device_map: str | dict | None = None,
    trust_remote_code: bool = False,
    revision: str | None = None,
    attn_implementation: str | None = None,
    allow_pickle_weights: bool = False,
    check_config: Callable[[Any], None] | None = None,
) -> LoadedModel:
    """Load a causal LM and its tokenizer, in eval mode, gradients off.

    ``name_or_path``: a built-in name (``smollm2``, ``gemma3-270m``), a path to a
    ``.gguf`` file, a local model directory, or a hub id (needs the hub or its
    local cache). ``trust_remote_code`` stays off unless asked. Weights are read as safetensors; pickle
    weights (``pytorch_model.bin``, ``*.pt``: loading a pickle can run code) only with
    ``allow_pickle_weights=True``. ``check_config(config)`` runs before any weight is read (it raises to refuse).

    ``device="auto"`` (default) takes the GPU when one is visible, else the CPU;
    ``dtype="auto"`` (default) takes bfloat16 on a GPU that supports it, else
    float32 (:func:`resolve_device`, :func:`resolve_dtype`). What was chosen is
    ``LoadedModel.device`` / ``.dtype`` (and in ``info()``, the provenance);
    what was asked for, ``device_requested`` / ``dtype_requested``.
    """
    asked_device, asked_dtype = device, dtype
    device = _resolve_device(device)
    dtype_name, torch_dtype = _resolve_dtype(dtype, device)
    quantization = _quantization(load_in_8bit, load_in_4bit)
    model_dir, source, file_sha, weights_format = _weights_source(name_or_path, allow_pickle_weights)
    kwargs = _load_kwargs(trust_remote_code, revision, allow_pickle_weights, attn_implementation, quantization,
                          load_in_8bit, torch_dtype, device, device_map)
    if check_config is not None and (config := read_config(model_dir, kwargs)) is not None:
        check_config(config)  # e.g. probe.scoring.engine.capabilities.check_supported: before any weight loads
    model, tokenizer = _from_pretrained(model_dir, torch_dtype, kwargs, name_or_path)
    if "device_map" not in kwargs:
        model.to(device)
    model.eval()
    model.requires_grad_(False)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    revision_seen = getattr(model.config, "_commit_hash", None) or revision
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=name_or_path,
        source=source if isinstance(model_dir, str) or file_sha else str(Path(model_dir).resolve()),
        file_sha256=file_sha,
        revision=revision_seen,
        dtype=dtype_name,
        device=str(next(model.parameters()).device),
        quantization=quantization,
        device_requested=asked_device,
        dtype_requested=asked_dtype,
        weights_format=weights_format,
    )


def _quantization(load_in_8bit: bool, load_in_4bit: bool) -> str | None:
    """``8bit``, ``4bit`` or None, as asked; an error for both, or for either without a CUDA GPU."""
    import torch

    quantization = "8bit" if load_in_8bit else "4bit" if load_in_4bit else None
    if load_in_8bit and load_in_4bit:
        raise ModelLoadError("choose one of load_in_8bit and load_in_4bit")
    if quantization and not torch.cuda.is_available():
        raise ModelLoadError(
            f"load_in_{quantization} uses bitsandbytes, which needs a CUDA GPU; none is available here. "
            "Use dtype float32/bfloat16 on CPU."
        )
    return quantization


def _weights_source(name_or_path: str, allow_pickle_weights: bool) -> tuple[Path | str, str, str | None, str | None]:
    """Where :func:`load_model` reads ``name_or_path`` from (a directory, or a hub id), the source it records,
    the GGUF file's sha256 and its weights format (None but for a GGUF file or a built-in)."""
    file_sha = weights_format = None
    source = name_or_path
    kind = check_model_source(name_or_path, allow_pickle_weights)
    if kind in ("builtin", "gguf"):
        from probe.models.gguf_info import file_type

        gguf = builtin_gguf_path(name_or_path) if kind == "builtin" else Path(name_or_path).expanduser()
        model_dir, file_sha = converted_gguf_dir(gguf)
        source = str(gguf) if kind == "builtin" else str(gguf.resolve())
        weights_format = " ".join(x for x in ("GGUF", file_type(gguf)) if x)
    else:  # a local directory, or a hub id resolved through the hub or its local cache
        model_dir = Path(name_or_path).expanduser() if kind == "dir" else name_or_path
    return model_dir, source, file_sha, weights_format


def _load_kwargs(trust_remote_code: bool, revision: str | None, allow_pickle_weights: bool,
                 attn_implementation: str | None, quantization: str | None, load_in_8bit: bool, torch_dtype: Any,
                 device: str, device_map: str | dict | None) -> dict[str, Any]:
    """:func:`load_model`'s keyword arguments to ``from_pretrained`` (weights format, attention, quantization,
    device map)."""
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code, "revision": revision}
    if not allow_pickle_weights:
        kwargs["use_safetensors"] = True  # never unpickle weights unless asked
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if quantization:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = (
            BitsAndBytesConfig(load_in_8bit=True)
            if load_in_8bit
            else BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch_dtype)
        )
        # one device unless a device_map is asked for: `--device cuda:1` (or a launcher rank's GPU) is kept,
        # never spread over every visible GPU
        kwargs["device_map"] = device_map or {"": single_device(device)}
    elif device_map is not None:
        kwargs["device_map"] = device_map
    return kwargs


def check_model_source(name_or_path: str, allow_pickle_weights: bool = False) -> str:
    """What ``name_or_path`` names, checked without reading weights: ``builtin`` (its packages installed),
    ``gguf`` (the file exists), ``dir`` (a model directory with a config.json and, unless pickles are allowed,
    safetensors weights) or ``hub`` (an id the hub or its local cache resolves at load time). A
    :class:`ModelLoadError` otherwise: a run over several models checks every one before the first loads.
    """

    name_or_path = str(name_or_path)
    if name_or_path in BUILTINS:
        check_installed(name_or_path)
        return "builtin"
    path = Path(name_or_path).expanduser()
    if name_or_path.endswith(".gguf"):
        if not path.is_file():
            raise ModelLoadError(f"GGUF file not found: {path}")
        return "gguf"
    if path.exists() and not path.is_dir():
        raise ModelLoadError(f"{path} is a file but not a .gguf file; give a model directory, a .gguf file or a hub id")
    if not path.exists():
        if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
            raise ModelLoadError(f"model path does not exist: {path}")
        return "hub"
    _check_model_dir(path, allow_pickle_weights)
    return "dir"


def check_model_resolvable(name_or_path: str, allow_pickle_weights: bool = False) -> str:
    """:func:`check_model_source`, and for a hub id that it can be found without loading anything: a valid
    repo id and, with the hub offline (``HF_HUB_OFFLINE=1``), its ``config.json`` in the local Hugging Face cache.
    A run over several models checks every one so before the first loads; a :class:`ModelLoadError` naming the
    model otherwise."""
    kind = check_model_source(name_or_path, allow_pickle_weights)
    if kind != "hub":
        return kind
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    name = str(name_or_path)
    where = f"built-in names: {', '.join(BUILTINS)}; or a local model directory, a .gguf file, or a hub id"
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise ModelLoadError(f"cannot load model {name!r}{did_you_mean(name, BUILTINS)}: no such file or "
                             f"directory, and not a valid hub id ({where})") from None
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")
    if offline and not isinstance(try_to_load_from_cache(name, "config.json"), str):
        raise ModelLoadError(f"cannot load model {name!r}{did_you_mean(name, BUILTINS)}: not on disk, and not in "
                             f"the local Hugging Face cache while the hub is offline (HF_HUB_OFFLINE=1); nothing "
                             f"was loaded ({where})")
    return kind


PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def _check_model_dir(model_dir: Path, allow_pickle_weights: bool) -> None:
    """A local model directory: it has a ``config.json``, and safetensors weights unless pickles are allowed."""
    if not model_dir.is_dir():
        return
    if not (model_dir / "config.json").is_file():
        raise ModelLoadError(f"cannot load model {str(model_dir)!r}: the directory has no config.json (a model "
                             "directory holds config.json, the weights and the tokenizer files)")
    files = [p.name for p in model_dir.iterdir() if p.is_file()]
    if allow_pickle_weights or any(n.endswith(".safetensors") for n in files):
        return
    pickles = sorted(n for n in files if n.endswith(PICKLE_SUFFIXES) and "training_args" not in n)
    if pickles:
        raise ModelLoadError(f"model directory {model_dir} holds only pickle weights ({', '.join(pickles[:3])}); "
                             "loading a pickle can run arbitrary code, so probe reads safetensors only. Convert the "
                             "weights to safetensors, or pass --allow-pickle-weights if you trust the files")


def single_device(device: str) -> str:
    """``device`` as one concrete device for ``device_map={"": ...}``: ``cuda`` -> ``cuda:<current>``.

    >>> single_device("cuda:1"), single_device("cpu")
    ('cuda:1', 'cpu')
    """
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return str(dev)


def _from_pretrained(model_dir: str | Path, torch_dtype, kwargs: dict, name: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(
            model_dir, trust_remote_code=kwargs["trust_remote_code"], revision=kwargs.get("revision")
        )
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype, **kwargs)
    except Exception as exc:  # OSError, ValueError, an UnpicklingError of a refused pickle, shape mismatches, ...
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        hint = (
            f"built-in names: {', '.join(BUILTINS)}; or a local model directory, a .gguf file, or a hub id"
            + (" already in the local Hugging Face cache (HF_HUB_OFFLINE=1)" if offline else "")
        )

        near = did_you_mean(str(name), BUILTINS)
        raise ModelLoadError(f"cannot load model {name!r}{near}: {exc.__class__.__name__}: "
                             f"{str(exc).splitlines()[0]} ({hint})") from exc
    return model, tokenizer


def converted_gguf_dir(gguf: Path) -> tuple[Path, str]:
    """Return the cached safetensors conversion of ``gguf`` (creating it once) and the file's sha256."""
    file_sha = sha256_file(gguf)
    target = cache_dir() / "models" / f"gguf-{file_sha[:24]}"
    stamp = target / "probe_conversion.json"
    if stamp.is_file():
        try:
            meta = json.loads(stamp.read_text())
            if meta.get("file_sha256") == file_sha and meta.get("format") == CACHE_FORMAT:
                return target, file_sha
        except ValueError:
            pass  # a damaged stamp: convert again
    from probe.progress import stage

    # announced, then a line every few seconds naming the step (reading Gemma's tokenizer alone takes a minute)
    with stage(f"probe: converting {gguf.name} once", plan=f"{CONVERSION_TIME}; later loads read the cached "
               f"copy in {target} in about a second") as progress:
        _convert_gguf(gguf, target, file_sha, progress.note)
    return target, file_sha


#: what the one-time GGUF conversion takes, as every message and document says it (measured on a busy 2-core CPU)
CONVERSION_TIME = "de-quantizing the GGUF weights: about 35 s for SmolLM2-135M, 2 min for Gemma-3-270M on a CPU"


def _convert_gguf(gguf: Path, target: Path, file_sha: str, note: Any = lambda step: None) -> None:
    """De-quantize once; save as a plain (non-GGUF) model that reloads in ~1 s.

    ``save_pretrained`` refuses GGUF-loaded models, so the same architecture is
    rebuilt from the config without ``quantization_config`` and the
    de-quantized state dict is loaded into it.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        note("reading the tokenizer from the GGUF file")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        note("reading and de-quantizing the weights")
        gguf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except Exception as exc:  # gguf raises a zoo of types for truncated/corrupt files
        raise ModelLoadError(f"cannot read GGUF file {gguf}: {exc.__class__.__name__}: {exc}") from exc
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    note("rebuilding the model without the GGUF quantization")
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(gguf_model.state_dict(), strict=False)
    missing = [k for k in missing if "lm_head" not in k]  # tied embeddings
    if missing or unexpected:
        raise ModelLoadError(f"GGUF conversion of {gguf} lost weights: missing={missing[:5]} unexpected={unexpected[:5]}")
    if getattr(config, "tie_word_embeddings", False):
        plain.tie_weights()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".convert-"))
    try:
        note("saving the converted copy")
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "probe_conversion.json").write_text(
            json.dumps({"format": CACHE_FORMAT, "file_sha256": file_sha, "gguf_file": str(gguf)}, indent=2)
        )
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
