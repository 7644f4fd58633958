"""Where benchmark data sets live on disk.

Real benchmark data is never shipped with probe. ``probe data fetch NAME``
stores a data set under ``$PROBE_CACHE/data/NAME`` (default
``~/.cache/probe/data/NAME``). ``PROBE_DATA`` points at a directory laid out the
same way (``bbq/``, ``bharatbbq/``, ``hbb/``, ``crows_pairs/``, ``cmp_iso/``) and
takes precedence; the test suite sets it to ``../shared/data``.
"""

from __future__ import annotations

import os
from pathlib import Path

from probe.errors import ProbeError
from probe.paths import cache_dir


def data_root() -> Path:
    env = os.environ.get("PROBE_DATA")
    return Path(env).expanduser() if env else cache_dir() / "data"


def dataset_dir(name: str) -> Path:
    """The directory of data set ``name``; a clear error if it is not there."""
    path = data_root() / name
    if not path.is_dir():
        raise ProbeError(
            f"data set {name!r} not found at {path}. Fetch it with `probe data fetch {name}` "
            f"(or set PROBE_DATA to a directory holding {name}/)"
        )
    return path
