"""No import circle inside ``probe``, counting the imports inside functions too (lint-imports sees only the
layers; a circle closed by a function-level import passes it)."""

from __future__ import annotations

import ast
from pathlib import Path

PROBE = Path(__file__).resolve().parents[2] / "probe"


def _modules() -> dict[str, Path]:
    out = {}
    for p in PROBE.rglob("*.py"):
        name = ".".join(p.relative_to(PROBE.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def _targets(mods: dict[str, Path], cur: str, node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        parts = cur.split(".")
        pkg = parts if mods[cur].name == "__init__.py" else parts[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        mod = ".".join(pkg + ([node.module] if node.module else []))
    else:
        mod = node.module or ""
    # `from pkg import submodule` depends on the submodule, not on the package's own code
    return [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod for a in node.names]


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and getattr(node, "module", None) != "__future__":
                graph[m] |= {t for t in _targets(mods, m, node) if t in mods and t != m}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_finder_sees_a_circle_closed_inside_a_function():
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_probe_has_no_import_circle():
    assert circles(import_graph()) == []
