"""The versions a number was made with, and whether they are the tested ones.

``requirements/cpu.lock`` fixes every package of the tested install; the
packages that decide probe's numbers (:data:`TRACKED`) are also shipped with
the package (``probe/resources/locked_versions.json``, written by
``tools/lock.sh`` and checked against the lock by a test), so an installed
probe knows them without the repository. Run records name the installed
versions (``provenance.json``), a run warns once when a tracked package
differs from the lock, and ``probe --version`` prints both.
"""

from __future__ import annotations

import json
import warnings
from functools import lru_cache
from importlib import metadata, resources
from typing import Iterable

#: The packages whose release can change a score: the engine, its model code, the numbers, the TL adapter.
TRACKED = ("torch", "transformers", "accelerate", "transformer-lens", "numpy")
LOCK_RESOURCE = "locked_versions.json"


class VersionDriftWarning(UserWarning):
    """A tracked package's installed release is not the one in probe's lock."""


def installed_versions(names: Iterable[str] = ("probe",) + TRACKED) -> dict[str, str | None]:
    """``name -> installed version`` (None when the package is not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


@lru_cache(maxsize=1)
def locked_versions() -> dict[str, str]:
    """``name -> version`` of the :data:`TRACKED` packages in ``requirements/cpu.lock`` (empty if not shipped)."""
    try:
        text = resources.files("probe").joinpath("resources", LOCK_RESOURCE).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        return {}
    return dict(json.loads(text)["versions"])


def _release(version: str) -> str:
    """The public release without a local build label: ``2.13.0+cpu`` and ``2.13.0+cu128`` are one release."""
    return version.split("+", 1)[0]


def lock_differences(installed: dict[str, str | None] | None = None,
                     locked: dict[str, str] | None = None) -> dict[str, dict[str, str | None]]:
    """Tracked packages whose installed release differs from the lock: ``name -> {installed, locked}``.

    A package the lock names but that is not installed counts only if it is one probe always needs
    (transformer-lens is optional: absent is not a difference)."""
    installed = installed_versions() if installed is None else installed
    locked = locked_versions() if locked is None else locked
    out: dict[str, dict[str, str | None]] = {}
    for name in TRACKED:
        want, have = locked.get(name), installed.get(name)
        if want is None or (have is None and name == "transformer-lens"):
            continue
        if have is None or _release(have) != _release(want):
            out[name] = {"installed": have, "locked": want}
    return out


_warned = False


def warn_if_not_locked() -> dict[str, dict[str, str | None]]:
    """Warn (once per process) when tracked versions differ from the lock; returns the differences."""
    global _warned
    diff = lock_differences()
    if diff and not _warned:
        _warned = True
        listed = ", ".join(f"{n} {d['installed'] or 'missing'} (lock: {d['locked']})" for n, d in diff.items())
        warnings.warn(f"package versions differ from probe's tested lock: {listed}; numbers may differ from "
                      f"published ones (install with: pip install -r requirements/cpu.lock; docs/reliability.md)",
                      VersionDriftWarning, stacklevel=2)
    return diff


def version_report() -> str:
    """What ``probe --version`` prints: probe's version, then each tracked package, installed vs locked."""
    locked = locked_versions()
    installed = installed_versions(TRACKED)
    diff = lock_differences(installed, locked)
    lines = [f"probe {installed_versions(('probe',))['probe'] or 'unknown'}"]
    for name in TRACKED:
        have = installed.get(name) or "not installed"
        note = f"  (lock: {locked[name]})" if name in diff else ""
        lines.append(f"  {name:<17}{have}{note}")
    lines.append("  all tracked packages match the lock" if not diff and locked else
                 "  differs from the lock: see docs/reliability.md" if diff else "  no lock shipped with this install")
    return "\n".join(lines)
