"""What a person reads: the terminal gets the headline, the warnings and the paths (the whole report with
--verbose); a multi-run report names each warning once with its runs; Markdown is escaped the Markdown way
(no HTML entity in any .md file or terminal line); one report per run folder."""

from __future__ import annotations

import re

import probe
from probe.commands.run import _print_combined, _print_run
from probe.reports.compare.tables import md_text
from probe.runs.results import grouped_warnings

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
    _print_run(e, verbose=False)
    short = capsys.readouterr().out
    assert "## Headline" in short and "## Warnings" in short and "small sample" in short
    assert f"Full report: {out / 'report.html'}, {out / 'report.md'}" in short
    assert len(short.splitlines()) < 20 and "## Runs" not in short
    _print_run(e, verbose=True)
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
