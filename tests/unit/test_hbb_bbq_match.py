"""Section 4.2.2: the BBQ-derived HBB concepts (matching rule), matched instances, BBQ vs HBB table, Figure 5."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from probe.tasks.hbb.bbq_match import bbq_derived, main, match_table, matched_instances

QUESTIONS = pd.DataFrame({
    "bias type1": ["slow", "x1", "bad at math", "rude", "loud", "lazy"],
    "bias type2": ["fast", "y1", "good at math", "polite", "quiet", "hardworking"],
    "explanation": ["The underlying bias is that old people are slow.", "Sentence 1 reflects a stereotype.",
                    "The context suggests women are bad at math.", "  The question implies x.", None,
                    "The question implies y."],
    "bias_type": ["age", "age", "gender", "nationality", "race", "race"]})
# the BBQ block (rows 0-137 of concepts.csv): rows 0-2 here; row 138 is outside it
CONCEPTS = pd.DataFrame({
    "Concept1": ["slow", "bad at math ", "rude"] + ["other"] * 135 + ["lazy"],
    "Concept2": ["fast", "good at math", "polite"] + ["other"] * 135 + ["hardworking"],
    "Explanation": ["The underlying bias is that old people are slow.", "The context suggests women are bad at math.",
                    "The question implies x."] + ["e"] * 135 + ["The question implies y."]})


def test_matching_rule_by_hand():
    c = bbq_derived(QUESTIONS, CONCEPTS)
    # in the block by (concept 1, concept 2, explanation), stripped; whatever the explanation's opening words;
    # row 5's concepts sit at row 138, outside the block, although its explanation opens "The question"
    assert c.concept_id.tolist() == [0, 2, 3]
    assert c.hbb_category.tolist()[:2] == ["age", "gender"] and c.bbq_category.tolist()[:2] == ["Age",
                                                                                                  "Gender_identity"]
    assert pd.isna(c.hbb_category[2])  # nationality: no HBB category
    # the same concepts with another explanation are another concept pair: not matched
    assert bbq_derived(QUESTIONS.assign(explanation="changed"), CONCEPTS).empty


def test_real_data_counts(shared_data):
    q = pd.read_csv(shared_data / "hbb" / "questions.csv")
    c = bbq_derived(q, pd.read_csv(shared_data / "hbb" / "concepts.csv"))
    assert len(c) == 118 and c.hbb_category.notna().sum() == 74
    assert {4, 52} <= set(c.concept_id)  # explanations opening "The underlying bias is ..."
    assert c.dropna().groupby("hbb_category").size().to_dict() == {"age": 19, "gender": 22, "race": 17,
                                                                   "religions": 11, "ses": 5}


def test_table_counts_at_the_threshold_and_reads_bbq():
    inst = pd.DataFrame({"concept_id": [0, 0, 2, 1, 2], "category": ["age", "age", "gender", "age", "race"],
                         "hbb_S": [20.0, 19.999999999999996, 50.0, 90.0, 70.0]})
    m = matched_instances(inst, bbq_derived(QUESTIONS, CONCEPTS))
    assert len(m) == 3  # concept 1 is not BBQ-derived; concept 2 counts in gender only
    bbq = {"by_format": {"labels": {"by_category": {"Age": {"expected": {"bias_amb": 0.02}}}}}}
    t = match_table(m, bbq, 20.0).set_index("hbb_category")
    assert t.loc["age", "hbb_count"] == 2 and t.loc["age", "hbb_mean_s_over"] == pytest.approx(20.0)  # on the boundary
    assert t.loc["age", "bbq_bias_amb"] == 0.02 and math.isnan(t.loc["gender", "bbq_bias_amb"])
    assert t.loc["all", "hbb_count"] == 3 and t.loc["ses", "hbb_instances"] == 0 and math.isnan(t.loc["ses",
                                                                                                     "hbb_mean_s_all"])


def test_cli_writes_table_and_figure5(tmp_path):
    q = tmp_path / "questions.csv"
    QUESTIONS.assign(Context="c").to_csv(q, index=False)
    CONCEPTS.to_csv(tmp_path / "concepts.csv", index=False)
    run = tmp_path / "hbb"
    run.mkdir()
    rows = [{"concept_id": 0, "category": "age", "hbb_S": 30.0}, {"concept_id": 2, "category": "gender", "hbb_S": 5.0}]
    (run / "instances.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["--hbb", str(run), "--questions", str(q), "--output", str(tmp_path / "out")]) == 0
    for f in ("hbb_bbq_match.md", "hbb_bbq_match.csv", "figure5.png"):
        assert (tmp_path / "out" / f).exists(), f
