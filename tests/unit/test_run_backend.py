"""`probe run --backend tl`, `probe.evaluate(backend="tl")` and `probe activations --backend tl`: the one
Runner and Scorer on the TransformerLens-wrapped model (tiny Llama, the demo task)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("transformer_lens")

from probe.activations import load  # noqa: E402
from probe.cli import main  # noqa: E402
from probe.models.tl_adapter import bridge_of  # noqa: E402
from probe.runs.runner import RunOptions  # noqa: E402

KEY = "blocks.1.hook_resid_post@last"
TL_KEY = "blocks.1.ln2.hook_normalized@last"  # a hook point only the bridge has


def _logprobs(out):
    return [json.loads(line)["logprobs"] for line in (out / "records.jsonl").read_text().splitlines()]


def test_run_backend_tl_matches_hf(model_dir, tmp_path):
    common = ["run", "demo", "--model", str(model_dir), "--limit", "8", "--no-progress", "--threads", "1"]
    assert main([*common, "--output", str(tmp_path / "hf"), "--capture", KEY]) == 0
    assert main([*common, "--output", str(tmp_path / "tl"), "--backend", "tl", "--capture", KEY, TL_KEY]) == 0
    (ids_hf, hf), (ids_tl, tl) = load(tmp_path / "hf"), load(tmp_path / "tl")
    assert ids_tl == ids_hf and tl[TL_KEY].shape == (8, 64)
    # SDPA (hf default) vs the bridge's eager attention: float noise only
    np.testing.assert_allclose(tl[KEY], hf[KEY], rtol=0, atol=1e-4)
    for a, b in zip(_logprobs(tmp_path / "tl"), _logprobs(tmp_path / "hf")):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)
    prov = json.loads((tmp_path / "tl" / "provenance.json").read_text())
    assert "transformer_lens" in json.dumps(prov)


def test_evaluate_backend_tl_leaves_the_callers_model(tiny_lm):
    import probe

    e = probe.evaluate(tiny_lm, "demo", limit=4, capture=[KEY, TL_KEY], backend="tl", progress=False)
    assert e.activations.ids == list(e.records["id"]) and e.activations[TL_KEY].shape == (4, 64)
    ref = probe.evaluate(tiny_lm, "demo", limit=4, capture=[KEY], progress=False)
    np.testing.assert_allclose(e.activations[KEY], ref.activations[KEY], rtol=0, atol=1e-4)
    assert bridge_of(tiny_lm.model) is None
    with pytest.raises(ValueError, match="backend must be"):
        RunOptions(backend="vllm")


def test_activations_command_backend_tl(model_dir, tmp_path, capsys):
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Person B has wrinkles{'!' * i}. Who is old?",
                                         "labels": ["A", "B"], "cue": "has wrinkles"}) + "\n" for i in range(3)))
    for backend in ("hf", "tl"):
        assert main(["activations", "--model", str(model_dir), "--input", str(items), "--output",
                     str(tmp_path / backend), "--layers", "0,1", "--positions", "last,mean:cue", "--backend", backend,
                     "--quiet"]) == 0
        assert json.loads(capsys.readouterr().out)["backend"] == backend
    (ids_hf, hf), (ids_tl, tl) = load(tmp_path / "hf"), load(tmp_path / "tl")
    assert ids_hf == ids_tl and hf.keys() == tl.keys()
    for k in hf:
        np.testing.assert_allclose(tl[k], hf[k], rtol=0, atol=1e-4, err_msg=k)
