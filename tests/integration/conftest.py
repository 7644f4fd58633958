"""Integration tests: the real smollm2, converted from its GGUF file once per machine.

The first load of ``smollm2`` converts the GGUF weights into ``$PROBE_CACHE`` (about a minute). Under
pytest-xdist two workers could start that conversion together, and the second one replaces the folder
the first is reading; one worker converts, under a file lock, before any integration test runs.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _smollm2_before_integration(request):
    """Before the first test marked ``integration`` (others in this folder use the tiny model only)."""
    if request.node.get_closest_marker("integration") is not None:
        request.getfixturevalue("smollm2_converted")


@pytest.fixture(scope="session")
def smollm2_converted(tmp_path_factory):
    """Convert smollm2 once (under a lock shared by the workers) so that every later load reads the cache."""
    from filelock import FileLock

    try:
        from probe.models.builtins import builtin_gguf_path
        from probe.models.loader import converted_gguf_dir

        gguf = builtin_gguf_path("smollm2")
    except Exception:  # pragma: no cover - no wheel: the smollm2 fixture skips, saying why
        return
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    with FileLock(str(root / "smollm2-convert.lock")):
        converted_gguf_dir(gguf)
