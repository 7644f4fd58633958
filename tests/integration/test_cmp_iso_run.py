"""End-to-end ``cmp_iso`` task runs: tiny random model (fast) and one real smollm2 check (integration)."""

from __future__ import annotations

import json
import math

import pytest

import probe
from probe.cli import main as cli_main
from probe.io import read_records

OPTS = dict(benchmarks=["stereoset", "redditbias"], max_pairs=2, round_size=1, n_iter=200, n_boot=100,
            settings=[{"reasoning": "direct"}, {"reasoning": "direct", "neutral": True}],
            comparisons=[["direct", "direct+neutral"]], progress=False, threads=1)


@pytest.fixture(scope="module")
def long_tiny_lm():
    """A private tiny model whose context window fits the released prompts (its BPE is near byte level)."""
    from tests.tiny import tiny_lm

    lm = tiny_lm(seed=1)
    lm.model.config.max_position_embeddings = 2048  # rotary positions: any length works
    return lm


def test_tiny_run_records_resume_and_report(tmp_path, long_tiny_lm, shared_data, capsys):
    e = probe.evaluate(long_tiny_lm, "cmp_iso", output=tmp_path, **OPTS)
    recs, _ = read_records(tmp_path / "records.jsonl")
    assert len(recs) == 2 * 2 * 4 * 2  # benchmarks x pairs x prompts x settings
    for r in recs:
        assert math.isclose(sum(r["probs"]), 1.0, rel_tol=1e-6) and 0.0 < r["mass"] <= 1.0
        assert r["meta"]["kind"] == r["meta"]["task_type"] and r["meta"]["setting"] in ("direct", "direct+neutral")
    assert {tuple(r["options"]) for r in recs} == {("Yes", "No"), ("A", "B"), ("Yes", "No", "Skip"), ("A", "B", "C")}
    # rounds of one pair per benchmark over both settings; a pair's four prompts adjacent
    order = [(r["meta"]["setting"], r["meta"]["benchmark"], r["meta"]["context_pair_id"]) for r in recs]
    assert [o[:2] for o in order[::4]] == [("direct", "stereoset"), ("direct", "redditbias"),
                                           ("direct+neutral", "stereoset"), ("direct+neutral", "redditbias")] * 2
    assert all(len(set(order[i:i + 4])) == 1 for i in range(0, len(order), 4))
    before = (tmp_path / "records.jsonl").read_bytes()
    probe.evaluate(long_tiny_lm, "cmp_iso", output=tmp_path, **OPTS)  # resume: nothing left to score
    assert (tmp_path / "records.jsonl").read_bytes() == before
    assert {r["benchmark"] for r in e.summary["results"]} == {"stereoset", "redditbias"}
    assert all(r["cmp"]["n_pairs"] == 2 for r in e.summary["results"] if r["mode"] != "paper")
    # the paper mode (T = 0.7, top-p = 0.9) keeps the records whose labels the nucleus keeps; the rest are counted
    pe = e.summary["paper_equivalent"]
    assert pe["settings"]["temperature"] == 0.7 and pe["n_unsampleable"] == len(pe["unsampleable_records"])
    assert {c["a"] for c in e.summary["comparisons"]} == {"direct"}
    assert "table2_direct" in e.tables and "table5_direct_argmax" in e.tables
    assert (tmp_path / "tables" / "table2_direct.md").exists() and (tmp_path / "pg_iso_vs_cmp.png").exists()
    assert "| tiny-llama |" in (tmp_path / "tables" / "table2_direct.md").read_text()
    assert (tmp_path / "provenance.json").exists() and (tmp_path / "summary.json").exists()
    # `probe metrics cmp-iso` reads the run's records as they are
    capsys.readouterr()
    assert cli_main(["metrics", "cmp-iso", "--input", str(tmp_path / "records.jsonl"), "--where", "setting=direct",
                     "--where", "benchmark=redditbias", "--n-iter", "200", "--n-boot", "100"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = next(r for r in e.summary["results"] if r["setting"] == "direct" and r["benchmark"] == "redditbias"
                and r["mode"] == "expected")
    assert out["cmp"]["pg"] == pytest.approx(want["cmp"]["pg"]) and out["n_nonfinite_skipped"] == 0


def test_tiny_limit_keeps_pairs_whole(tmp_path, long_tiny_lm, shared_data):
    e = probe.evaluate(long_tiny_lm, "cmp_iso", limit=3, **OPTS)
    # items alternate benchmarks: 2 StereoSet pairs, 1 RedditBias pair, each with all its prompts
    assert e.summary["n_pairs"] == {"stereoset": 2, "redditbias": 1}
    sizes = e.records.groupby(["setting", "benchmark", "context_pair_id"]).size()
    assert len(sizes) == 3 * 2 and set(sizes) == {4}


def test_tiny_cot_greedy_scores_boxed_answer(tmp_path, long_tiny_lm, shared_data):
    opts = {**OPTS, "benchmarks": ["stereoset"], "max_pairs": 1, "settings": [{"reasoning": "cot"}],
            "comparisons": [], "max_new_tokens": 4, "cot_chains": 0, "cot_require_cue": False}
    e = probe.evaluate(long_tiny_lm, "cmp_iso", output=tmp_path, **opts)
    recs, _ = read_records(tmp_path / "records.jsonl")
    gens, _ = read_records(tmp_path / "generations.jsonl")
    assert len(recs) == 4 and len(gens) == 4 and {g["meta"]["kind"] for g in gens} == {"cot_generate"}
    assert all(r["meta"]["kind"] == "cot" and "generation" in r["meta"] and "boxed_found" in r["meta"] for r in recs)
    assert all("chain" not in r["meta"] and "temperature" not in g for r, g in zip(recs, gens))
    assert e.summary["settings"] == ["cot"] and e.summary["cot"]["settings"]["decoding"] == "greedy"
    # cot_require_cue off: a reasoning without a boxed label is scored after an appended "\boxed{"
    assert all(r["cmp"]["n_pairs"] == 1 for r in e.summary["results"])


def test_tiny_cot_sampled_chains_recorded_and_resumed(tmp_path, long_tiny_lm, shared_data):
    opts = {**OPTS, "benchmarks": ["stereoset"], "max_pairs": 1, "settings": [{"reasoning": "cot"}],
            "comparisons": [], "max_new_tokens": 4, "cot_chains": 2}
    e = probe.evaluate(long_tiny_lm, "cmp_iso", output=tmp_path, **opts)
    recs, _ = read_records(tmp_path / "records.jsonl")
    gens, _ = read_records(tmp_path / "generations.jsonl")
    assert len(recs) == len(gens) == 4 * 2
    assert [r["id"].rsplit("|", 1)[1] for r in recs[:2]] == ["chain0", "chain1"]
    assert [r["meta"]["chain"] for r in recs] == [0, 1] * 4
    assert all(g["temperature"] == 0.7 and g["top_p"] == 0.9 and g["seed"] == 0 for g in gens)
    cot = e.summary["cot"]
    assert cot["settings"]["chains"] == 2 and cot["n_chains"] == 8
    # every chain without a boxed label is left out and counted; a prompt with no valid chain is kept with no
    # valid answer (seed 003 appendix B), so the pair still has a PG (issue #23)
    n_no = sum(not r["meta"]["boxed_found"] for r in recs)
    assert cot["n_chains_no_cue"] == n_no
    exp = next(r for r in e.summary["results"] if r["mode"] == "expected")
    assert exp["iso"]["n_pairs"] == exp["cmp"]["n_pairs"] == 1
    n_prompts_none = cot["n_prompts_no_valid_chain"]
    assert exp["iso"]["n_no_valid"] + exp["cmp"]["n_no_valid"] == n_prompts_none
    gens_before, recs_before = (tmp_path / "generations.jsonl").read_bytes(), (tmp_path / "records.jsonl").read_bytes()
    probe.evaluate(long_tiny_lm, "cmp_iso", output=tmp_path, **opts)  # resume: no chain generated or scored again
    assert (tmp_path / "generations.jsonl").read_bytes() == gens_before
    assert (tmp_path / "records.jsonl").read_bytes() == recs_before
    assert (tmp_path / "tables" / "cot_chains.md").exists() and (tmp_path / "tables" / "answering.md").exists()


@pytest.mark.integration
def test_smollm2_direct_label_mass(tmp_path, smollm2, shared_data):
    # parse_exact off: enumerating the generation-mode answer was 9/10 of this test's time and nothing here reads
    # it; it is checked on smollm2 against generate in test_parse_exact_smollm2.py and on this task in the tiny
    # runs above
    e = probe.evaluate(smollm2, "cmp_iso", **{**OPTS, "benchmarks": ["bbq"], "max_pairs": 1,
                                              "settings": [{"reasoning": "direct"}], "comparisons": [],
                                              "parse_exact": False})
    assert len(e.records) == 4
    # the authors' probability mode: "My answer would be:" continued, each label summed over its one-token forms
    # ("Yes", " Yes", "yes", ...): the labels carry a real share of the next-token mass
    assert (e.records["mass"] > 0.05).all()
    assert all(len(ids) >= 2 for t in e.records["token_ids"] for ids in t)
    assert all(r["sampling"][0]["top_p"] == 0.9 for _, r in e.records.iterrows())


@pytest.mark.integration
def test_smollm2_cot_sampled_chains(tmp_path, smollm2, shared_data):
    """The authors' CoT generation mode, sampled chains (K = 2, short chains to stay fast)."""
    opts = {**OPTS, "benchmarks": ["bbq"], "max_pairs": 1, "settings": [{"reasoning": "cot"}], "comparisons": [],
            "cot_chains": 2, "max_new_tokens": 48}
    e = probe.evaluate(smollm2, "cmp_iso", output=tmp_path, **opts)
    gens, _ = read_records(tmp_path / "generations.jsonl")
    assert len(e.records) == len(gens) == 8 and len({g["text"] for g in gens}) > 1  # chains differ
    assert all(g["temperature"] == 0.7 and g["top_p"] == 0.9 for g in gens)
    cot = e.summary["cot"]
    assert cot["n_chains"] == 8 and 0 <= cot["n_chains_no_cue"] <= 8
    assert cot["n_chains_no_cue"] == sum(not b for b in e.records["boxed_found"])
    # every pair is kept, prompts without a valid chain counted (issue #23; seed 003 appendix B)
    exp = next(r for r in e.summary["results"] if r["mode"] == "expected")
    assert exp["iso"]["n_pairs"] == exp["cmp"]["n_pairs"] == 1
    assert exp["iso"]["n_no_valid"] + exp["cmp"]["n_no_valid"] == cot["n_prompts_no_valid_chain"]
    # the authors' chat layout under SmolLM2's own template: the header is the system message, so the
    # template's default system prompt ("... named SmolLM ...") never appears
    from probe.tasks.cmp_iso.data import load_benchmark
    from probe.tasks.cmp_iso.prompts import CmpIsoSetting, build_prompt, render_built

    p = load_benchmark("bbq", shared_data / "cmp_iso")[0].prompts()[0]
    text = render_built(smollm2.tokenizer, build_prompt(p, CmpIsoSetting("cot")))
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant. <|im_end|>\n<|im_start|>user\n")
    assert "SmolLM" not in text and text.endswith("<|im_start|>assistant\n")
