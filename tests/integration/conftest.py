"""Integration tests: the real smollm2, converted from its GGUF file once per machine.

Tests that load smollm2 through the ``smollm2`` fixture get the conversion first (``smollm2_converted``,
tests/conftest.py); the tests that only start ``probe`` commands on it get it here.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _smollm2_before_integration(request):
    """Before each test marked ``integration`` (others in this folder use the tiny model only)."""
    if request.node.get_closest_marker("integration") is not None:
        request.getfixturevalue("smollm2_converted")
