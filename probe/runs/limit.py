"""``--limit``: an item count or a fraction of the items (:func:`check_limit`, :func:`resolve_limit`), refused
before the model loads when smaller than a finished run's (:func:`check_smaller_limit`), and what the stratified
selection covered (:func:`select_coverage`)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from probe.errors import ProbeError
from probe.tasks.base import Task
from probe.tasks.stratify import coverage_line

__all__ = ["check_limit", "check_smaller_limit", "resolve_limit", "select_coverage"]


def plain(obj: Any) -> Any:
    """A config as JSON-ready values (what ``provenance.json`` records and :func:`check_smaller_limit` compares)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj if isinstance(obj, (str, int, float, bool, type(None))) else str(obj)


def check_limit(limit: Any) -> int | float | None:
    """``limit`` as :func:`probe.runs.task_run.run_task` takes it, else a :class:`ProbeError`: None, an integer >= 1 (items), or a
    fraction strictly between 0 and 1 of the task's items (lm-evaluation-harness's ``--limit 0.01``).

    >>> check_limit(24), check_limit(0.01), check_limit("0.5"), check_limit(None)
    (24, 0.01, 0.5, None)
    """
    if limit is None:
        return None
    value: Any = limit
    if isinstance(limit, str):
        text = limit.strip()
        if re.fullmatch(r"[0-9]+", text):
            value = int(text)
        elif re.fullmatch(r"[0-9]*\.[0-9]+(?:[eE]-?[0-9]+)?|[0-9]+[eE]-[0-9]+", text):
            value = float(text)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        value = None
    elif isinstance(value, float) and value.is_integer() and value >= 1:
        value = int(value)
    if isinstance(value, int) and value >= 1 or isinstance(value, float) and 0 < value < 1:
        return value
    raise ProbeError(f"limit must be a number of items (an integer >= 1) or a fraction of the task's items "
                     f"between 0 and 1 (e.g. 0.01), got {limit!r}")


def resolve_limit(task: Task, config: Any, limit: int | float | None, pool: Sequence[Any] | None = None) -> int | None:
    """``limit`` as a number of items: a fraction is taken of the items an unlimited run selects, rounded up
    (as lm-evaluation-harness does), at least 1; the sample is then stratified as any ``--limit N``."""
    limit = check_limit(limit)
    if not isinstance(limit, float):
        return limit
    pool = task.items(config) if pool is None else pool
    return max(1, math.ceil(len(task.selection.select(config, pool, None)) * limit))


def check_smaller_limit(task: Task, config: Any, limit: int | None, out: Path, pool: Sequence[Any] | None = None,
                        items: Sequence[Any] | None = None) -> None:
    """Refuse, before the model loads, a ``--limit`` smaller than the finished run ``out`` holds (same task and
    config): its records would hold items this run does not select, beside a summary of a subset. A run
    directory's summary always covers every record in it (``docs/tasks.md``, "Resuming with another
    --limit"). ``pool`` / ``items``: the task's items and this run's selection, when already at hand."""

    if limit is None or not (out / "records.jsonl").is_file() or not (out / "provenance.json").is_file():
        return
    pool = task.items(config) if pool is None and isinstance(limit, float) else pool
    limit = resolve_limit(task, config, limit, pool)
    try:
        old = json.loads((out / "provenance.json").read_text(encoding="utf-8")).get("config") or {}
    except (OSError, ValueError, AttributeError):
        return  # an unreadable provenance: the record check after loading still refuses
    if old.get("task") != task.name or old.get("task_config") != plain(config) or old.get("limit") == limit:
        return  # another config: the input check names what differs once the model is loaded
    before = old.get("limit")
    if isinstance(before, int) and before <= limit:
        return  # a larger limit: the run goes on from the records already there
    pool = task.items(config) if pool is None else pool
    items = task.selection.select(config, pool, limit) if items is None else items
    earlier = task.selection.select(config, pool, before if isinstance(before, int) or before is None else None)
    if len(earlier) <= len(items):
        return  # a larger limit: the run goes on from the records already there
    wanted = f"--limit {before}" if before is not None else "no --limit"
    raise ProbeError(f"{out} holds a finished run with {wanted} ({len(earlier)} items); --limit {limit} selects "
                     f"{len(items)}, so the directory would hold records of items this run does not select "
                     f"({len(earlier) - len(items)} item(s)) beside a summary of a subset. Nothing was scored and no "
                     f"model was loaded. Re-run with {wanted} (its summary covers every record), or choose a new "
                     "output directory")


def select_coverage(task: Task, config: Any, pool: Sequence[Any], items: Sequence[Any],
                    limit: int | None, asked: int | float | None = None) -> dict[str, Any] | None:
    """What a ``--limit`` selection covered and left out of the unlimited one (printed to stderr and
    recorded in ``summary.json`` under ``coverage``); None without a limit. ``asked``: the limit as given; a
    fraction is kept as ``limit_fraction``, so the lines a user reads show the ``--limit 0.01`` they typed."""
    if limit is None:
        return None

    try:
        cov = task.selection.coverage(config, task.selection.select(config, pool, None), items, limit)
    except Exception as exc:  # a third-party task's strata must not stop the run
        print(f"{task.name}: coverage not computed ({exc.__class__.__name__}: {exc})", file=sys.stderr)
        return None
    if isinstance(asked, float):
        cov["limit_fraction"] = asked
    print(coverage_line(task.name, cov, terms=dict(task.reporting.terms or {})), file=sys.stderr)
    return cov
