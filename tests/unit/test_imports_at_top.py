"""A module's head says what it depends on: imports sit at the top of a module, except

- in the modules ``import probe`` and ``probe --help`` load (they stay light: what needs torch, pandas or the
  engine is imported inside the function that uses it), each of which says so in one comment;
- imports of optional packages (the extras: lm-eval, TransformerLens, bitsandbytes; the test tools), loaded only
  when used;
- imports inside an ``if`` / ``try`` in a function (a feature probed at run time).

Read with :mod:`ast`; the light modules are found by running ``probe --help`` in a fresh interpreter.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "probe"
MARK = "# Imports inside functions below are on purpose:"
#: optional packages (extras and test tools) and platform modules a function may import where it needs them
OPTIONAL = {"lm_eval", "transformer_lens", "bitsandbytes", "pytest", "nbclient", "nbformat", "IPython",
            "hypothesis", "playwright", "resource", "ctypes", "fcntl", "msvcrt", "pwd", "grp"}

_LIGHT = """
import contextlib, io, json, runpy, sys
import probe, probe.scoring, probe.scoring.requests, probe.scoring.tokens, probe.scoring.parse.schema
sys.argv = ["probe", "--help"]
try:
    with contextlib.redirect_stdout(io.StringIO()):
        runpy.run_module("probe.cli", run_name="__main__")
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m == "probe" or m.startswith("probe."))))
"""


def light_modules() -> set[str]:
    out = subprocess.run([sys.executable, "-c", _LIGHT], capture_output=True, text=True, cwd=ROOT, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def function_imports(tree: ast.Module) -> list[ast.stmt]:
    """Import statements that are plain statements of a function body (at any nesting of functions)."""
    found: list[ast.stmt] = []

    def visit(body: list[ast.stmt], in_function: bool) -> None:
        for st in body:
            if isinstance(st, (ast.Import, ast.ImportFrom)) and in_function:
                found.append(st)
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(st.body, True)
            elif isinstance(st, ast.ClassDef):
                visit(st.body, False)

    visit(tree.body, False)
    return found


def _roots(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name.split(".")[0] for a in node.names]
    return ["."] if node.level else [node.module.split(".")[0]]


def misplaced(light: set[str]) -> list[str]:
    out = []
    for path in sorted(PROBE.rglob("*.py")):
        src = path.read_text(encoding="utf-8")
        lazy = [n for n in function_imports(ast.parse(src)) if not set(_roots(n)) <= OPTIONAL]
        if not lazy:
            continue
        if module_name(path) in light and MARK in src:
            continue
        out += [f"{path.relative_to(ROOT)}:{n.lineno}" for n in lazy]
    return out


def test_imports_sit_at_the_top_of_their_modules():
    found = misplaced(light_modules())
    assert found == [], f"{len(found)} imports inside functions: {found[:20]}"


def test_the_light_modules_stay_light():
    """``import probe`` and ``probe --help`` load neither torch nor pandas (what the lazy imports are for)."""
    probe_ = """
import contextlib, io, runpy, sys
import probe
sys.argv = ["probe", "--help"]
try:
    with contextlib.redirect_stdout(io.StringIO()):
        runpy.run_module("probe.cli", run_name="__main__")
except SystemExit:
    pass
print(sorted(m for m in ("torch", "pandas", "transformers", "numpy") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", probe_], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_check_sees_an_import_inside_a_function(tmp_path, monkeypatch):
    pkg = tmp_path / "probe"
    pkg.mkdir()
    (pkg / "m.py").write_text("import os\n\n\ndef f():\n    import json\n    return json\n")
    (pkg / "light.py").write_text(f"{MARK} ...\n\n\ndef g():\n    import torch\n    return torch\n")
    (pkg / "opt.py").write_text("def h():\n    import lm_eval\n    return lm_eval\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    monkeypatch.setattr(f"{__name__}.PROBE", pkg)
    assert misplaced({"probe.light"}) == ["probe/m.py:5"]
    assert misplaced(set()) == ["probe/light.py:5", "probe/m.py:5"]
