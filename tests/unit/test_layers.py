"""The package's import structure: the import-linter contract and cheap imports.

The contract (``[tool.importlinter]`` in pyproject.toml) fixes the layers
(commands > api > studies > runs > tasks > analysis > activations > prompts | reports >
data | metrics | models | scoring > paths > io > errors) and keeps
torch out of metrics, reports, data and prompts; each benchmark is one folder
under ``probe/tasks/`` that no generic layer imports, independent of the other
folders except the owners it declares (``tests/unit/test_task_folders.py``
checks names and literals). Import-linter reads the source statically, so the
second half checks at run time what a package ``__init__`` could still pull in.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_import_contract_kept():
    pytest.importorskip("importlinter", reason="pip install import-linter (the dev extra)")
    proc = _run(
        "from importlinter.cli import lint_imports_command as c; "
        "c(['--no-cache', 'pyproject.toml'])"
    )
    assert proc.returncode == 0, f"import contract broken (lint-imports):\n{proc.stdout}\n{proc.stderr}"


def _loaded_after(statement: str, heavy: tuple[str, ...]) -> list[str]:
    proc = _run(f"import sys\n{statement}\nprint(','.join(m for m in {heavy!r} if m in sys.modules))")
    assert proc.returncode == 0, proc.stderr
    return [m for m in proc.stdout.strip().split(",") if m]


def test_import_probe_is_cheap():
    assert _loaded_after("import probe", ("torch", "transformers", "pandas")) == []


@pytest.mark.parametrize("module", [
    "probe.tasks",
    # the request-building layers: static imports are checked by the contract, but a
    # package __init__ (e.g. probe.scoring's) could still load torch at run time
    "probe.tasks.bbq.prompts", "probe.tasks.hbb.prompts", "probe.tasks.cmp_iso.prompts", "probe.prompts.items",
    "probe.scoring.requests", "probe.scoring.tokens",
])
def test_module_does_not_load_torch(module):
    assert _loaded_after(f"import {module}", ("torch", "transformers")) == []
