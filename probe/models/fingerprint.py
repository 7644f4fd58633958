"""The model fingerprint: what about a loaded model can change a score, as named parts and one sha256.

Weights identity (the GGUF's sha256; else the sha256 of the weight files in the
model directory; else the hub commit; else the bytes of the in-memory tensors),
the model config, the tokenizer, dtype, quantization, attention implementation,
device *type* (CPU and CUDA kernels give different float noise), the torch and
transformers ``major.minor`` versions and the scoring engine's numerics version
(given by the caller). Records carry its first 12 characters; the score cache
and the resume check key on it (``docs/reliability.md``).

>>> combine_parts({"b": "2", "a": "1"}) == combine_parts({"a": "1", "b": "2"})
True
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
import transformers

from probe.models.builtins import builtin_gguf_path
from probe.models.loader import check_model_source


__all__ = ["WEIGHT_SUFFIXES", "combine_parts", "fingerprint_parts", "model_fingerprint", "source_identity",
           "tokenizer_fingerprint", "weights_identity"]


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt")


def model_fingerprint(lm: Any, engine: int | str) -> str:
    """sha256 (hex) identifying everything about ``lm`` that can change a score.

    ``lm`` is a :class:`probe.models.LoadedModel` (or anything with ``.model``
    and ``.tokenizer``); ``engine`` the scoring engine's numerics version
    (:data:`probe.scoring.cache.ENGINE_VERSION`, passed by the caller: models
    never import the engine). See :func:`fingerprint_parts` for what goes in.
    """
    return combine_parts(fingerprint_parts(lm, engine))


def combine_parts(parts: dict[str, str]) -> str:
    """The fingerprint of already computed :func:`fingerprint_parts` (saves hashing a tokenizer twice)."""
    return _sha(_canonical(parts))


def fingerprint_parts(lm: Any, engine: int | str) -> dict[str, str]:
    """The named parts of :func:`model_fingerprint` (short values or sha256 hex).

    Kept apart so that a mismatch can say *what* differs (e.g. ``dtype``).
    """

    model, tok = lm.model, lm.tokenizer
    params = list(model.parameters())
    devices = sorted({p.device.type for p in params}) or ["cpu"]
    # the declared dtype (compute dtype of a quantized model) and the tensors' actual ones (a later .to())
    actual = sorted({str(p.dtype).replace("torch.", "") for p in params})
    dtype = f"{getattr(lm, 'dtype', None)}/{','.join(actual)}"
    cfg = getattr(model, "config", None)
    return {
        "weights": weights_identity(lm),
        "config": _sha(_canonical(_config_dict(cfg))),
        "tokenizer": tokenizer_fingerprint(tok),
        "dtype": dtype,
        "quantization": str(getattr(lm, "quantization", None)),
        "attention": str(getattr(cfg, "_attn_implementation", None)),
        "device": ",".join(devices),
        "torch": _major_minor(torch.__version__),
        "transformers": _major_minor(transformers.__version__),
        "engine": str(engine),
    }


def weights_identity(lm: Any) -> str:
    """Which weights: ``gguf:<sha256>``, ``files:<sha256>``, ``hub:<id>@<commit>`` or ``tensors:<sha256>``.

    Files are hashed once per process (memo keyed on path, size and mtime).
    In-memory tensors are hashed when the model came from no file; the result
    is memoized on ``lm`` together with every parameter's in-place version
    counter, so editing a weight in place gives a new identity.
    """
    if getattr(lm, "file_sha256", None):
        return f"gguf:{lm.file_sha256}"
    source = Path(str(getattr(lm, "source", "") or "")).expanduser()
    files = sorted(p for p in source.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file()) if source.is_dir() else []
    if files:
        return "files:" + _sha(_canonical({p.name: _file_sha(p) for p in files}))
    revision = str(getattr(lm, "revision", None) or "")
    if len(revision) == 40 and all(c in "0123456789abcdef" for c in revision) and not source.exists():
        return f"hub:{lm.source}@{revision}"  # a commit pins the files
    return "tensors:" + _tensor_sha(lm)


def source_identity(name_or_path: str) -> str | None:
    """The :func:`weights_identity` the model ``name_or_path`` will have once loaded, from its files alone (no
    weights are read into memory): ``gguf:<sha256>`` for a built-in or a GGUF file, ``files:<sha256>`` for a
    model directory, ``hub:<id>`` (no commit: that needs the hub) for a hub id; None when only loading can tell.

    Lets a run refuse another model's output directory before spending a minute loading this one.
    """

    kind = check_model_source(str(name_or_path), allow_pickle_weights=True)  # pickles are refused at load
    if kind == "builtin":
        return f"gguf:{_file_sha(builtin_gguf_path(str(name_or_path)))}"
    path = Path(str(name_or_path)).expanduser()
    if kind == "gguf":
        return f"gguf:{_file_sha(path)}"
    if kind == "dir":
        files = sorted(p for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
        return "files:" + _sha(_canonical({p.name: _file_sha(p) for p in files})) if files else None
    return f"hub:{name_or_path}"


def same_source(recorded: str | None, expected: str | None) -> bool:
    """Whether a recorded :func:`weights_identity` can be the one :func:`source_identity` expects: False only
    when the loaded model's fingerprint would surely differ; True when either cannot tell (in-memory tensors).

    >>> same_source("gguf:ab", "gguf:ab"), same_source("gguf:ab", "gguf:cd"), same_source("hub:x@0123", "hub:x")
    (True, False, True)
    """
    if not recorded or not expected or recorded.startswith("tensors:"):
        return True
    kind, _, value = recorded.partition(":")
    want_kind, _, want = expected.partition(":")
    if kind == "hub":
        value = value.rsplit("@", 1)[0]  # the commit is known only once the hub has been asked
    return (kind, value) == (want_kind, want)


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """sha256 of a tokenizer's full definition (vocab, merges, added and special tokens, pre/post-processing)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        body = backend.to_str()
    else:  # a slow (Python) tokenizer: its vocabulary is what we can see
        body = _canonical(sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]))
    special = {k: str(v) for k, v in getattr(tokenizer, "special_tokens_map", {}).items()}
    return _sha(_canonical({"class": type(tokenizer).__name__, "body": _sha(body), "special": special}))


