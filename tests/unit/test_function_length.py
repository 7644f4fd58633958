"""Each function of probe/ reads in one screen (none is over 60 lines) and each module is one concept (none is
over 450 lines).

A function's length runs from its ``def`` line to its last line (docstring and comments included), read
with :mod:`ast`, so the check needs no import of the package; a file's is its line count.
"""

from __future__ import annotations

import ast
from pathlib import Path


PROBE = Path(__file__).resolve().parents[2] / "probe"
LIMIT = 60
FILE_LIMIT = 450


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


def test_no_function_in_runs_is_over_60_lines():
    assert long_functions("runs") == []


def test_no_function_in_scoring_is_over_60_lines():
    assert long_functions("scoring") == []


def test_no_function_in_probe_is_over_60_lines():
    assert long_functions("") == []


def test_no_file_in_probe_is_over_450_lines():
    assert long_files() == []
