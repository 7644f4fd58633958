"""What a task hands the comparison report: its section's title and place, its tables, paper tables and paired units.

Reports sit below tasks in the layers, so the report never names a benchmark:
each task describes its own section as a :class:`TaskLayout` (plain values and
callables, :meth:`probe.tasks.facets.Reporting.layout`) and the caller passes
the layouts of the runs' tasks to :func:`~probe.reports.compare.build.build_report`.
A task without a layout gets :func:`generic_layout` (each run's own tables).

>>> generic_layout("mytask").title, generic_layout("mytask").rank is None
('mytask', True)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import pandas as pd

from probe.io import slug
from probe.reports.compare.runs import Run
from probe.reports.compare.tables import Table

if TYPE_CHECKING:
    import pandas as pd

    from probe.reports.compare.paired import Spec

__all__ = ["ReportContext", "TaskLayout", "generic_layout", "generic_section"]


@dataclass(frozen=True)
class ReportContext:
    """What a section may read beside its own runs: every run of the report by task, and parameter counts."""

    by_task: Mapping[str, Sequence[Run]]
    params_b: Mapping[str, float] | None = None


#: ``section(runs, out, context)``: the task's tables and figures (figures written under ``out``)
SectionFn = Callable[[Sequence[Run], Path, ReportContext], list[Any]]
#: ``paper_tables(runs, params_b)``: ``(anchor table name, table)`` of each paper-equivalent table
PaperTablesFn = Callable[[Sequence[Run], "Mapping[str, float] | None"], list[tuple[str, Any]]]


def generic_section(runs: Sequence[Run], out: Path, context: ReportContext | None = None) -> list[Any]:
    """Each run's own ``tables/*.csv``, one table per file and run (no multi-model layout for this task)."""

    items: list[Any] = []
    for r in runs:
        for csv in sorted((r.path / "tables").glob("*.csv")):
            try:
                df = pd.read_csv(csv)
            except (OSError, ValueError, pd.errors.ParserError):
                continue
            items.append(Table(f"{r.task}_{slug(r.label)}_{csv.stem}", r.task, f"{r.task}: {csv.stem} ({r.label})",
                               f"Task {r.task}, model {r.label}: the run's own table {csv.name}, as written (its "
                               "estimator, n and CI are those of the task; see the task's docs).", df))
    return items


@dataclass(frozen=True)
class TaskLayout:
    """One task's section of a comparison report.

    ``title``: the section heading; ``rank``: its place (sections with a rank come first, lowest first; the
    others follow in the order given); ``section``: its tables and figures; ``paper_tables``: the papers'
    sampled-estimator tables, each placed right after the exact table it mirrors (None: none);
    ``paired_spec(runs)``: what two runs are compared on (None, or a callable returning None: no paired
    comparison); ``units(run)``: a run's per-unit frame for the paired comparison (None: the caller sets
    ``run.units``).
    """

    title: str
    rank: float | None = None
    section: SectionFn = generic_section
    paper_tables: PaperTablesFn | None = None
    paired_spec: "Callable[[Sequence[Run]], Spec | None] | None" = None
    units: "Callable[[Run], pd.DataFrame | None] | None" = None


def generic_layout(task: str) -> TaskLayout:
    """The layout of a task that declares none: titled by its name, each run's own tables, no paired tests."""
    return TaskLayout(task)
