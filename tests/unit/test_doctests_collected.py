"""The docstring examples of probe/ run with the suite: pytest collects them (``--doctest-modules``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_pytest_collects_the_doctests_of_the_package():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    opts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--doctest-modules" in opts["addopts"].split()
    assert "probe" in opts["testpaths"]


def test_no_standalone_skip_directive():
    # `>>> # doctest: +SKIP` on a line of its own is a collection error, not a skip: the directive
    # belongs on the example's own line.
    bad = [str(p.relative_to(ROOT)) for p in (ROOT / "probe").rglob("*.py")
           if re.search(r"^\s*>>> #\s*doctest:", p.read_text(encoding="utf-8"), flags=re.M)]
    assert bad == []
