"""The task registry: every benchmark probe runs, by name.

Built-in tasks live in this package (one module each); third-party tasks are
found through the entry-point group ``probe.tasks`` (an entry point names a
:class:`~probe.tasks.base.Task` subclass, or a module with a ``TASK``
attribute). ``probe tasks`` lists them.

>>> sorted(BUILTIN)[:3]
['bbq', 'cmp_iso', 'crows_pairs']
"""

from __future__ import annotations

import importlib
import warnings
from importlib import metadata
from typing import Any

from probe.errors import ProbeError
from probe.tasks.base import Aggregate, Task, TaskConfig, write_tables

__all__ = ["Aggregate", "BUILTIN", "ENTRY_POINT_GROUP", "Task", "TaskConfig", "available", "get", "write_tables"]

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
