"""``benchmarks/gpu.py``: its CPU smoke mode runs end to end, and its 8B shape is Llama-3.1-8B's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def _data() -> Path:
    import os

    return Path(os.environ.get("PROBE_DATA", ROOT.parent / "shared" / "data"))


def test_the_8b_shape_has_llama_3_1_8b_parameter_count():
    """Built on the meta device (no memory): 8,030,261,248 parameters, as Meta's model card's 8.03 B."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    import gpu

    values = dict(gpu.SHAPES["llama-3.1-8b"])
    values.pop("architectures")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **values))
    assert sum(p.numel() for p in model.parameters()) == 8_030_261_248
    assert type(model).__name__ == "LlamaForCausalLM"


def test_sg_variations_are_distinct_and_the_same_length():
    import gpu

    s = "The nurse was careful with the patient"
    got = [gpu.rotated(s, j) for j in range(10)]
    assert got[0] == s and len(set(got)) == 10
    assert all(sorted(g.split()) == sorted(s.split()) for g in got[1:7])  # rotations: the same words


def test_smoke_mode_on_the_cpu(tmp_path):
    if not (_data() / "bbq").is_dir() or not (_data() / "hbb").is_dir():
        pytest.skip(f"BBQ / HBB data not found under {_data()} (set PROBE_DATA)")
    import gpu

    out = tmp_path / "gpu.json"
    res = gpu.main(["--device", "cpu", "--small", "--dtypes", "float32", "--limit", "2", "--repeats", "1",
                    "--threads", "1", "--json", str(out)])
    saved = json.loads(out.read_text())
    assert saved["environment"]["device"] == "cpu" and saved["small"] is True
    assert saved["gemm_peak"]["float32"]["flops_per_s"] > 0
    shape = saved["shape"]
    assert shape["shape"] == "tiny" and shape["bbq_requests"] == 4  # 2 questions x (texts + letters)
    row = shape["dtypes"]["float32"]
    bbq, hbb = row["bbq"], row["hbb"]
    assert bbq["requests"] == 4 and bbq["unique_tokens"] > 0 and 0 < bbq["share_of_gemm_peak"] < 1
    assert (bbq["batching"]["requested_batch_size"], bbq["batching"]["batch_size"]) == ("auto", 16)  # CPU auto
    assert bbq["peak_memory"]["bytes"] > 0
    assert hbb["mcq"]["requests"] == shape["hbb_mcq_requests"] == 2 * shape["hbb_questions"]  # both orders
    assert hbb["sg"]["requests"] == shape["hbb_sg_requests"] == 2 * 2 * shape["hbb_questions"]  # 2 options x n=2
    proj = hbb["projection"]
    assert proj["hours"] == pytest.approx(hbb["seconds"] / shape["hbb_instances"] * 103_649 / 3600)
    assert proj["paper_hours_8b_a100"] == 18.0
    le = row["lm_eval"]
    if "skipped" in le:
        assert "lm_eval" in le["skipped"]
    else:  # float32, same requests: lm-eval agrees to float32 rounding, on the same token splits
        assert le["max_abs_diff"] <= 1e-4 and le["token_split_mismatches"] == 0 and le["probe_speedup"] > 0
    assert row["capture"]["keys"] == 2 and row["capture"]["capture_over_score"] > 0
    assert "real" not in saved  # --small loads no real model
    assert res["shape"]["dtypes"]["float32"]["bbq"]["requests"] == 4