_FILE_MEMO: dict[tuple[str, int, int], str] = {}


def _file_sha(path: Path) -> str:
    st = path.stat()
    memo_key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if memo_key not in _FILE_MEMO:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        _FILE_MEMO[memo_key] = digest.hexdigest()
    return _FILE_MEMO[memo_key]


def _tensor_sha(lm: Any) -> str:
    """Hash every state-dict tensor (name, dtype, shape, bytes); ~1 s per GB, memoized on ``lm``."""

    state = lm.model.state_dict()
    # data pointer + in-place version counter: changes when a tensor is replaced or edited in place
    stamp = tuple((name, t.data_ptr(), t._version) for name, t in sorted(state.items()))
    memo = getattr(lm, "_probe_tensor_sha", None)
    if memo is not None and memo[0] == stamp:
        return memo[1]
    digest = hashlib.sha256()
    for name, t in sorted(state.items()):
        flat = t.detach().to("cpu").contiguous().reshape(-1)
        digest.update(_canonical([name, str(t.dtype), list(t.shape)]).encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    value = digest.hexdigest()
    try:
        lm._probe_tensor_sha = (stamp, value)
    except AttributeError:  # an object with __slots__: no memo
        pass
    return value


def _config_dict(cfg: Any) -> dict:
    if cfg is None:
        return {}
    d = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(vars(cfg))
    # where the files were and which release wrote them do not change the numbers
    return {k: v for k, v in d.items() if k not in ("_name_or_path", "transformers_version", "_commit_hash")}


def _major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
