"""Each function of probe/ reads in one screen (none is over 60 lines) and each module is one concept (none is
over 450 lines).

A function's length runs from its ``def`` line to its last line (docstring and comments included), read
with :mod:`ast`, so the check needs no import of the package; a file's is its line count.
"""

from __future__ import annotations

import ast
from fnmatch import fnmatch
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parents[2] / "probe"
LIMIT = 60
FILE_LIMIT = 450

#: Files still being split while the whole-package check went in, as paths under probe/ (``*`` spans folders).
#: Each entry is work in progress elsewhere: delete it when its file lands within the limits; the list is
#: meant to end empty.
STILL_BEING_SPLIT = (
    "scoring/scorer.py",
    "scoring/engine/*",
    "scoring/parse/*",
    "tasks/*",
    "commands/run.py",
    "runs/shard.py",
    "integrations/lm_eval.py",
)


def long_functions(package: str, limit: int = LIMIT) -> list[str]:
    """``path:line name (N lines)`` (path under probe/) for every function or method of ``probe/<package>`` over ``limit`` lines."""
    found = []
    for path in sorted((PROBE / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    found.append(f"{path.relative_to(PROBE)}:{node.lineno} {node.name} ({n} lines)")
    return found


def long_files(package: str = "", limit: int = FILE_LIMIT) -> list[str]:
    """``path (N lines)`` (path under probe/) for every module of ``probe/<package>`` (default: all of probe/) over
    ``limit`` lines."""
    found = []
    for path in sorted((PROBE / package).rglob("*.py")):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            found.append(f"{path.relative_to(PROBE)} ({n} lines)")
    return found


def _not_allowed(found: list[str]) -> list[str]:
    """The entries of ``found`` whose file is not in :data:`STILL_BEING_SPLIT`."""
    return [f for f in found if not any(fnmatch(f.split(":")[0].split(" ")[0], p) for p in STILL_BEING_SPLIT)]


def test_the_check_sees_a_long_function(tmp_path, monkeypatch):
    body = "\n".join(f"        x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(f"def short():\n    return 1\n\n\nclass C:\n    def long(self):\n{body}\n")
    monkeypatch.setattr(f"{__name__}.PROBE", tmp_path)
    assert long_functions("pkg") == [f"pkg/m.py:6 long ({LIMIT + 1} lines)"]


def test_the_check_sees_a_long_file(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * FILE_LIMIT)
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (FILE_LIMIT + 1))
    monkeypatch.setattr(f"{__name__}.PROBE", tmp_path)
    assert long_files("pkg") == [f"pkg/long.py ({FILE_LIMIT + 1} lines)"]


def test_the_allowance_spans_folders_and_names_files_only():
    assert _not_allowed(["tasks/hbb/data.py (472 lines)", "scoring/engine/packed.py:3 f (61 lines)",
                         "scoring/sampler/chain.py:3 f (61 lines)", "runs/shard.py (451 lines)",
                         "runs/shard_plan.py (451 lines)"]) == ["scoring/sampler/chain.py:3 f (61 lines)",
                                                                "runs/shard_plan.py (451 lines)"]


def test_no_function_in_runs_is_over_60_lines():
    assert long_functions("runs") == []


def test_no_function_in_scoring_is_over_60_lines():
    assert long_functions("scoring") == []


def test_no_function_in_probe_is_over_60_lines():
    # files in STILL_BEING_SPLIT are left out until they land
    assert _not_allowed(long_functions("")) == []


def test_no_file_in_probe_is_over_450_lines():
    assert _not_allowed(long_files()) == []
