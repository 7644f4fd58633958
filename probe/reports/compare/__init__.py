"""Comparison reports over many runs (``probe report``): the papers' multi-model layouts, paired tests, HTML.

Modules: :mod:`.runs` (run directories read back, grouped and labelled),
:mod:`.layout` (what a task hands the report: its section, paper tables and
paired units), :mod:`.bbq_layouts` and :mod:`.other_layouts` (the tables and
figures the tasks' layouts use, with several models; shared helpers in
:mod:`.common`), :mod:`.units` and :mod:`.paired` (paired comparisons
between two models on the same items), :mod:`.tables` (captioned tables and
figures, Markdown/CSV/PNG/SVG), :mod:`.html` (the self-contained page) and
:mod:`.build` (:func:`build_report`). Numbers in, files out: no model code.
"""

from probe.reports.compare.build import build_report
from probe.reports.compare.runs import Run, load_run, load_runs

__all__ = ["build_report", "Run", "load_run", "load_runs"]
