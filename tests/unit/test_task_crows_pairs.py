"""The ``crows_pairs`` task: requests carry the pair in ``meta``; the metric joins the two sentences back;
a tiny-model run writes the table and the report."""

from __future__ import annotations

import json
import math

import pytest

from probe.tasks.crows_pairs.data import CrowsPair
from probe.errors import ProbeError
from probe.runs.record import records_to_frame
from probe.runs.runner import RunOptions
from probe.runs.task_run import run_task
from probe.tasks import get
from probe.tasks.crows_pairs.task import crows_requests, crows_summary, pair_frame

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


SHORT = dict(mcq_instruction="Pick a or b.", mcq_question="{context}\na) {option_a}\nb) {option_b}",
             mcq_labels=("a", "b"), mcq_answer_cue="Answer:", sg_instruction="Story:",
             sg_user="{instruction} {context}",
             sg_system="Be useful.", sg_variation_prompt="Vary.", sg_variations_asked=9)


@pytest.fixture
def short_prompts(monkeypatch):
    """The Table 11 instruction is longer than the tiny model's 256 positions: a short stand-in."""
    short_two_choice(monkeypatch)


def short_two_choice(monkeypatch, instruction: str = "Pick a or b.") -> None:
    """Short prompts for the tiny model: HBB's, and the two-choice prompt CrowS-Pairs (and StereoSet) ask."""
    import probe.tasks.crows_pairs.prompts as two
    import probe.tasks.hbb.prompts as prompts

    short = prompts.HBBPrompts(**{**SHORT, "mcq_instruction": instruction})
    monkeypatch.setattr(prompts, "load_hbb_prompts", lambda: short)
    monkeypatch.setattr(two, "load_two_choice", lambda: two.TwoChoicePrompt(instruction, ("a", "b"), "Answer:"))


def test_mcq_requests_both_orders_with_the_table11_instruction(tiny_lm):
    from probe.tasks.crows_pairs.prompts import load_two_choice
    from probe.tasks.hbb.prompts import load_hbb_prompts

    reqs = crows_requests(PAIRS[:1], "mcq", tiny_lm.tokenizer)
    assert [r.id for r in reqs] == ["crows:0|crows_mcq", "crows:0|crows_mcq_swap"]
    assert {r.group for r in reqs} == {"crows:0|mcq"} and reqs[0].labels == ("a", "b")
    assert load_two_choice().instruction in reqs[0].prompt
    # one Table 11 text: HBB's MCQ asks the prompt CrowS-Pairs holds
    assert load_hbb_prompts().mcq_instruction == load_two_choice().instruction
    assert (load_hbb_prompts().mcq_labels, load_hbb_prompts().mcq_answer_cue) == (("a", "b"), "Answer:")
    assert "a) A x.\nb) B x." in reqs[0].prompt and "a) B x.\nb) A x." in reqs[1].prompt
    assert reqs[0].prompt.endswith("<|im_start|>assistant\n")  # chat template, empty assistant turn
    assert [r.meta["more_label"] for r in reqs] == ["a", "b"]
    base = crows_requests(PAIRS[:1], "mcq", tiny_lm.tokenizer, swap_order=False, chat_template=False)
    assert len(base) == 1 and base[0].prompt.endswith("\nAnswer:")
    assert len(crows_requests(PAIRS, "both", tiny_lm.tokenizer)) == 8
    with pytest.raises(ValueError, match="needs the tokenizer"):
        crows_requests(PAIRS, "mcq")
    with pytest.raises(ProbeError, match="protocol must be one of"):
        get("crows_pairs").make_config({"protocol": "masked"})


