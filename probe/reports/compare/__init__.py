"""Comparison reports over many runs (``probe report``): the papers' multi-model layouts, paired tests, HTML.

Modules: :mod:`.runs` (run directories read back, grouped and labelled),
:mod:`.layout` (what a task hands the report: its section, paper tables and
paired units; a task without one gets each run's own tables), :mod:`.common`
(the helpers every task's section shares), :mod:`.paired` (paired comparisons
between two models on the same items), :mod:`.paper_layouts` (paper-equivalent
tables placed beside the exact ones), :mod:`.tables` (captioned tables and
figures, Markdown/CSV/PNG/SVG), :mod:`.html` (the self-contained page) and
:mod:`.build` (:func:`build_report`). Each task's section lives in its own
folder under :mod:`probe.tasks`. Numbers in, files out: no model code.
"""

from probe.reports.compare.build import build_report
from probe.reports.compare.runs import Run, load_run, load_runs

__all__ = ["build_report", "Run", "load_run", "load_runs"]
