"""experiments.hbb: config loading, the join of question scores into instances, and a resumable
end-to-end run on the tiny random model (short prompts: the tiny model has 256 positions)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from experiments.hbb import HBBConfig, instance_frame, load_config, question_probs, run
from probe.data.hbb import HBBConcept, build_instances
from probe.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


def test_configs_parse_and_unknown_keys_are_rejected(tmp_path):
    for name in ("hbb.yaml", "hbb_quick.yaml"):
        assert isinstance(load_config(ROOT / "configs" / name), HBBConfig)
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: smollm2\nsample_concept: 3\n", encoding="utf-8")
    with pytest.raises(InputError, match="field 'sample_concept'.*unknown key"):
        load_config(bad)
    both = tmp_path / "both.yaml"
    both.write_text("sample_concepts: 3\nper_cell: 2\n", encoding="utf-8")
    with pytest.raises(InputError, match="at most one"):
        load_config(both)
    assert load_config(None, {"limit": 5, "model": None}).limit == 5


def test_crows_config_parses():
    from experiments.crows_pairs import CrowsConfig

    assert load_config(ROOT / "configs" / "crows_pairs.yaml", cls=CrowsConfig).model == "smollm2"


@pytest.fixture
def descriptors(shared_data):
    from probe.data.hbb import load_descriptors

    return load_descriptors(shared_data / "hbb" / "descriptors.json")


def test_join_computes_s_for_each_variant(descriptors):
    concept = HBBConcept(0, "[[X]] sat.", "[[X]] ran.", "[[X]] slept.", "c1", "c2", "age")
    [inst] = [i for i in build_instances([concept], descriptors, categories=("ses",)) if i.descriptor_type == 1]
    q1, q2 = inst.question_1.id, inst.question_2.id
    recs = [
        {"question_id": q1, "kind": "mcq", "probs": [0.8, 0.2], "label_mass": 0.5},
        {"question_id": q2, "kind": "mcq", "probs": [0.3, 0.7], "label_mass": 0.5},
        {"question_id": q1, "kind": "mcq_swap", "probs": [0.4, 0.6], "label_mass": 0.5},  # P(s1) = 0.6
        {"question_id": q2, "kind": "mcq_swap", "probs": [0.5, 0.5], "label_mass": 0.5},  # P(s1) = 0.5
        {"question_id": q1, "kind": "sg", "option": 1, "ppl": 2.0},
        {"question_id": q1, "kind": "sg", "option": 2, "ppl": 6.0},  # P(A) = 0.75
        {"question_id": q2, "kind": "sg", "option": 1, "ppl": 4.0},
        {"question_id": q2, "kind": "sg", "option": 2, "ppl": None},  # invalid -> NaN
    ]
    df = instance_frame([inst], question_probs(recs)).iloc[0]
    assert df.hbb_S == pytest.approx(50.0) and df.hbb_direction == 1.0
    assert df.hbb_swapavg_p1 == pytest.approx(0.7) and df.hbb_swapavg_p2 == pytest.approx(0.4)
    assert df.hbb_swapavg_S == pytest.approx(30.0)
    assert math.isnan(df.hbb_sg_S) and df.hbb_sg_p1 == pytest.approx(0.75)


SHORT = dict(mcq_instruction="Pick a or b.", mcq_question="{context}\na) {option_a}\nb) {option_b}",
             mcq_labels=("a", "b"), mcq_answer_cue="Answer:", sg_instruction="Story:", sg_prefix="{instruction} {context}")


def test_tiny_run_end_to_end_and_resume(tmp_path, tiny_lm, descriptors, monkeypatch):
    import probe.prompts.hbb as prompts

    monkeypatch.setattr(prompts, "load_hbb_prompts", lambda: prompts.HBBPrompts(**SHORT))
    data = tmp_path / "hbb"
    data.mkdir()
    (data / "questions.csv").write_text(
        "Context,s1,s2,bias type1,bias type2,explanation,bias_type,target\n"
        "[[X]] sat.,[[X]] ran.,[[X]] slept.,fast,slow,e,age,\n"
        "[[X]] met a cat.,[[X]]'s cat hid.,[[X]] sang.,shy,bold,e,race,\n",
        encoding="utf-8",
    )
    (data / "descriptors.json").write_text(json.dumps(descriptors), encoding="utf-8")
    out = tmp_path / "run"
    cfg = HBBConfig(output_dir=str(out), data_dir=str(data), categories=("ses",), n_boot=50,
                    chunk_size=5, crows_pairs=True, crows_limit=2, threads=None)
    summary = run(cfg, lm=tiny_lm)
    assert summary["n_instances"] == 2 * 2  # 2 concepts x 2 SES types x 1 pair
    assert summary["n_distinct_questions"] == 2 * 4
    assert summary["forward_passes"]["by_kind"] == {"mcq": 8, "mcq_swap": 8, "sg": 16}
    assert summary["paper_equivalent_generations"]["questions_x10"] == 80
    assert set(summary["variants"]) == {"hbb", "hbb_swapavg", "hbb_sg"}
    assert summary["crows_pairs"]["n_pairs"] == 2
    for f in ("records.jsonl", "instances.jsonl", "summary.json", "timing.json", "hbb_hist.png",
              "tables/table1.md", "tables/table2.csv", "tables/table8.md", "tables/table9.md", "tables/crows.md"):
        assert (out / f).exists(), f
    lines = (out / "records.jsonl").read_text().splitlines()
    assert len(lines) == 32
    first = (out / "instances.jsonl").read_text()
    # resume: a torn last line is redone, nothing else is rescored, results are identical
    (out / "records.jsonl").write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:10], encoding="utf-8")
    run(cfg, lm=tiny_lm)
    timing = json.loads((out / "timing.json").read_text())
    assert sum(v["n"] for k, v in timing["scored_this_invocation"].items() if k != "crows") == 1
    # the one rescored request runs in a different batch; float32 round-off (~1e-8) may differ
    again = [json.loads(x) for x in (out / "instances.jsonl").read_text().splitlines()]
    before = [json.loads(x) for x in first.splitlines()]
    assert [r["id"] for r in again] == [r["id"] for r in before]
    for a, b in zip(again, before):
        for k in ("hbb_S", "hbb_swapavg_S", "hbb_sg_S"):
            assert a[k] == pytest.approx(b[k], abs=1e-5)
