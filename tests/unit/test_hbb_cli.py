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


def test_metrics_hbb_counts_s_exactly_at_the_threshold(tmp_path, capsys):
    """p1 = 0.6, p2 = 0.4 is S = 20 on paper and 19.999999999999996 in floats: it counts at threshold 20."""
    f = tmp_path / "p.jsonl"
    rows = [{"category": "age", "descriptor_type": 1, "p1": 0.6, "p2": 0.4},
            {"category": "age", "descriptor_type": 1, "p1": 0.7, "p2": 0.5},
            {"category": "age", "descriptor_type": 1, "p1": 0.6, "p2": 0.41}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["metrics", "hbb", "--instances", str(f), "--threshold", "20"]) == 0
    assert "S >= 20: count 2, mean S 20.00" in capsys.readouterr().out


def test_build_hbb_variations_with_a_generator_model(tiny_hbb, tmp_path, model_dir, monkeypatch, capsys):
    """One generation per concept pair and option by the named model, recorded (and resumed), parsed into
    variations.jsonl with the original first."""
    import probe.tasks.hbb.prompts as prompts

    short = prompts.HBBPrompts(mcq_instruction="", mcq_question="", mcq_labels=("a", "b"), mcq_answer_cue="",
                               sg_instruction="", sg_user="", sg_system="",
                               sg_variation_prompt="Vary [[sentence1_generated]] as [[picked_concept2]].",
                               sg_variations_asked=9)
    monkeypatch.setattr(prompts, "load_hbb_prompts", lambda: short)  # the tiny model has 256 positions
    calls = []  # option 1, option 2 alternate; both options' sentences alike would be refused as one sentence

    def parse(text, limit=None):
        calls.append(text)
        return [f"[[X]] v{len(calls) % 2}."] * (limit or 9)

    import probe.tasks.hbb.variations as variations

    monkeypatch.setattr(variations, "parse_variations", parse)  # where the builder looks it up
    out = tmp_path / "var"
    args = ["data", "build", "hbb-variations", "--data-dir", str(tiny_hbb), "--output", str(out), "--model",
            str(model_dir), "--n", "3", "--max-new-tokens", "4", "--threads", "1"]
    assert main(args) == 0
    gens = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    assert [g["id"] for g in gens] == ["0|sg_variations|1", "0|sg_variations|2"]
    assert [json.loads(x) for x in (out / "variations.jsonl").read_text().splitlines()] == [
        {"concept_id": 0, "s1": ["[[X]] ran.", "[[X]] v1.", "[[X]] v1."], "s2": ["[[X]] slept.", "[[X]] v0.", "[[X]] v0."]}]
    printed = capsys.readouterr().out
    assert "1 concept pairs, 2 generations" in printed and "refused: 0 copies of the context, 0 pairs" in printed
    before = (out / "generations.jsonl").read_text()
    assert main(args) == 0 and (out / "generations.jsonl").read_text() == before  # resumed: nothing redone
    assert main(args[:-4] + ["--n", "11"]) == 1
