"""The engine room's walls, read from the source (no import of the package needed).

- ``probe/scoring`` is four rooms (``parse``, the front, ``engine``, ``sampler``) whose imports run one way: the
  import-linter contract ``scoring-rooms`` in pyproject.toml holds it; here, that the contract names every room.
- The Scorer schedules no pass: it calls none of the engine's passes; the driver does.
- The engine's counters are added to by the engine's own modules only.
- Nothing subclasses the engine (lm-eval's greedy tokens are an engine option, not an override).
- ``parse_exact`` takes one settings object, and no production module exports a test oracle.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "probe"
SCORING = PROBE / "scoring"
ENGINE_PASSES = {"run_packed", "run_segments", "run_prefixes", "merge_caches", "read_packed", "_decoder"}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _attribute_names(tree: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}


def test_the_rooms_contract_places_every_module_of_scoring():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    [rooms] = [c for c in contracts if c["id"] == "scoring-rooms"]
    named = {m.strip() for layer in rooms["layers"] for m in re.split(r"[|:]", layer)}
    present = {p.stem for p in SCORING.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in SCORING.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert present == named
    assert rooms["layers"][0] == "parse" and rooms["layers"][-2:] == ["engine", "sampler"]


def test_the_scorer_runs_no_pass():
    used = _attribute_names(_tree(SCORING / "scorer.py"))
    assert not used & ENGINE_PASSES, sorted(used & ENGINE_PASSES)
    assert "driver" in used  # what it hands the prefix tree to


def test_only_the_engine_adds_to_its_counters():
    outside = []
    for path in sorted(PROBE.rglob("*.py")):
        if (SCORING / "engine") in path.parents:
            continue
        for node in ast.walk(_tree(path)):
            if (isinstance(node, ast.Attribute) and node.attr in {"add", "reset"}
                    and isinstance(node.value, ast.Attribute) and node.value.attr == "counters"):
                outside.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert outside == []


def test_nothing_subclasses_the_engine():
    subclasses = [f"{p.relative_to(ROOT)}:{n.lineno}" for p in PROBE.rglob("*.py") for n in ast.walk(_tree(p))
                  if isinstance(n, ast.ClassDef)
                  and any(getattr(b, "id", getattr(b, "attr", None)) == "Engine" for b in n.bases)]
    assert subclasses == []


def test_parse_exact_takes_one_settings_object():
    [fn] = [n for n in ast.walk(_tree(SCORING / "parse" / "exact.py"))
            if isinstance(n, ast.FunctionDef) and n.name == "parse_exact"]
    names = [a.arg for a in fn.args.args + fn.args.kwonlyargs]
    assert "settings" in names and len(names) <= 6, names


def test_no_production_module_exports_a_test_oracle():
    exported = []
    for path in PROBE.rglob("*.py"):
        for node in _tree(path).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                names = [e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)]
                exported += [f"{path.relative_to(ROOT)}: {n}" for n in names if n == "LMCompleter"]
    assert exported == []
