"""Table 1 assembled from run summaries: each column read from its run, protocols named, gaps explained."""

from __future__ import annotations

import json
import math

import pytest

from probe.errors import ProbeError
from probe.tasks.hbb.table1 import load_summary, main, table1, table1_row

HBB = {"variants": {"hbb": {"overall": {"count": 7, "mean_s": 31.5, "threshold": 20.0}}},
       "paper_equivalent": {"all": {"expected_mean_s": 36.6, "expected_count": 1070.45,
                                    "noise_floor_expected_count": 1052.1}}}
BBQ = {"by_format": {"labels": {"by_category": {"all": {"expected": {"bias_amb": 0.0107, "acc_dis": 0.6539}}}}}}
CROWS = {"protocol": "mcq", "by_protocol": {
    "mcq": {"protocol": "mcq", "by_bias_type": [{"bias_type": "all", "score": 66.5}, {"bias_type": "age", "score": 1}]},
    "loglik": {"protocol": "loglik", "by_bias_type": [{"bias_type": "all", "score": 58.0}]}}}
SS = {"by_protocol": {"mcq": {"rows": [
    {"split": "intrasentence", "bias_type": "overall", "icat": 56.19},
    {"split": "intrasentence", "bias_type": "gender", "icat": 1.0},
    {"split": "intersentence", "bias_type": "overall", "icat": 62.2}]}}}


def test_every_column_from_its_run():
    row = table1_row("m", HBB, BBQ, CROWS, SS)
    assert row["HBB (S)"] == 31.5 and row["HBB (count)"] == 7
    assert (row["HBB (S), paper-equivalent"], row["HBB (count), paper-equivalent"], row["HBB (count), noise floor"]) \
        == (36.6, 1070.45, 1052.1)
    assert row["BBQ-ambig (0)"] == 0.0107 and row["BBQ-disambig"] == pytest.approx(65.39)
    assert row["CS (50), (a) two-choice question"] == 66.5
    assert row["SS-intra, (a) three-choice question"] == 56.19 and row["SS-inter, (a) three-choice question"] == 62.2
    assert row["_notes"] == []
    assert table1_row("m", crows=CROWS, cs_protocol="loglik")["CS (50), (b) whole-sentence causal log-likelihood"] == 58.0


def test_missing_cells_are_nan_and_explained():
    row = table1_row("m", {"variants": {"hbb": {"overall": {"count": 0, "mean_s": None, "threshold": 20.0}}}})
    assert row["HBB (count)"] == 0 and math.isnan(row["HBB (S)"]) and math.isnan(row["HBB (count), noise floor"])
    assert math.isnan(row["BBQ-ambig (0)"]) and math.isnan(row["SS-inter, (a) three-choice question"])
    notes = " ".join(row["_notes"])
    assert "no instance at S >= 20" in notes and "no bbq run" in notes and "dev.json is not in the shared data" in notes
    # an older CrowS-Pairs summary (protocol (b) only) cannot fill the (a) column, and says so
    old = {"by_bias_type": [{"bias_type": "all", "score": 60.0}]}
    row = table1_row("m", crows=old)
    assert math.isnan(row["CS (50), (a) two-choice question"]) and "it has loglik" in " ".join(row["_notes"])
    assert table1_row("m", crows=old, cs_protocol="loglik")["CS (50), (b) whole-sentence causal log-likelihood"] == 60.0
    # CS nested in an hbb run
    assert table1_row("m", {**HBB, "crows_pairs": CROWS["by_protocol"]["mcq"]})["CS (50), (a) two-choice question"] \
        == 66.5


def test_cli_writes_md_and_csv(tmp_path):
    for name, s in (("hbb", HBB), ("bbq", BBQ), ("crows", CROWS)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(s))
    assert main(["--model", "m", "--hbb", str(tmp_path / "hbb"), "--bbq", str(tmp_path / "bbq"), "--crows",
                 str(tmp_path / "crows"), "--output", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "table1.md").read_text()
    assert "| m | 31.50 | 7 | 36.60 | 1070 | 1052 | 0.0107 | 65.39 | 66.50 | nan | nan |" in md and "SS missing" in md
    assert (tmp_path / "out" / "table1.csv").read_text().startswith("Model,HBB (S)")
    with pytest.raises(ProbeError, match="no summary.json"):
        load_summary(tmp_path / "nope")
    assert len(table1([table1_row("a", HBB), table1_row("b", HBB)])) == 2
