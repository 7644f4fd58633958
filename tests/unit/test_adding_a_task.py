"""Adding a built-in task touches its folder and its registry line only.

A copy of a real task folder (the demo's: task, data, report layout, command, package data) under a new name,
outside ``probe/``, plus one entry in :data:`probe.tasks.BUILTIN` (as a new built-in's line would add it) must
give a task that the registry lists, ``probe --help`` and its own command know, ``probe report`` lays out with the
folder's own section, and that passes the public contract test: nothing else in the package is edited. The task
it adds writes fewer than eight methods (the narrow task contract: three stages and the optional facets' few
hooks it needs).
"""

from __future__ import annotations

import inspect
import re
import shutil
import sys
from pathlib import Path

import pytest

from probe.tasks import BUILTIN, available, command_modules, get
from probe.testing import parametrize_with_checks

PROBE = Path(__file__).resolve().parents[2] / "probe"
SOURCE = "demo"  # the folder copied: small, self-contained (it imports BBQ's pieces from their owner)
NEW = "copybench"


@pytest.fixture
def new_task(tmp_path, monkeypatch):
    """The copied folder as the package ``copybench`` on sys.path, and its registry line."""
    dest = tmp_path / NEW
    shutil.copytree(PROBE / "tasks" / SOURCE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for path in dest.rglob("*.py"):
        text = path.read_text(encoding="utf-8").replace(f"probe.tasks.{SOURCE}", NEW)
        text = text.replace(f"probe {SOURCE}", f"probe {NEW}")  # its command in the first steps
        # the task's name where the folder spells it (its `name`, its command, its report section)
        path.write_text(re.sub(rf"(['\"]){SOURCE}\1", rf"\g<1>{NEW}\1", text), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(BUILTIN, NEW, BUILTIN[SOURCE].replace(f"probe.tasks.{SOURCE}", NEW))
    yield get(NEW)
    for name in [m for m in sys.modules if m == NEW or m.startswith(NEW + ".")]:
        del sys.modules[name]


def test_the_registry_and_the_cli_pick_up_a_copied_folder(new_task, capsys):
    assert NEW in available() and new_task.name == NEW
    assert type(new_task).__module__ == f"{NEW}.task"  # the copy's code, not the original's
    assert type(new_task) is not type(get(SOURCE))
    assert f"{NEW}.cli" in command_modules()
    from probe.cli import build_parser, main

    assert f"probe {NEW}" in build_parser().format_help()  # the folder's own command and first steps
    assert main(["tasks"]) == 0
    assert re.search(rf"^\s*{NEW}\b", capsys.readouterr().out, re.M)


def test_report_uses_the_copied_folders_section(new_task):
    from probe.reports.compare.layout import generic_layout

    layout = new_task.reporting.layout()  # found beside the task's module, in the copied folder
    assert layout.section.__module__ == f"{NEW}.layout" and layout.units.__module__ == f"{NEW}.layout"
    assert layout.title == get(SOURCE).reporting.layout().title != generic_layout(NEW).title


@parametrize_with_checks([NEW])  # looked up when its first check runs: after the fixture registered it
def test_a_copied_folder_passes_the_contract_test(new_task, task, check, tiny_lm):
    check(tiny_lm)


def written_methods(task) -> list[str]:
    """The methods the task's own code writes: on its class and its facets' classes, not on probe's bases."""
    from probe.tasks.base import Task

    def own(cls: type) -> list[str]:
        return [f"{k.__name__}.{name}" for k in cls.__mro__ if not k.__module__.startswith(("probe.tasks.", "typing"))
                and k not in (object, Task) for name, v in vars(k).items() if inspect.isfunction(v)]

    return own(type(task)) + [m for facet in ("selection", "paper", "reporting", "analyses")
                              for m in own(type(getattr(task, facet)))]


def test_the_added_task_writes_fewer_than_eight_methods(new_task):
    written = written_methods(new_task)
    assert len(written) < 8, written
    assert {"DemoTask.items", "DemoTask.requests", "DemoTask.aggregate"} <= set(written)  # the three stages
