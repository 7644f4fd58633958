"""The TransformerLens adapter on the real SmolLM2: `evaluate(bbq, backend="tl")` equals the eager Hugging
Face run (scores and captured residuals), with prefix sharing on."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.integration
pytest.importorskip("transformer_lens")


def test_bbq_scores_and_capture_equal_eager_hf(shared_data):
    import probe
    from probe.models import load_model
    from probe.models.tl_adapter import bridge_of

    try:
        lm = load_model("smollm2", attn_implementation="eager")  # the bridge runs eager attention
    except Exception as exc:  # pragma: no cover - only when the wheel is missing
        pytest.skip(f"smollm2 not available: {exc}")
    keys = ["blocks.3.hook_resid_post@last", "blocks.28.hook_resid_post@last"]
    hf = probe.evaluate(lm, "bbq", limit=4, capture=keys, progress=False, threads=1)
    tl = probe.evaluate(lm, "bbq", limit=4, capture=[*keys, "blocks.3.ln2.hook_normalized@last"], backend="tl",
                        progress=False, threads=1)
    assert bridge_of(lm.model) is None  # a copy was wrapped
    assert list(tl.records["id"]) == list(hf.records["id"]) and tl.activations.ids == hf.activations.ids
    for a, b in zip(tl.records["logprobs"], hf.records["logprobs"]):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    for k in keys:
        np.testing.assert_allclose(tl.activations[k], hf.activations[k], rtol=0,
                                   atol=1e-4 * float(np.abs(hf.activations[k]).max()), err_msg=k)
    assert np.isfinite(tl.activations["blocks.3.ln2.hook_normalized@last"]).all()
