"""HBB's section of a comparison report: Tables 1-3, 8, 9 and Figures 3, 4, 8, 9 with several models, the
paper-equivalent Table 1, paired units per test instance
(:func:`layout`, the task's ``reporting.layout()``)."""

from __future__ import annotations

from typing import Any

from probe.reports.compare.layout import TaskLayout
from probe.tasks.hbb.sections import hbb_paper_tables, hbb_section, hbb_spec, hbb_units


def _threshold(summary: dict) -> float:
    return float(summary.get("threshold", 20.0))


def layout() -> Any:
    """The :class:`~probe.reports.compare.layout.TaskLayout` of ``hbb`` (Table 1's CS column reads the
    report's ``crows_pairs`` runs of the same models)."""

    return TaskLayout(
        "Hidden Bias Benchmark", 3, lambda runs, out, ctx: hbb_section(runs, out, ctx.by_task.get("crows_pairs", [])),
        paper_tables=hbb_paper_tables, paired_spec=lambda runs: hbb_spec(_threshold(runs[0].summary)),
        units=lambda run: hbb_units(run, _threshold(run.summary)))
