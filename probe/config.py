"""Experiment configs: YAML (``yaml.safe_load``) into frozen dataclasses, unknown keys rejected.

>>> import dataclasses
>>> @dataclasses.dataclass(frozen=True)
... class Cfg:
...     model: str = "smollm2"
>>> load_config(None, Cfg, {"model": "gemma3-270m"}).model
'gemma3-270m'
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypeVar

import yaml

from probe.errors import InputError

T = TypeVar("T")


def load_config(path: str | Path | None, cls: type[T], overrides: dict[str, Any] | None = None) -> T:
    """Read ``path`` (may be None: defaults), apply non-None ``overrides``, build ``cls``.

    Errors (missing file, bad YAML, not a mapping, unknown key, wrong value)
    are :class:`InputError` naming the file and the key.
    """
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise InputError(path, None, None, f"cannot read YAML config ({exc})") from None
        if not isinstance(raw, dict):
            raise InputError(path, None, None, "config must be a mapping of keys to values")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(map(str, raw)) - known)
    if unknown:
        raise InputError(path or "<config>", None, unknown[0], f"unknown key; known keys: {', '.join(sorted(known))}")
    raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return cls(**raw)
    except (TypeError, ValueError) as exc:
        raise InputError(path or "<config>", None, None, str(exc)) from None
