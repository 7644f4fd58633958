"""`probe data build hbb` and `probe metrics hbb`."""

from __future__ import annotations

import json

import pytest

from probe.cli import main


@pytest.fixture
def tiny_hbb(tmp_path, shared_data):
    d = tmp_path / "hbb"
    d.mkdir()
    (d / "questions.csv").write_text(
        "Context,s1,s2,bias type1,bias type2,explanation,bias_type,target\n"
        "[[X]] sat.,[[X]] ran.,[[X]] slept.,fast,slow,e,age,\n", encoding="utf-8")
    (d / "descriptors.json").write_text((shared_data / "hbb" / "descriptors.json").read_text(), encoding="utf-8")
    return d


def test_build_writes_one_line_per_instance_and_prints_counts(tiny_hbb, tmp_path, capsys):
    out = tmp_path / "hbb.jsonl"
    assert main(["data", "build", "hbb", "--data-dir", str(tiny_hbb), "--output", str(out)]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 67
    printed = capsys.readouterr().out
    assert "Race" in printed and "40" in printed and "67" in printed
    first = lines[0]
    assert {"id", "category", "descriptor_type", "identity_1", "identity_2"} <= set(first)
    assert first["question_1"]["options"] == ["She ran.", "She slept."]


def test_metrics_hbb_from_probabilities(tmp_path, capsys):
    f = tmp_path / "p.jsonl"
    rows = [{"category": "age", "descriptor_type": 1, "p1": 0.9, "p2": 0.4, "concept_id": 0},
            {"category": "age", "descriptor_type": 1, "p1": 0.5, "p2": 0.45, "concept_id": 1},
            {"category": "race", "descriptor_type": 2, "p1": None, "p2": 0.5, "concept_id": 1}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["metrics", "hbb", "--instances", str(f), "--output", str(tmp_path / "t.csv")]) == 0
    out = capsys.readouterr().out
    assert "instances 3 (invalid 1)" in out and "count 1, mean S 50.00" in out
    assert (tmp_path / "t.csv").exists()
    f.write_text('{"category": "age", "descriptor_type": 1, "p1": 1.5, "p2": 0.4}\n', encoding="utf-8")
    assert main(["metrics", "hbb", "--instances", str(f)]) == 1
    assert "line 1, field 'p1'" in capsys.readouterr().err
