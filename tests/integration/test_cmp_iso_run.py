"""End-to-end iso/cmp run: tiny random model (fast) and one real smollm2 check (integration)."""

from __future__ import annotations

import math

import pytest

from experiments.cmp_iso import CmpIsoConfig, SettingSpec, build_summary, run_model
from probe.reports.cmp_iso_tables import write_report
from probe.io import read_records


@pytest.fixture(scope="module")
def long_tiny_lm():
    """A private tiny model whose context window fits the released prompts (its BPE is near byte level)."""
    from tests.tiny import tiny_lm

    lm = tiny_lm(seed=1)
    lm.model.config.max_position_embeddings = 2048  # rotary positions: any length works
    return lm


def _cfg(tmp_path, **kw):
    base = dict(models=("tiny",), benchmarks=("stereoset", "redditbias"), max_pairs=2, round_size=1, n_iter=200, n_boot=100,
                settings=(SettingSpec(), SettingSpec(neutral=True)), out_dir=str(tmp_path),
                comparisons=(("direct", "direct+neutral"),))
    base.update(kw)
    return CmpIsoConfig(**base)


def test_tiny_run_records_resume_and_report(tmp_path, long_tiny_lm, shared_data):
    cfg = _cfg(tmp_path)
    run_model(cfg, "tiny", tmp_path, progress=False, lm=long_tiny_lm)
    recs, _ = read_records(tmp_path / "records" / "tiny.jsonl")
    assert len(recs) == 2 * 2 * 4 * 2  # benchmarks x pairs x prompts x settings
    for r in recs:
        assert set(r["probs"]) == set(r["labels"]) and math.isclose(sum(r["probs"].values()), 1.0, rel_tol=1e-6)
        assert 0.0 < r["label_mass"] <= 1.0
    assert {tuple(r["labels"]) for r in recs} == {("Yes", "No"), ("A", "B"), ("Yes", "No", "Skip"), ("A", "B", "C")}
    before = (tmp_path / "records" / "tiny.jsonl").read_bytes()
    run_model(cfg, "tiny", tmp_path, progress=False, lm=long_tiny_lm)  # resume: nothing left to score
    assert (tmp_path / "records" / "tiny.jsonl").read_bytes() == before
    summary = build_summary(recs, cfg)
    assert {r["benchmark"] for r in summary["results"]} == {"stereoset", "redditbias"}
    assert all(r["cmp"]["n_pairs"] == 2 for r in summary["results"])
    write_report(summary, tmp_path)
    assert (tmp_path / "tables" / "table2_direct.md").exists() and (tmp_path / "pg_iso_vs_cmp.png").exists()
    assert (tmp_path / "provenance-tiny.json").exists()


def test_tiny_cot_scores_boxed_answer(tmp_path, long_tiny_lm, shared_data):
    cfg = _cfg(tmp_path, benchmarks=("stereoset",), max_pairs=1, settings=(SettingSpec(reasoning="cot"),),
               max_new_tokens=4)
    run_model(cfg, "tiny", tmp_path, progress=False, lm=long_tiny_lm)
    recs, _ = read_records(tmp_path / "records" / "tiny.jsonl")
    assert len(recs) == 4 and all("generation" in r and "boxed_found" in r for r in recs)


@pytest.mark.integration
def test_smollm2_direct_label_mass(tmp_path, smollm2, shared_data):
    cfg = _cfg(tmp_path, benchmarks=("bbq",), max_pairs=1, settings=(SettingSpec(),))
    run_model(cfg, "smollm2", tmp_path, progress=False, lm=smollm2)
    recs, _ = read_records(tmp_path / "records" / "smollm2.jsonl")
    assert len(recs) == 4
    # "My answer would be:" + " Yes"/" A": the labels carry a real share of the next-token mass
    assert all(r["label_mass"] > 0.05 for r in recs)
