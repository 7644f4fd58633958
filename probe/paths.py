"""probe's cache root, shared by every layer that keeps files there.

``$PROBE_CACHE`` (default ``~/.cache/probe``) holds fetched data sets
(``data/``, see :mod:`probe.data.paths`) and converted models (``models/``,
``gguf/``, see :mod:`probe.models.loader`). It sits at the bottom of the
package so that models and data need not import each other for it.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """probe's cache root: ``$PROBE_CACHE`` or ``~/.cache/probe``."""
    return Path(os.environ.get("PROBE_CACHE") or Path.home() / ".cache" / "probe").expanduser()
