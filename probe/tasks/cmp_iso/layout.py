"""iso/cmp's section of a comparison report: Tables 2-7 and E.1 with several models, the paper-equivalent
tables beside them, paired units per context pair and paradigm
(:func:`layout`, the task's ``reporting.layout()``)."""

from __future__ import annotations

from typing import Any

from probe.reports.compare.layout import TaskLayout
from probe.tasks.cmp_iso.sections import CMP_ISO_SPEC, cmp_iso_paper_tables, cmp_iso_section, cmp_iso_units


def layout() -> Any:
    """The :class:`~probe.reports.compare.layout.TaskLayout` of ``cmp_iso`` (model sizes: the report's
    ``params_b``, else each run's provenance)."""

    return TaskLayout('iso vs cmp ("To Compare or Not to Compare")', 5,
                      lambda runs, out, ctx: cmp_iso_section(runs, out, ctx.params_b),
                      paper_tables=cmp_iso_paper_tables, paired_spec=lambda _runs: CMP_ISO_SPEC, units=cmp_iso_units)
