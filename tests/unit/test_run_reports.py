"""Every task run writes report.md and report.html (headline first) and the flat results table."""

from __future__ import annotations

import math

import pytest

import probe
from probe.reports.compare.tables import ci_cell, fmt_ci
from probe.runs.results import COLUMNS, report_warnings

# every registered task writes report.md and report.html (headline first) and its flat results: checked by
# probe.testing.check_task for each (tests/unit/test_check_task.py)


def test_in_memory_evaluation_has_results_too(tiny_lm):
    e = probe.evaluate(tiny_lm, "crows_pairs", limit=2, progress=False)
    assert list(e.results.columns) == COLUMNS and (e.results.metric == "score").any()


def test_small_sample_cells_say_n_a_instead_of_nan_or_zero_width():
    assert ci_cell(0.92, 0.92, 0.92, 1) == "0.920 [n/a] (n = 1)"
    assert ci_cell(0.92, 0.92, 0.92, 24, clusters=1) == "0.920 [n/a (1 unit)] (n = 24)"
    assert ci_cell(0.5, math.nan, math.nan, 2, clusters=2.0) == "0.500 [n/a (2 units)] (n = 2)"
    assert ci_cell(float("nan"), float("nan"), float("nan"), 2) == "n/a (n = 2)"
    assert ci_cell(0.5, 0.4, 0.6, 40) == "0.500 [0.400, 0.600] (n = 40)"
    assert ci_cell(0.0, 0.0, 0.0, 20) == "0.000 [no variation] (n = 20)"  # every unit at 0: said in words
    assert fmt_ci(0.92, [0.92, 0.92]) == "0.92 [CI n/a: zero width]"
    assert fmt_ci(0.5, [math.nan, math.nan]) == "0.50 [CI n/a]"
    assert fmt_ci(0.5, None) == "0.50"
    from probe.tasks.implicitbbq.tables import _fmt  # the ImplicitBBQ / BBQ Table 2 cells follow the same rule

    assert _fmt(0.11, [0.11, 0.11]) == "0.11 [CI n/a: zero width]" and _fmt(0.0, [0.0, 0.0]) == "0.00 [no variation]"


def test_low_answer_mass_is_warned_about():
    summary = {"by_format": {"labels": {"mass": {"mean": 0.04, "floor": 0.1, "n_below_floor": 9, "n": 10}}}}
    [w] = report_warnings(summary)
    assert "low answer mass" in w and "0.04" in w
    assert report_warnings({"mass": {"mean": 0.9, "floor": 0.1, "n_below_floor": 0, "n": 10}}) == []


def test_a_one_cluster_headline_names_its_cluster_count(tiny_lm, tmp_path):
    """Two BBQ items of one template instance: one cluster, so no interval, and the headline says why."""
    from probe.runs.results import headline_table

    e = probe.evaluate(tiny_lm, "bbq", limit=2, output=tmp_path / "b", progress=False, categories=["Age"])
    rows = e.results.to_dict("records")
    head = headline_table([{**r, "headline": True} for r in rows if r["estimator"] == "expected"
                           and r["subgroup"] == "all"])
    cells = " ".join(head["Value [95% CI] (n)"])
    assert "n/a (1 unit)" in cells and "nan" not in cells
    assert "limited run" in (tmp_path / "b" / "report.md").read_text()  # a --limit run says so before the numbers


def test_html_warnings_are_separate_escaped_boxes():
    from probe.reports.compare.html import render

    page = render("T", "intro text", [], warnings=["low answer mass <b>", "small sample"])
    assert page.count('<p class="warning">') == 2
    assert "low answer mass &lt;b&gt;" in page and "<b>" not in page.split("<header>")[1].split("</header>")[0]
    assert page.index("small sample") < page.index("intro text")
