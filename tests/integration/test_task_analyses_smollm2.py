"""`probe run bbq --model smollm2 --limit 8 --capture ...` then `probe analyze steer` on it (short)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

pytestmark = pytest.mark.integration


def test_steer_bbq_run(shared_data, tmp_path, monkeypatch):
    from probe.cli import main

    monkeypatch.setenv("PROBE_DATA", str(shared_data))
    out, steer = tmp_path / "run", tmp_path / "steer"
    key = "blocks.5.hook_resid_post@last"
    assert main(["run", "bbq", "--model", "smollm2", "--limit", "8", "--capture", key, "--output", str(out),
                 "--no-progress", "--set", "n_boot=200"]) == 0
    assert main(["analyze", "steer", str(out), "--layer", "5", "--direction",
                 "mean-diff:context_condition=ambig,disambig", "--strengths", "0,8", "--output", str(steer),
                 "--no-progress"]) == 0
    table = pd.read_csv(steer / "steering.csv")
    base = json.loads((out / "summary.json").read_text())["by_format"]["labels"]["by_category"]["all"]["expected"]
    assert list(table.strength) == [0.0, 8.0] and table.metric_name.iloc[0] == "labels.bias_amb"
    assert table.metric.iloc[0] == pytest.approx(base["bias_amb"], abs=1e-12)
    assert table.metric.iloc[1] != table.metric.iloc[0]
    assert (steer / "steering.png").is_file()
