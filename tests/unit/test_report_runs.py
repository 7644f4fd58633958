"""`probe report` end to end on tiny-model runs of every task: both models in every layout, paired tables whose
'all' rows agree with the runs' own numbers, every file written, the page self-contained and rendered by
headless Chromium (skipped, with the reason, where no browser is installed); `probe demo`'s report.html."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from probe.cli import main as cli_main
from probe.reports.compare.tables import plain

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, one_torch_thread) -> dict[str, list[Path]]:
    from tests.unit._report_runs import make_runs

    return make_runs(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("report")
    dirs = [str(d) for ds in runs.values() for d in ds]
    assert cli_main(["report", *dirs, "--output", str(out), "--n-boot", "100"]) == 0
    return out, json.loads((out / "manifest.json").read_text())


def _table(out: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(out / "tables" / f"{name}.csv")


def test_every_task_has_both_models_in_its_layouts(report):
    out, manifest = report
    both = {"tiny-a", "tiny-b"}
    rows = {  # table -> the column naming the models (None: models are columns)
        "implicitbbq_table2_zero_shot_oneword_expected": "Model", "implicitbbq_table2_ci_expected": "Model",
        "bbq_labels_expected": "Model", "bbq_oneword_argmax": "Model", "demo_by_context": "Model",
        "hbb_table1": "Model", "cmp_iso_table2_direct": "Model", "cmp_iso_table2_direct+neutral_argmax": "Model",
        # the papers' own estimators, beside the exact tables
        "implicitbbq_table2_zero_shot_oneword_paper": "Model", "hbb_table1_paper": "Model",
        "cmp_iso_table2_direct_paper": "Model",
    }
    for name, col in rows.items():
        labels = {re.sub(r" \[.*\]| \(.*\)", "", str(x)) for x in _table(out, name)[col]}
        assert both <= labels, (name, labels)
    for name in ("hbb_table2", "hbb_table9", "crows_pairs", "implicitbbq_per_dimension_zero_shot_oneword"):
        cols = " ".join(_table(out, name).columns)
        assert "tiny-a" in cols and "tiny-b" in cols, (name, cols)
    # the second bbq config of tiny-a stays apart, labelled by what differs
    assert {"tiny-a [seed=0]", "tiny-a [seed=1]", "tiny-b"} <= set(_table(out, "bbq_labels_expected")["Model"])
    for t in manifest["tables"]:
        assert (out / t["md"]).is_file() and (out / t["csv"]).is_file()
        if t["name"] != "runs":
            caption = (out / t["md"]).read_text().strip().splitlines()[-1]
            assert all(w in caption.lower() for w in ("estimator", "ci", "n")), (t["name"], caption)
    names = [t["name"] for t in manifest["tables"]]
    for exact, paper in (("implicitbbq_table2_zero_shot_oneword_argmax", "implicitbbq_table2_zero_shot_oneword_paper"),
                         ("hbb_table1", "hbb_table1_paper"), ("cmp_iso_table2_direct", "cmp_iso_table2_direct_paper")):
        assert names.index(paper) == names.index(exact) + 1, (exact, paper)
        assert "paper-equivalent" in (out / "tables" / f"{paper}.md").read_text()
    assert "implicitbbq_figure4_oneword" in {f["name"] for f in manifest["figures"]}
    for f in manifest["figures"]:
        assert (out / f["png"]).stat().st_size > 1000 and (out / f["svg"]).stat().st_size > 1000
    assert {f["task"] for f in manifest["figures"]} >= {"bbq", "implicitbbq", "hbb", "crows_pairs", "cmp_iso"}


def test_paired_tables_for_every_task_agree_with_the_runs(report, runs):
    out, manifest = report
    paired = {t["task"] for t in manifest["tables"] if t["name"].startswith("paired_")}
    assert paired == {"bbq", "implicitbbq", "demo", "hbb", "crows_pairs", "cmp_iso"}
    # CrowS-Pairs: the 'all' row's difference is the difference of the two runs' scores
    scores = [next(r for r in json.loads((d / "summary.json").read_text())["by_bias_type"] if r["bias_type"] == "all")
              ["score"] for d in runs["crows_pairs"]]
    t = _table(out, "paired_crows_pairs_tiny_a_vs_tiny_b_crows_pairs")
    allrow = t[t.Category == "all"].iloc[0]
    assert float(plain(allrow["Δ score [95% CI]"]).split(" ")[0]) == pytest.approx(scores[0] - scores[1], abs=0.006)
    assert allrow["n pairs"] == 12 and " / " in allrow["McNemar A+B− / A−B+"]
    # BBQ: same with the summaries' expected acc_amb
    acc = [json.loads((d / "summary.json").read_text())["by_format"]["labels"]["by_category"]["all"]["expected"]
           ["acc_amb"] for d in runs["bbq"][:2]]
    t = _table(out, "paired_bbq_tiny_a_seed_0_vs_tiny_b_numbered_options")
    allrow = t[t.Category == "all"].iloc[0]
    assert float(plain(allrow["Δ accuracy, ambiguous [95% CI]"]).split(" ")[0]) == pytest.approx(acc[0] - acc[1], abs=0.006)
    # different samples of the same model share no unit: said, not tabulated
    assert "No unit scored by both runs" in (out / "report.md").read_text()


def test_report_html_is_one_self_contained_page(report):
    out, manifest = report
    page = (out / "report.html").read_text()
    assert page.count("<img") == len(manifest["figures"]) == page.count("data:image/png;base64,")
    assert page.count("<table") == len(manifest["tables"])
    for item in manifest["tables"] + manifest["figures"]:
        assert f'id="{item["name"]}"' in page and f'href="#{item["name"]}"' in page
    assert not re.search(r"<script|https?://|src=\"(?!data:)", page)


def _browser() -> str | None:
    return next((b for b in map(shutil.which, BROWSERS) if b), None)


def test_report_renders_in_headless_chromium(report, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip("no Chromium found (tried " + ", ".join(BROWSERS) + "); on Debian: apt-get install -y chromium")
    out, manifest = report
    page = (out / "report.html").resolve().as_uri()
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=1"]
    dom = subprocess.run(flags + ["--dump-dom", page], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console  # the page has no script: any console message is an error
    loads = re.findall(r"FileURLLoader::Start: (\S+)", dom.stderr)
    loads += re.findall(r"URLLoader.*?(https?://\S+)", dom.stderr)
    assert all(u == page for u in loads), loads  # nothing fetched besides the page itself
    assert dom.stdout.count("<table") == len(manifest["tables"])
    assert dom.stdout.count("<img") == len(manifest["figures"])
    shot = out / "report_screenshot.png"
    subprocess.run(flags[:7] + [f"--screenshot={shot}", "--window-size=1280,2000", page], capture_output=True,
                   timeout=120, check=True)
    assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 20_000
    if os.environ.get("PROBE_SCREENSHOT_DIR"):  # keep it for a person to look at
        shutil.copy(shot, Path(os.environ["PROBE_SCREENSHOT_DIR"]) / "report_screenshot.png")


def test_demo_run_writes_report_html_with_one_figure(runs):
    d = runs["demo"][0]
    page = (d / "report.html").read_text()
    assert page.count("<img") == 1 and "explicit vs implicit" in page.lower() and "<script" not in page
    assert (d / "figures" / "demo_by_dimension.png").is_file() and (d / "figures" / "demo_by_dimension.svg").is_file()
    assert "95% percentile bootstrap" in page


def _check_reports():
    """``tools/check_reports.py`` as a module (tools/ is not a package)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "tools" / "check_reports.py"
    spec = importlib.util.spec_from_file_location("check_reports", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_labels_are_the_papers_words_not_internal_keys(report, runs):
    out, _ = report
    t1 = _table(out, "hbb_table1")
    assert {"tiny-a (one option order)", "tiny-a (both orders averaged)"} <= set(t1.Model)
    assert not any("=s1" in str(m) for m in t1.Model)
    assert all("nan" not in str(c) for c in t1.to_numpy().ravel())  # an empty cell says why, never nan
    head = _table(out, "headline")
    sub = set(head[head.Task == "implicitbbq"].Subgroup)
    assert sub == {"zero-shot, one-word answer, explicit identity", "zero-shot, one-word answer, implicit cues"}
    assert set(head[head.Task == "cmp_iso"].Subgroup) >= {"BBQ, direct answer, prompt variant 0"}
    assert all(m.startswith(("numbered options, ", "one-word answer, ")) for m in head[head.Task == "bbq"].Metric)
    ci = _table(out, "implicitbbq_table2_ci_expected")
    assert set(ci["Strategy/format"]) == {"zero-shot, one-word answer"}
    # every Markdown file of the runs and the report, as tools/check_reports.py reads them: no HTML entity,
    # no internal key, no resampled interval from fewer than 10 units, one report per folder
    check = _check_reports()
    for root in [out, *(d for ds in runs.values() for d in ds)]:
        problems, n = check.check(root)
        assert n > 0 and problems == [], problems[:5]


def test_check_reports_finds_what_a_reader_must_not_see(tmp_path):
    check = _check_reports()
    bad = tmp_path / "bad"
    (bad / "report").mkdir(parents=True)
    (bad / "report.md").write_text(
        "# r\n\n> **Warning:** low answer mass (label_mass.by_category.race)\n\n| Model | v |\n|---|---|\n"
        "| smollm2 (a)=s1) | S &gt;= 20 |\n| m | 0.500 [0.100, 0.900] (n = 4) |\n| m | 0.500 [0.200, 0.800] (n = 4) |\n"
        "| m | 0.250 [0.046, 0.699] (n = 4) |\n| bias_amb | `--set hbb_sg=false` summary.json |\n")
    (bad / "report" / "report.md").write_text("# again\n")
    problems, _ = check.check(bad)
    text = "\n".join(problems)
    assert "label_mass.by_category" in text and "(a)=s1)" in text and "HTML entity" in text
    assert "two reports" in text and "'bias_amb'" in text
    intervals = [p for p in problems if "fewer than 10 units" in p]
    assert len(intervals) == 2  # 0.25 of 4 with Wilson's interval [0.046, 0.699] is exact: allowed at any n
    assert "key 'hbb_sg" not in text and "key 'summary" not in text  # a command in backticks, a file: no labels
    good = tmp_path / "good"
    good.mkdir()
    (good / "report.md").write_text("| m | 0.250 [n/a (4 units)] (n = 4) |\n> **Warning:** category race, S >= 20\n")
    assert check.check(good)[0] == []


def test_check_reports_finds_zero_width_and_table_intervals_from_few_units(tmp_path):
    """What a bootstrap over one unit, or a Monte Carlo interval at n = 6, looks like (HBB's hybrid count read
    ``0.0 [0.0, 0.0]`` beside n = 6): found in a line, a table row of n < 10 and results.csv; certified bounds,
    the exact range beside them and Wilson's interval are exact and pass."""
    check = _check_reports()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "report.md").write_text(
        "| m | 0.000 [0.000, 0.000] (n = 1) |\n\n"
        "| group | n | parsed certified | parsed hybrid | mean S | share |\n|---|---|---|---|---|---|\n"
        "| ses | 4 | [0.0, 4.0] | 0.4 [0.1, 0.7] | 3.0 [1.0, 5.0] | 0.250 [0.046, 0.699] |\n"
        "| all | 12 | [0.0, 6.0] | 1.0 [0.0, 2.0] | 3.0 [2.0, 4.0] | 0.250 [0.089, 0.532] |\n")
    (bad / "results.csv").write_text(
        "task,metric,subgroup,estimator,value,ci_low,ci_high,n,n_clusters\n"
        "hbb,mean_s,all,,3.0,1.0,5.0,6,6\n"
        "hbb,count,parsed all,\"sampled + parsed, hybrid: exact head + each question's tail draws\",0.4,0.1,0.7,6,\n"
        "hbb,count,parsed all,\"sampled + parsed, certified [0.0, 6.0]\",1.0,0.0,2.0,6,\n")
    problems, _ = check.check(bad)
    assert len(problems) == 3, problems
    # the hybrid's interval resamples no units (each prompt's own tail draws): allowed at any n, as a bound is
    assert "(n = 1)" in problems[0] and "'mean S'" in problems[1] and "results.csv:2:" in problems[2]
    good = tmp_path / "good"
    good.mkdir()
    (good / "report.md").write_text(
        "| hbb | count | parsed, all items | sampled + parsed (10 samples, S >= 20), certified [0.0, 6.0] | "
        "2.0 [1.0, 3.0] (n = 6) |\n\n| group | n | parsed hybrid |\n|---|---|---|\n| ses | 6 | 0.0 [n/a (6 units)] |\n")
    # a data set's name is what a user types: `probe data fetch --help` lists hbb_sg, not an internal key
    help_text = tmp_path / "help.txt"
    help_text.write_text("usage: probe data fetch {bbq,cmp_iso,crows_pairs,hbb,hbb_sg,stereoset}\n")
    assert check.check(good, [help_text])[0] == []
