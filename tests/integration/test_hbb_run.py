"""HBB end to end with the real smollm2: two instances, both option orders, HBB-SG, two CrowS pairs."""

from __future__ import annotations

import json
import math

import pytest

pytestmark = pytest.mark.integration


def test_smollm2_hbb_tiny_run(tmp_path, smollm2, shared_data):
    from probe.runs.runner import RunOptions
    from probe.runs.task_run import run_task
    from probe.tasks import get

    out = tmp_path / "run"
    task = get("hbb")
    cfg = task.make_config(dict(categories=("gender",), n_boot=50, crows_pairs=True, crows_limit=2))
    summary = run_task(task, cfg, smollm2, output=out, limit=2, options=RunOptions(progress=False)).summary
    assert summary["n_instances"] == 2 and summary["n_distinct_questions"] == 4
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    mcq = [r for r in records if r["meta"]["kind"] == "mcq"]
    assert len(mcq) == 4
    for r in mcq:
        assert abs(sum(r["probs"]) - 1) < 1e-6
        assert 0.05 < r["mass"] <= 1.0  # the labels a/b carry real mass after the Table 11 prompt
    for r in (json.loads(x) for x in (out / "instances.jsonl").read_text().splitlines()):
        for v in ("hbb", "hbb_swapavg", "hbb_sg"):
            assert 0.0 <= r[f"{v}_S"] <= 100.0 and not math.isnan(r[f"{v}_S"])
    crows = summary["crows_pairs"]["by_bias_type"][0]
    assert crows["bias_type"] == "all" and crows["n"] == 2
