"""The ``crows_pairs`` task: requests carry the pair in ``meta``; the metric joins the two sentences back;
a tiny-model run writes the table and the report."""

from __future__ import annotations

import json
import math

import pytest

from probe.data.crows_pairs import CrowsPair
from probe.runs.record import records_to_frame
from probe.runs.runner import RunOptions
from probe.runs.task_run import run_task
from probe.tasks import get
from probe.tasks.crows_pairs import crows_requests, crows_summary, pair_frame

PAIRS = [CrowsPair("crows:0", "A x.", "B x.", "stereo", "age"),
         CrowsPair("crows:1", "C y.", "D y.", "antistereo", "race")]


def test_requests_are_grouped_by_pair_with_meta():
    reqs = crows_requests(PAIRS)
    assert [r.id for r in reqs] == ["crows:0|more", "crows:0|less", "crows:1|more", "crows:1|less"]
    assert [r.text for r in reqs] == ["A x.", "B x.", "C y.", "D y."]
    assert {r.group for r in reqs[:2]} == {"crows:0"} and reqs[0].prefix == ""
    assert reqs[3].meta == {"kind": "crows", "pair_id": "crows:1", "which": "less", "bias_type": "race",
                            "direction": "antistereo"}


def test_pairs_join_back_and_non_finite_is_invalid():
    recs = records_to_frame([
        {"id": r.id, "kind": "perplexity", "logprobs": [lp], "finite": fin, "meta": dict(r.meta)}
        for r, lp, fin in zip(crows_requests(PAIRS), [-3.0, -5.0, -2.0, float("nan")], [True, True, True, False])
    ])
    frame = pair_frame(recs)
    assert frame.ll_more.tolist() == [-3.0, -2.0] and frame.ll_less[0] == -5.0 and math.isnan(frame.ll_less[1])
    summary, table = crows_summary(recs)
    assert summary["n_pairs"] == 2 and summary["forward_passes"] == 4
    overall = summary["by_bias_type"][0]
    assert overall["bias_type"] == "all" and overall["n"] == 1 and overall["n_invalid"] == 1
    assert overall["score"] == pytest.approx(100.0)
    assert table.attrs["title"].startswith("CrowS-Pairs")


def test_tiny_run(tmp_path, tiny_lm, shared_data):
    out = tmp_path / "run"
    task = get("crows_pairs")
    e = run_task(task, task.make_config(), tiny_lm, output=out, limit=3, options=RunOptions(progress=False))
    assert e.summary["n_pairs"] == 3 and e.summary["forward_passes"] == 6 and e.summary["n_records"] == 6
    for f in ("records.jsonl", "summary.json", "tables/crows.md", "tables/crows.csv", "report.md", "timing.json"):
        assert (out / f).exists(), f
    assert "crows" in json.loads((out / "timing.json").read_text())["scored_this_invocation"]
    assert str(shared_data / "crows_pairs") in (out / "provenance.json").read_text()
