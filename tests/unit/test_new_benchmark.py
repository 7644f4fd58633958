"""Adding a benchmark touches only its own task and data modules, docs and tests (docs/examples/new_benchmark.md):
the worked example, registered as a plugin under ``probe.tasks``, gets its report section, its paired tests and
its sampling check from what its task declares, and probe's own code never names it."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

import probe
from probe.tasks import available, get

ROOT = Path(probe.__file__).parent
EXAMPLE = ROOT.parent / "docs" / "examples" / "probe_tinybbq"
TARGET = "tinybbq:TinyBBQTask"


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """TinyBBQ installed as its package would be: its two modules and a dist-info with the ``probe.tasks``
    entry point its ``pyproject.toml`` declares."""
    site = tmp_path / "site"
    site.mkdir()
    for name in ("tinybbq.py", "tinybbq_data.py"):
        shutil.copy(EXAMPLE / name, site / name)
    info = site / "probe_tinybbq-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: probe-tinybbq\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[probe.tasks]\ntinybbq = {TARGET}\n")
    monkeypatch.syspath_prepend(str(site))
    yield get("tinybbq")
    for name in ("tinybbq", "tinybbq_data"):
        sys.modules.pop(name, None)


def test_probe_never_names_the_new_benchmark():
    hits = [p for p in ROOT.rglob("*.py") if re.search(r"tinybbq|TinyBBQ", p.read_text(encoding="utf-8"))]
    assert hits == []
    assert f'tinybbq = "{TARGET}"' in (EXAMPLE / "pyproject.toml").read_text()


def test_the_task_declares_its_report_and_its_check(plugin):
    assert available()["tinybbq"] == TARGET
    layout = plugin.reporting.layout()
    assert layout.title == "TinyBBQ (worked example)" and layout.rank is None and layout.paper_tables is None
    spec = layout.paired_spec([])
    assert spec.task == "tinybbq" and spec.cluster == "scenario"
    check = plugin.paper.check()
    assert (check.unit, check.max_new_tokens, check.same_prompts) == ("scenario", 4, True)
    assert plugin.paper.sampling(plugin.make_config({})) == ({"temperature": 0.7, "top_p": 1.0},)


def test_report_and_sampling_check_end_to_end(plugin, tmp_path, one_torch_thread):
    from probe.runs.results import combined_report
    from probe.runs.runner import RunOptions, Runner, load
    from probe.studies.sampling_check import report_markdown, run_check
    from tests.unit._report_runs import tiny_named

    dirs = []
    for name, seed in (("tiny-a", 0), ("tiny-b", 1)):
        d = tmp_path / name
        probe.evaluate(tiny_named(name, seed), "tinybbq", output=d, progress=False, threads=1)
        dirs.append(d)
    manifest = combined_report(dirs, tmp_path / "report", n_boot=50)
    names = [t["name"] for t in manifest["tables"]]
    assert "tinybbq_metrics" in names
    paired = [n for n in names if n.startswith("paired_tinybbq_")]
    assert paired == ["paired_tinybbq_tiny_a_vs_tiny_b_tinybbq"]
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "## TinyBBQ (worked example)" in md
    caption = (tmp_path / "report" / "tables" / f"{paired[0]}.md").read_text(encoding="utf-8")
    assert "n = 12 questions" in caption and "bootstrap over scenarios" in caption

    opts = RunOptions(progress=False)
    runner = Runner(load(tiny_named("tiny-a", 0), opts), opts)
    check = run_check("tinybbq", runner, n_prompts=8, k=3, n_boot=20, seed=0)
    # the progress bar changes nothing computed
    again = run_check("tinybbq", runner, n_prompts=8, k=3, n_boot=20, seed=0, progress=True)
    assert again.prompts == check.prompts and again.aggregate == check.aggregate
    assert check.settings["temperature"] == 0.7 and check.settings["unit"] == "scenario"
    assert check.summary["n_prompts"] == 8 and check.summary["n_generations"] == 24
    assert set(check.aggregate) == {"Acc_amb", "S_amb", "n"}
    json.dumps(check.to_dict(), default=str)
    assert "Acc_amb" in report_markdown(check)


def test_an_unknown_task_or_one_without_a_check_is_refused(tiny_lm):
    from probe.errors import ProbeError
    from probe.runs.runner import RunOptions, Runner
    from probe.studies.sampling_check import run_check

    runner = Runner(tiny_lm, RunOptions(progress=False))
    for name in ("bbq", "nosuchtask"):
        with pytest.raises(ProbeError, match="no check for task .*choose from implicitbbq, hbb, cmp_iso"):
            run_check(name, runner)
