"""What a person reads: the terminal gets the headline, the warnings and the paths (the whole report with
--verbose); a multi-run report names each warning once with its runs; Markdown is escaped the Markdown way
(no HTML entity in any .md file or terminal line); one report per run folder."""

from __future__ import annotations

import re

import probe
from probe.commands.run import _print_combined
from probe.reports.compare.tables import md_text
from probe.runs.results import grouped_warnings, print_run

ENTITY = re.compile(r"&(?:gt|lt|amp|quot|#\d+);")


def test_markdown_escapes_are_backslashes_not_entities():
    assert md_text("S >= 20, p < 0.05, A & B") == "S >= 20, p < 0.05, A & B"
    assert md_text("no data/<Category>.jsonl") == "no data/\\<Category>.jsonl"
    assert md_text("<b>x</b> &amp;") == "\\<b>x\\</b> \\&amp;"
    assert not ENTITY.search(md_text("<script>alert(1)</script> & <img> >= 1"))


def test_grouped_warnings_name_each_warning_once_with_its_runs():
    got = grouped_warnings([("bbq, a", "w1"), ("bbq, b", "w1"), ("bbq, a", "w2"), ("bbq, a", "w1")])
    assert got == ["bbq, a; bbq, b: w1", "bbq, a: w2"]
    assert grouped_warnings([]) == []


def test_a_run_prints_headline_warnings_and_paths_not_the_report(tiny_lm, tmp_path, capsys):
    out = tmp_path / "run"
    e = probe.evaluate(tiny_lm, "bbq", limit=4, output=out, progress=False)
    print_run(e, verbose=False)
    short = capsys.readouterr().out
    assert "## Headline" in short and "## Warnings" in short and "small sample" in short
    assert f"Full report: {out / 'report.html'}, {out / 'report.md'}" in short
    assert len(short.splitlines()) < 20 and "## Runs" not in short
    print_run(e, verbose=True)
    full = capsys.readouterr().out
    assert full.strip() == (out / "report.md").read_text(encoding="utf-8").strip()
    for text in [short, full, *(p.read_text(encoding="utf-8") for p in out.rglob("*.md"))]:
        assert not ENTITY.search(text), ENTITY.search(text).group(0)
    # one report per run folder: report/ keeps tables and figures only
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
    assert not (out / "report" / "report.md").exists() and not (out / "report" / "report.html").exists()
    _print_combined([e, e], out, verbose=False)
    both = capsys.readouterr().out
    assert both.count("small sample") == 1  # the same warning once, its runs named


def test_no_internal_key_in_a_warning_or_headline_label():
    from probe.reports.headline import headline_table, phrase, report_warnings

    low = {"mean": 0.2, "floor": 0.1, "n_below_floor": 3}
    summary = {"label_mass": {"by_category": {"race": low}},
               "results": [{"setting": "plain", "benchmark": "mmlu", "mass": {"iso": low}}]}
    text = " ".join(report_warnings(summary, terms={"iso": "isolated questions (iso)"}))
    assert "category race" in text and "label_mass" not in text and "by_category" not in text
    summary = {"results": [{"setting": "plain", "benchmark": "mmlu", "mass": {"iso": low}}]}
    text = " ".join(report_warnings(summary, terms={"iso": "isolated questions (iso)"}))
    assert "plain, mmlu, isolated questions (iso)" in text and "results[" not in text
    terms = {"hbb_swapavg": "both option orders averaged", "share": "share of instances over the threshold"}
    assert phrase("hbb_swapavg all", terms) == "both option orders averaged, all items"
    row = {"task": "hbb", "model": "m", "metric": "share", "subgroup": "hbb_swapavg all", "estimator": "",
           "value": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 40, "headline": True, "terms": terms}
    head = headline_table([row]).iloc[0]
    assert (head.Metric, head.Subgroup) == ("share of instances over the threshold",
                                            "both option orders averaged, all items")


def test_hbb_table1_says_why_a_cell_is_empty():
    import numpy as np
    import pandas as pd

    from probe.tasks.hbb.tables import table1

    df = pd.DataFrame({"S": np.zeros(4), "category": "ses", "concept_id": [1, 1, 2, 2]})
    row = table1({"m": df}, n_boot=20).iloc[0]
    assert row["HBB (S ↓)"] == "n/a (no instance at S ≥ 20)" and row["S 95% CI"] == "n/a (no instance at S ≥ 20)"
    assert row["share 95% CI"] != "[nan, nan]" and "nan" not in " ".join(map(str, row.values))


def test_a_limited_runs_left_out_strata_are_named_in_words():
    from probe.reports.headline import report_warnings

    cov = {"n_items": 8, "n_available": 1508, "limit": 8, "n_left_out": 1500,
           "strata": {"bias_type": {"left_out": ["age"]}}}
    [w] = report_warnings({"coverage": cov})
    assert w == "limited run: 8 of 1508 items (--limit 8); left out: bias type age."
    [w] = report_warnings({"coverage": cov}, terms={"bias_type": "kind of bias"})
    assert "left out: kind of bias age" in w


def test_a_limited_runs_left_out_values_are_named_in_words_too():
    from probe.reports.headline import report_warnings

    cov = {"n_items": 8, "n_available": 90, "limit": 8, "n_left_out": 82,
           "strata": {"context": {"left_out": ["neutral", "nochar", 3]}}}
    [w] = report_warnings({"coverage": cov}, terms={"context": "context kind", "nochar": "no characteristics"})
    assert w.endswith("left out: context kind neutral, no characteristics, 3.")
