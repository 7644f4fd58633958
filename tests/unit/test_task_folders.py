"""A benchmark is one folder: no module outside ``probe/tasks/`` carries a benchmark's name, no string literal
there names one (docstrings aside), and a task's folder alone adds its commands and data sets.

The names come from the registry (every registered task and every data set a task declares), so a new
benchmark is covered without editing this file. The import side is the import-linter contract
(``tests/unit/test_layers.py``: generic layers never import a task folder; folders are independent except
declared owners).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from probe.tasks import BUILTIN, available, command_modules, data_sets, modules_beside

PROBE = Path(__file__).resolve().parents[2] / "probe"


def benchmark_names() -> list[str]:
    """Every registered task and data set name, and the first part of a compound one (``crows`` of
    ``crows_pairs``) when it is long enough to be a name of its own."""
    names = set(available()) | set(data_sets())
    names |= {n.split("_")[0] for n in list(names) if "_" in n and len(n.split("_")[0]) >= 4}
    return sorted(names, key=len, reverse=True)


def name_pattern(names: list[str]) -> re.Pattern:
    """A name as a word, any case, its underscores also written as a space, a hyphen or nothing
    (``crows_pairs``, ``CrowS-Pairs``, ``crowspairs``)."""
    alts = [re.escape(n).replace("_", "[_ -]?") for n in names]
    return re.compile(r"(?<![a-z0-9])(?:" + "|".join(alts) + r")(?![a-z0-9])", re.IGNORECASE)


PATTERN = name_pattern(benchmark_names())


def _generic_modules() -> list[Path]:
    return sorted(p for p in PROBE.rglob("*.py") if p.relative_to(PROBE).parts[0] != "tasks")


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def literals_naming_a_benchmark(source: str, pattern: re.Pattern = PATTERN) -> list[tuple[int, str]]:
    """``(line, literal)`` of each string literal (f-string parts included, docstrings left out) that names a
    benchmark."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
            and pattern.search(node.value)]


def test_the_names_come_from_the_registry_and_match_their_spellings():
    names = benchmark_names()
    assert set(BUILTIN) <= set(names) and "crows" in names  # the built-ins, and short forms of compound names
    hits = [s for s in ("CrowS-Pairs", "ImplicitBBQ", "HBB-SG", "probe.tasks.hbb", "hbb_sg", "probe-demo",
                        "cmp_iso_table8", "StereoSet") if PATTERN.search(s)]
    assert len(hits) == 8
    misses = [s for s in ("hbbx", "abbq", "demonstrate", "isolated", "stereotyped", "crowsfeet")
              if PATTERN.search(s)]
    assert misses == []


def test_the_literal_scan_skips_docstrings_only():
    src = textwrap.dedent('''
        """A module about BBQ."""
        def f():
            """Reads an hbb run."""
            x = "plain"
            return f"task {x}: hbb"
        NAME = "implicitbbq"
    ''')
    assert sorted(line for line, _ in literals_naming_a_benchmark(src)) == [6, 7]


def test_no_module_outside_the_task_folders_carries_a_benchmark_name():
    named = [str(p.relative_to(PROBE.parent)) for p in _generic_modules()
             if PATTERN.search("/".join(p.relative_to(PROBE).with_suffix("").parts))]
    assert named == [], f"benchmark-named modules outside probe/tasks/: {named}"


def test_no_string_literal_outside_the_task_folders_names_a_benchmark():
    found = [f"{p.relative_to(PROBE.parent)}:{line}: {text[:70]!r}" for p in _generic_modules()
             for line, text in literals_naming_a_benchmark(p.read_text(encoding="utf-8"))]
    assert found == [], "string literals naming a benchmark outside probe/tasks/:\n" + "\n".join(found)


def test_every_builtin_task_is_a_folder():
    for name, target in BUILTIN.items():
        module = target.partition(":")[0]
        assert module.startswith(f"probe.tasks.{name}."), (name, target)
        assert (PROBE / "tasks" / name / "__init__.py").is_file()


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=PROBE.parent, capture_output=True, text=True,
                          timeout=300)


def test_the_cli_loads_no_task_module_nor_anything_heavy():
    """Every task's commands and data sets are registered when the parser is built (``probe --help``): that
    imports each task's package, ``cli`` and ``datasets`` modules, which must stay light."""
    proc = _run("import sys\nfrom probe.cli import build_parser\nbuild_parser()\n"
                "print(','.join(m for m in ('torch', 'transformers', 'pandas', 'numpy', 'scipy', 'matplotlib')"
                " if m in sys.modules))\n"
                "print(','.join(m for m in sys.modules if m.startswith('probe.tasks.') and m.endswith('.task')))")
    assert proc.returncode == 0, proc.stderr
    heavy, tasks = (proc.stdout.split("\n") + ["", ""])[:2]
    assert heavy == "" and tasks == ""


def test_a_task_folder_and_its_registry_line_add_its_commands_and_data_sets(tmp_path, monkeypatch):
    """A new built-in (here a package on sys.path, registered like one) brings its ``cli`` and ``datasets``
    modules with it: nothing else changes."""
    pkg = tmp_path / "newbench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "task.py").write_text("from probe.tasks.base import Task\n\nclass NewTask(Task):\n    name = 'newbench'\n")
    (pkg / "cli.py").write_text(textwrap.dedent('''
        FIRST_STEPS = (("probe newbench", "the new benchmark's own command"),)

        def register(groups):
            p = groups[""].add_parser("newbench", help="the new benchmark's own command")
            p.set_defaults(func=lambda args: 7)
    '''))
    (pkg / "datasets.py").write_text(textwrap.dedent('''
        from probe.data.fetch import DataFile, DatasetSpec

        DATASETS = (DatasetSpec("newbench", "a new data set", "https://example.org/", "https://example.org",
                                "CC0", (DataFile("items.csv", "items.csv"),)),)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(BUILTIN, "newbench", "newbench.task:NewTask")
    assert "newbench.cli" in command_modules() and modules_beside("datasets")["newbench"] == "newbench.datasets"
    assert data_sets()["newbench"].files[0].name == "items.csv"
    from probe.cli import build_parser, main

    assert "probe newbench" in build_parser().format_help()
    assert main(["newbench"]) == 7
    with pytest.raises(SystemExit):
        main(["data", "fetch", "nope-not-a-data-set"])
