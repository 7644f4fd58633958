"""What produced a number: model, data, code, config, machine.

Timestamps live only here (``provenance.json``), never in records or summaries,
so re-running a config gives byte-identical result files.
"""

from __future__ import annotations

import datetime as _dt
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from probe.io import file_sha256
from probe.versions import locked_versions, warn_if_not_locked

LIBRARIES = ("torch", "transformers", "accelerate", "transformer-lens", "numpy", "scipy", "pandas", "scikit-learn",
             "tokenizers", "gguf")


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in ("probe",) + LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def provenance(lm: Any = None, config: Any = None, data_files: Iterable[str | Path] = (), **extra: Any) -> dict:
    """A JSON-ready record of everything needed to reproduce a run."""
    files = {}
    for f in data_files:
        p = Path(f)
        files[str(p)] = file_sha256(p) if p.is_file() else None
    info: dict[str, Any] = {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": library_versions(),
        # the tested set (requirements/cpu.lock) and the tracked packages that differ from it (warned once)
        "lock": {"versions": locked_versions(), "differs": warn_if_not_locked()},
        "model": lm.info() if lm is not None and hasattr(lm, "info") else None,
        "config": config,
        "data_files": files,
    }
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        from probe.scoring.engine.host_memory import state

        info["host_memory"] = state()  # glibc keeps freed blocks on a CPU (changes time, not numbers)
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:  # pragma: no cover
        pass
    info.update(extra)
    return info