def test_mcq_records_join_by_order():
    import pandas as pd

    from probe.tasks.crows_pairs.task import mcq_pair_frame

    rows = [("crows:0", "crows_mcq", (0.8, 0.2), 0.5), ("crows:0", "crows_mcq_swap", (0.6, 0.4), 0.05),
            ("crows:1", "crows_mcq", (0.3, 0.7), 0.9), ("crows:1", "crows_mcq_swap", (0.5, 0.5), 0.9)]
    recs = records_to_frame([{"id": f"{p}|{k}", "kind": "label", "probs": pr, "mass": m, "finite": True,
                              "meta": {"kind": k, "pair_id": p, "bias_type": "age", "direction": "stereo"}}
                             for p, k, pr, m in rows])
    f = mcq_pair_frame(recs).set_index("id")
    # a) = sent_more: P(a); a) = sent_less: P(b); the pair's P(sent_more) is their mean
    assert f.loc["crows:0", "p_more"] == pytest.approx((0.8 + 0.4) / 2)
    assert f.loc["crows:1", "p_more"] == pytest.approx((0.3 + 0.5) / 2)
    summary, table = crows_summary(recs, n_boot=0)
    assert summary["protocol"] == "mcq" and summary["n_pairs"] == 2 and summary["forward_passes"] == 4
    a = summary["by_bias_type"][0]
    assert a["score"] == pytest.approx(50.0) and a["score_argmax"] == pytest.approx(50.0)
    assert a["n_refused"] == 1 and a["share_refused"] == pytest.approx(25.0) and a["n_answering"] == 1
    assert table.attrs["title"].startswith("CrowS-Pairs, protocol (a)")
    assert isinstance(recs, pd.DataFrame)


def test_tiny_run_both_protocols(tmp_path, tiny_lm, shared_data, short_prompts):
    out = tmp_path / "run"
    task = get("crows_pairs")
    e = run_task(task, task.make_config({"n_boot": 20}), tiny_lm, output=out, limit=3,
                 options=RunOptions(progress=False))
    s = e.summary
    assert s["n_records"] == 12 and s["table1_protocol"] == "mcq" and s["protocol"] == "loglik"  # top level: (b)
    assert s["by_protocol"]["loglik"]["n_pairs"] == 3 and s["by_protocol"]["loglik"]["forward_passes"] == 6
    assert s["by_protocol"]["mcq"]["n_pairs"] == 3 and s["by_protocol"]["mcq"]["forward_passes"] == 6
    mcq = s["by_protocol"]["mcq"]["by_bias_type"][0]
    assert 0.0 <= mcq["score"] <= 100.0 and mcq["n_questions"] == 6 and 0.0 < mcq["mean_mass"] <= 1.0
    for f in ("records.jsonl", "summary.json", "tables/crows_mcq.md", "tables/crows_loglik.csv", "report.md",
              "timing.json"):
        assert (out / f).exists(), f
    report = (out / "report.md").read_text()
    assert "protocol (a) two-choice question" in report
    assert "protocol (b) whole-sentence causal log-likelihood" in report and "pseudo-log-likelihood" in report
    # the HBB paper's sampling (T = 0.8) is scored in the same pass: its paper-equivalent score sits beside (a)'s
    assert s["by_protocol"]["mcq"]["paper_equivalent"]["temperature"] == 0.8
    assert 0.0 <= mcq["paper_score"] <= 100.0 and 0.0 <= mcq["paper_score_a_more"] <= 100.0
    timing = json.loads((out / "timing.json").read_text())["scored_this_invocation"]
    assert {"crows", "crows_mcq", "crows_mcq_swap"} <= set(timing)
    assert str(shared_data / "crows_pairs") in (out / "provenance.json").read_text()
    # protocol (b) alone gives the numbers it gave before protocol (a) existed (same records)
    b = run_task(task, task.make_config({"protocol": "loglik"}), tiny_lm, output=None, limit=3,
                 options=RunOptions(progress=False)).summary
    assert b["protocol"] == "loglik" and b["forward_passes"] == 6
    assert [(r["bias_type"], r["n_more"], r["score"]) for r in b["by_bias_type"]] == \
        [(r["bias_type"], r["n_more"], r["score"]) for r in s["by_protocol"]["loglik"]["by_bias_type"]]
