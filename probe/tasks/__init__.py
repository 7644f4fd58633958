"""The task registry: every benchmark probe runs, by name.

Each built-in task is one folder of this package (``probe/tasks/<name>/``:
its task module and everything the benchmark owns: data, prompts, parser,
metrics, tables, figures, paper check, command-line extras, package data),
shaped like a plugin; adding one is its folder and its line in
:data:`BUILTIN`. Third-party tasks are found through the entry-point group
``probe.tasks`` (an entry point names a :class:`~probe.tasks.base.Task`
subclass, or a module with a ``TASK`` attribute). ``probe tasks`` lists them.
The generic modules beside the folders (:mod:`.base`, :mod:`.facets`,
:mod:`.stratify`, :mod:`.paper_check`, :mod:`.chains`, :mod:`.representation`)
are what any task builds on; :mod:`.compat` keeps the hooks' names from before
the facets working for plugins written with them.

Two optional modules beside a task's module extend the generic commands
without naming the task there: ``cli`` adds its own commands (``probe data
build NAME``, ``probe metrics NAME``, ...; :func:`command_modules`) and
``datasets`` declares the public data sets ``probe data fetch`` can get for it
(:func:`data_sets`).

>>> sorted(BUILTIN)[:3]
['bbq', 'cmp_iso', 'crows_pairs']
"""

from __future__ import annotations

import importlib
import warnings
from importlib import metadata
from importlib.util import find_spec
from typing import Any

from probe.errors import ProbeError
from probe.tasks.base import Aggregate, CheckCase, Task, TaskConfig, write_tables

__all__ = ["Aggregate", "BUILTIN", "CheckCase", "ENTRY_POINT_GROUP", "Task", "TaskConfig", "available", "command_modules",
           "data_set", "data_sets", "get", "modules_beside", "write_tables"]


ENTRY_POINT_GROUP = "probe.tasks"

#: name -> "module:attribute" of the tasks that ship with probe
BUILTIN = {
    "demo": "probe.tasks.demo.task:DemoTask",
    "bbq": "probe.tasks.bbq.task:BBQTask",
    "implicitbbq": "probe.tasks.implicitbbq.task:ImplicitBBQTask",
    "hbb": "probe.tasks.hbb.task:HBBTask",
    "crows_pairs": "probe.tasks.crows_pairs.task:CrowsPairsTask",
    "cmp_iso": "probe.tasks.cmp_iso.task:CmpIsoTask",
    "stereoset": "probe.tasks.stereoset.task:StereoSetTask",
}


def _load(target: str) -> Task:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    obj: Any = getattr(module, attr) if attr else getattr(module, "TASK", None)
    if obj is None:
        raise ProbeError(f"task entry {target!r}: module {module_name} has no TASK attribute")
    task = obj() if isinstance(obj, type) else obj
    if not isinstance(task, Task):
        raise ProbeError(f"task entry {target!r} is not a probe.tasks.Task (got {type(task).__name__})")
    return task


def _entry_points() -> dict[str, str]:
    found = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in BUILTIN and ep.value == BUILTIN[ep.name]:
            continue
        if ep.name in BUILTIN:
            warnings.warn(f"entry point {ep.name!r} ({ep.value}) is shadowed by the built-in task of that name",
                          stacklevel=3)
            continue
        found[ep.name] = ep.value
    return found


def available() -> dict[str, str]:
    """Every task name -> where it is defined (built-ins first, then entry points, each sorted)."""
    return {**BUILTIN, **dict(sorted(_entry_points().items()))}


def get(name: str) -> Task:
    """The task called ``name``; an unknown name is an error listing the known ones."""
    tasks = available()
    if name not in tasks:
        from probe.errors import did_you_mean

        raise ProbeError(f"unknown task {name!r}{did_you_mean(name, tasks)}; known tasks: {', '.join(tasks)} "
                         "(`probe tasks` lists them)")
    task = _load(tasks[name])
    if task.name != name:
        raise ProbeError(f"task {tasks[name]} calls itself {task.name!r} but is registered as {name!r}")
    return task


def modules_beside(name: str) -> dict[str, str]:
    """Task name -> the module called ``name`` beside its task module (``probe.tasks.hbb.task:HBBTask`` ->
    ``probe.tasks.hbb.<name>``), for each registered task that has one; in registry order.

    Found without importing any task module (only the task's package, which should stay light), so that
    ``probe --help`` stays instant.
    """

    out: dict[str, str] = {}
    for task, target in available().items():
        module = target.partition(":")[0]
        try:
            spec = find_spec(module)
        except Exception:  # a plugin whose package fails to import must not break `probe --help`
            continue
        package = module if spec is not None and spec.submodule_search_locations else module.rpartition(".")[0]
        if not package:
            continue
        try:
            found = find_spec(f"{package}.{name}") is not None
        except Exception:
            found = False
        if found:
            out[task] = f"{package}.{name}"
    return out


def command_modules() -> list[str]:
    """The modules adding each registered task's own commands: its ``cli`` module (``register(groups)``, as
    :mod:`probe.cli` describes), where it has one."""
    return list(dict.fromkeys(modules_beside("cli").values()))


def data_sets() -> dict[str, Any]:
    """Every data set ``probe data fetch`` knows, by name: the ``DATASETS``
    (:class:`probe.data.fetch.DatasetSpec`) of each registered task's ``datasets`` module, in registry order
    (a name declared twice keeps its first)."""
    out: dict[str, Any] = {}
    for module in dict.fromkeys(modules_beside("datasets").values()):
        for spec in getattr(importlib.import_module(module), "DATASETS", ()):
            out.setdefault(spec.name, spec)
    return out


def data_set(name: str) -> Any:
    """The data set called ``name`` (:func:`data_sets`); an unknown name is an error listing the known ones."""
    sets = data_sets()
    if name not in sets:
        from probe.errors import did_you_mean

        raise ProbeError(f"unknown data set {name!r}{did_you_mean(name, sets)}; known: {', '.join(sorted(sets))}")
    return sets[name]
