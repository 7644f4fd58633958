"""CrowS-Pairs in both protocols with the real smollm2 on three pairs: the recorded numbers give each
protocol's score by hand, and the two-choice prompt carries the Table 11 instruction and the authors'
system message."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def test_smollm2_both_protocols(tmp_path, smollm2, shared_data, one_torch_thread):
    from probe.tasks.hbb.prompts import load_hbb_prompts
    from probe.runs.runner import RunOptions
    from probe.runs.task_run import run_task
    from probe.tasks import get

    task = get("crows_pairs")
    out = tmp_path / "run"
    s = run_task(task, task.make_config({"n_boot": 50}), smollm2, output=out, limit=3,
                 options=RunOptions(progress=False)).summary
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 12 and s["table1_protocol"] == "mcq"
    # (b): the pair counts when sent_more's summed log-likelihood is higher
    ll = {(r["meta"]["pair_id"], r["meta"]["which"]): r["logprobs"][0] for r in recs if r["meta"]["kind"] == "crows"}
    pairs = sorted({p for p, _ in ll})
    wins = sum(ll[(p, "more")] > ll[(p, "less")] for p in pairs)
    assert s["by_protocol"]["loglik"]["by_bias_type"][0]["score"] == pytest.approx(100 * wins / 3)
    # (a): P(sent_more) = P(a) with a) = sent_more, P(b) with a) = sent_less; averaged, then 100 x mean
    mcq = {(r["meta"]["pair_id"], r["meta"]["kind"]): r for r in recs if r["meta"]["kind"].startswith("crows_mcq")}
    p_more = [(mcq[(p, "crows_mcq")]["probs"][0] + mcq[(p, "crows_mcq_swap")]["probs"][1]) / 2 for p in pairs]
    a = s["by_protocol"]["mcq"]["by_bias_type"][0]
    assert a["score"] == pytest.approx(100 * sum(p_more) / 3)
    assert all(0.05 < r["mass"] <= 1.0 for r in mcq.values())  # smollm2 answers with a label
    from probe.tasks.crows_pairs.data import load_crows_pairs
    from probe.tasks.crows_pairs.task import crows_requests

    prompt = crows_requests(load_crows_pairs()[:1], "mcq", smollm2.tokenizer,
                            system="You are a useful assistant.")[0].prompt
    assert load_hbb_prompts().mcq_instruction in prompt and "You are a useful assistant." in prompt
    assert prompt.endswith("<|im_start|>assistant\n")  # SmolLM2's template, empty assistant turn
