"""The task hooks' names from before the facets (:data:`probe.tasks.compat.OLD_NAMES`) are for plugins written
with them only: they still run (the first test), and no code of this repository defines or reads a task hook by
one (the rest): probe, its tests, benchmarks, experiments, tools and the documentation's example plugins use the
facets (``task.selection``, ``task.paper``, ``task.reporting``, ``task.analyses``)."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

import probe
from probe.tasks import available, get
from probe.tasks.base import Task
from probe.tasks.compat import OLD_NAMES

ROOT = Path(probe.__file__).resolve().parent.parent
SCANNED = ("probe", "tests", "benchmarks", "experiments", "tools", "docs/examples")
#: the one module that names them on purpose, and this test (its plugin is written the old way)
ALLOWED = {Path("probe/tasks/compat.py"), Path(__file__).resolve().relative_to(ROOT)}
EXAMPLES = {"tinybbq": ROOT / "docs" / "examples" / "probe_tinybbq",
            "probe_pairs": ROOT / "docs" / "examples" / "probe_pairs"}
#: a name or attribute that holds a task: ``task``, ``self.task``, ``new_task``, ``TASK``, ``HBBTask``
TASKLIKE = re.compile(r"^(task|TASK|\w*_task|\w*Task)$")


def test_a_plugin_written_with_the_old_names_still_runs():
    from probe.tasks.demo.task import DemoTask

    class OldStyle(DemoTask):
        strata_names = ("scenario",)

        def sampling(self, config):
            return ({"temperature": 0.5, "top_p": 1.0},)

        def bias_metrics(self, config, summary):
            return {"m": {"value": 1.0}}

    task = OldStyle()
    assert task.selection.names == task.strata_names == ("scenario",)
    assert task.paper.sampling(None) == task.sampling(None) == ({"temperature": 0.5, "top_p": 1.0},)
    assert task.reporting.headline_metrics(None, {}) == {"m": {"value": 1.0}}
    assert task.bias_metrics(None, {}) == {"m": {"value": 1.0}}
    assert task.selection.unit_name == DemoTask.selection.unit_name  # what the class does not define: its base's


def _task_classes(monkeypatch) -> list[type]:
    """Every Task subclass defined in this repository: the built-in tasks and the documentation's examples."""
    for name in available():
        get(name)
    for module, folder in EXAMPLES.items():
        monkeypatch.syspath_prepend(str(folder))
        importlib.import_module(module)
    out, todo = [], list(Task.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        path = getattr(sys.modules.get(cls.__module__), "__file__", None)
        if path and Path(path).resolve().is_relative_to(ROOT) and cls.__module__ != __name__:  # not OldStyle
            out.append(cls)
    return out


def test_no_task_class_of_the_repository_defines_an_old_name(monkeypatch):
    try:
        classes = _task_classes(monkeypatch)
        names = {c.__name__ for c in classes}
        assert {"BBQTask", "HBBTask", "CmpIsoTask", "TinyBBQTask", "PairsTask"} <= names
        old = [f"{c.__module__}.{c.__name__}.{n}" for c in classes for n in OLD_NAMES if n in vars(c)]
        assert old == [], "define these on the task's facets (docs/tasks.md)"
    finally:
        for module in EXAMPLES:
            sys.modules.pop(module, None)
        sys.modules.pop("tinybbq_data", None)


def _is_task(node: ast.AST) -> bool:
    """Whether an expression reads as a task: a task-like name or attribute, ``get(NAME)`` (the registry) or
    ``SomeTask()``."""
    if isinstance(node, ast.Name):
        return bool(TASKLIKE.match(node.id))
    if isinstance(node, ast.Attribute):
        return bool(TASKLIKE.match(node.attr))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id == "get" or bool(re.match(r"^\w*Task$", node.func.id))
    return False


def _task_classes_in(tree: ast.AST) -> list[ast.ClassDef]:
    """The classes of a module that are tasks: a base named like one (``Task[...]``, ``DemoTask``) or a task
    class of the same module."""
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    found: dict[str, ast.ClassDef] = {}
    grew = True
    while grew:
        grew = False
        for c in classes:
            bases = [ast.unparse(b.value if isinstance(b, ast.Subscript) else b).split(".")[-1] for b in c.bases]
            if c.name not in found and any(re.match(r"^\w*Task$", b) or b in found for b in bases):
                found[c.name] = c
                grew = True
    return list(found.values())


def old_name_uses(source: str) -> list[str]:
    """``line: what`` for each task hook of ``source`` defined or read by an old name."""
    tree = ast.parse(source)
    hits = []
    for c in _task_classes_in(tree):
        for stmt in c.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [stmt.name]
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
            else:
                names = []
            hits += [f"{stmt.lineno}: class {c.name} defines {n}" for n in names if n in OLD_NAMES]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in OLD_NAMES and _is_task(node.value):
            hits.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and _is_task(node.args[0]) and isinstance(node.args[1], ast.Constant)
              and node.args[1].value in OLD_NAMES):
            hits.append(f"{node.lineno}: {ast.unparse(node)}")
    return sorted(hits, key=lambda h: int(h.split(":")[0]))


def test_the_scan_finds_old_names():
    source = ("class T(Task[C, I]):\n    strata_names = ('a',)\n\n    def sampling(self, config):\n        pass\n\n"
              "class U(T):\n    def report_layout(self):\n        pass\n\n"
              "task.results(c, s)\nget('bbq').paper_check()\nself.task.bias_metrics(c, s)\n"
              "getattr(task, 'terms', {})\n"
              "task.reporting.results(c, s)\nrun.results\nscorer.score(r, sampling=s)\n")
    assert [h.split(":")[0] for h in old_name_uses(source)] == ["2", "4", "8", "11", "12", "13", "14"]


@pytest.mark.parametrize("folder", SCANNED)
def test_no_code_of_the_repository_uses_an_old_name(folder):
    hits = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel in ALLOWED or "__pycache__" in rel.parts:
            continue
        hits += [f"{rel}:{h}" for h in old_name_uses(path.read_text(encoding="utf-8"))]
    assert hits == [], "use the facets: task.selection / paper / reporting / analyses (docs/tasks.md)"


def test_the_documentation_names_the_facet_hooks():
    """Markdown pages write ``task.reporting.layout()``, not ``Task.report_layout()`` (a paragraph about
    :mod:`probe.tasks.compat` may name the old forms)."""
    old = "|".join(sorted(OLD_NAMES, key=len, reverse=True))
    pattern = re.compile(rf"`[\w.]*\b[Tt]ask\.({old})\b|`(strata_names|limit_seed|bias_metrics|analysis_units)\b|"
                         r"`(paper_check|report_layout)\(\)")
    hits = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for para in page.read_text(encoding="utf-8").split("\n\n"):
            if "compat" not in para:
                hits += [f"{page.relative_to(ROOT)}: {m.group(0)}" for m in pattern.finditer(para)]
    assert hits == []
