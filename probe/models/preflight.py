"""What a model's config says before its weights are read: :func:`probe.models.load_model` reads the config
first, so a model that cannot be scored (``check_config``, e.g. an encoder-decoder) is refused in one line
before any weight loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.


def read_config(model_dir: str | Path, kwargs: dict[str, Any]) -> Any:
    """The config of ``model_dir`` (a directory or a hub id) under the loader's ``trust_remote_code`` and
    ``revision``; None where it does not read (the load itself then reports why)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(model_dir, trust_remote_code=kwargs.get("trust_remote_code", False),
                                          revision=kwargs.get("revision"))
    except Exception:  # noqa: BLE001  (reported with the load itself)
        return None
