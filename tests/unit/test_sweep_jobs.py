"""The study driver's job list: one job per (run, model, shard) for a Slurm array or Ray, then fold, then report."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _common():
    spec = importlib.util.spec_from_file_location("experiments_common", ROOT / "experiments" / "common.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_job_list_has_one_job_per_run_model_and_shard(tmp_path):
    common = _common()
    cmds = [["probe", "run", "c.yaml", "--model", m, "--output", f"runs/s/r_{m}"] for m in ("a", "b")]
    report = ["probe", "report", "runs/s/r_a", "runs/s/r_b", "--output", "runs/s/report"]
    jobs = common.job_list(cmds, report, 3)
    phase1 = [j for j in jobs if j["phase"] == 1]
    assert [(j["model"], j["shard"]) for j in phase1] == [(m, f"{i}/3") for m in "ab" for i in range(3)]
    assert all(j["argv"][-2:] == ["--shard", j["shard"]] for j in phase1)
    assert [j["argv"] for j in jobs if j["phase"] == 2] == cmds  # fold + summary: the plain commands
    assert jobs[-1]["phase"] == 3 and jobs[-1]["argv"] == report
    assert [j["job"] for j in jobs] == list(range(len(jobs)))
    common.write_jobs(tmp_path, jobs)
    lines = (tmp_path / "array.txt").read_text().splitlines()
    assert len(lines) == 6 and lines[4].endswith("--shard 1/3") and "--model b" in lines[4]
    assert (tmp_path / "finalize.txt").read_text().splitlines()[-1].startswith("probe report")
    assert [json.loads(x) for x in (tmp_path / "jobs.jsonl").read_text().splitlines()] == jobs


def test_one_shard_is_the_plain_command_then_report():
    common = _common()
    cmds = [["probe", "run", "c.yaml", "--model", "a", "--output", "runs/s/r_a"]]
    jobs = common.job_list(cmds, ["probe", "report", "runs/s/r_a", "--output", "runs/s/report"], 1)
    assert [j["phase"] for j in jobs] == [1, 3] and jobs[0]["argv"] == cmds[0] and jobs[0]["shard"] is None
