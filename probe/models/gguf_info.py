"""What a GGUF file says about its own weights: the quantization it was written with (``general.file_type``).

probe de-quantizes GGUF weights to float (:mod:`probe.models.loader`), but the bias numbers are those of the
quantized model, so the provenance and the runs table say which: ``GGUF Q4_1, de-quantized to float32``.

``gguf.GGUFReader`` builds every field, the tokenizer's 50,000 strings included (10 s for SmolLM2-135M on a busy
CPU); this reads the header's key-value pairs only, skipping values it does not need, and names the type with
the ``gguf`` package's own enums.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

import gguf

# Imports inside functions below are on purpose: they import optional packages (extras), loaded only when used.

__all__ = ["file_type", "describe"]

#: GGUF value types -> struct format of a scalar (8: string, 9: array are handled apart)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class _Stop(Exception):
    """The header is not what GGUF says it is (truncated, or lengths beyond the file)."""


def file_type(path: str | Path) -> str | None:
    """The quantization a GGUF file's weights were written with, e.g. ``Q4_1`` or ``Q4_K_M`` (from
    ``general.file_type``, named as llama.cpp names it); None when the header has no file type or cannot be read.
    """

    try:
        with open(path, "rb") as f:
            value = _find(f, Path(path).stat().st_size, "general.file_type")
    except (OSError, _Stop, struct.error):
        return None
    if not isinstance(value, int):
        return None
    try:
        name = gguf.LlamaFileType(value).name
    except ValueError:
        return f"file type {value}"
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def describe(path: str | Path, dtype: str) -> str:
    """``GGUF Q4_1, de-quantized to float32``: what the provenance and the runs table say of a GGUF model."""
    kind = file_type(path)
    return f"GGUF {kind}, de-quantized to {dtype}" if kind else f"GGUF, de-quantized to {dtype}"


def _find(f: BinaryIO, size: int, wanted: str) -> object:
    if f.read(4) != b"GGUF":
        raise _Stop("not a GGUF file")
    (version,) = struct.unpack("<I", f.read(4))
    count = "<I" if version == 1 else "<Q"
    struct.unpack(count, f.read(struct.calcsize(count)))  # tensors
    (n_kv,) = struct.unpack(count, f.read(struct.calcsize(count)))
    for _ in range(n_kv):
        key = _string(f, size, count, keep=True)
        (vtype,) = struct.unpack("<I", f.read(4))
        value = _value(f, size, count, vtype, keep=key == wanted)
        if key == wanted:
            return value
    return None


def _string(f: BinaryIO, size: int, count: str, keep: bool) -> str | None:
    (n,) = struct.unpack(count, f.read(struct.calcsize(count)))
    if f.tell() + n > size:
        raise _Stop("a string runs past the end of the file")
    if not keep or n > 1 << 16:
        f.seek(n, 1)
        return None
    return f.read(n).decode("utf-8", "replace")


def _value(f: BinaryIO, size: int, count: str, vtype: int, keep: bool) -> object:
    if vtype in _SCALARS:
        fmt = "<" + _SCALARS[vtype]
        (v,) = struct.unpack(fmt, f.read(struct.calcsize(fmt)))
        return v
    if vtype == 8:
        return _string(f, size, count, keep)
    if vtype == 9:
        (etype,) = struct.unpack("<I", f.read(4))
        (n,) = struct.unpack(count, f.read(struct.calcsize(count)))
        if etype in _SCALARS:  # a fixed-size array: skipped in one seek
            step = struct.calcsize("<" + _SCALARS[etype]) * n
            if f.tell() + step > size:
                raise _Stop("an array runs past the end of the file")
            f.seek(step, 1)
            return None
        for _ in range(n):  # strings or nested arrays: one by one, never past the file
            _value(f, size, count, etype, keep=False)
            if f.tell() > size:
                raise _Stop("an array runs past the end of the file")
        return None
    raise _Stop(f"unknown value type {vtype}")
