"""Steering by adding a direction to a layer's residual stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probe.models import LoadedModel
from probe.activations.hooks import capture
from probe.scoring import Scorer
from probe.scoring.requests import LabelRequest
from probe.analysis.steering import mean_difference, steer, steering_table
from tests.unit._tiny_models import tiny_llama, tiny_tokenizer


@pytest.fixture(scope="module")
def lm():
    tok = tiny_tokenizer()
    return tiny_llama(tok, n_layers=2), tok


def _resid(model, ids, name="blocks.0.hook_resid_post"):
    with capture(model, [name], lambda h: {"all": h[0]}) as cap:
        logits = model(ids).logits
    return cap.pop()[f"{name}@all"], logits


def test_steer_adds_the_vector_exactly_and_cleans_up(lm):
    model, tok = lm
    ids = torch.tensor([tok("Who is old? Answer:").input_ids])
    base, base_logits = _resid(model, ids)
    v = np.random.default_rng(0).normal(size=64).astype(np.float32)
    with steer(model, 0, v, alpha=2.0):
        steered, logits = _resid(model, ids)
    np.testing.assert_allclose(steered, base + 2.0 * v, atol=1e-5)
    assert not torch.allclose(logits, base_logits)
    with steer(model, -2, v, alpha=0.0):  # -2 is layer 0 of 2; alpha 0 changes nothing
        same, same_logits = _resid(model, ids)
    np.testing.assert_array_equal(same, base)
    assert torch.equal(same_logits, base_logits)
    assert torch.equal(model(ids).logits, base_logits)  # hook removed


def test_steer_rejects_bad_input(lm):
    model, _ = lm
    with pytest.raises(ValueError, match="shape"):
        with steer(model, 0, np.zeros(3)):
            pass
    with pytest.raises(ValueError, match="out of range"):
        with steer(model, 2, np.zeros(64)):
            pass


def test_mean_difference_hand_case():
    X = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [np.nan, 5.0]])
    y = np.array(["old", "old", "young", "young"])
    np.testing.assert_allclose(mean_difference(X, y, "old", normalize=False), [2.0, -2.0])
    np.testing.assert_allclose(mean_difference(X, y, "old"), np.array([1.0, -1.0]) / np.sqrt(2))
    with pytest.raises(ValueError, match="with and without"):
        mean_difference(X, y, "middle")
    with pytest.raises(ValueError, match="coincide"):
        mean_difference(np.ones((2, 2)), np.array([0, 1]), 1)


def test_steering_table_rescores_under_each_alpha(lm):
    model, tok = lm
    items = [LabelRequest(f"q{i}", f"Question {i}: who? Answer:", ("A", "B")) for i in range(3)]
    scored = LoadedModel(model=model, tokenizer=tok, name="tiny", source="tests")
    v = np.random.default_rng(1).normal(size=64)

    def rescore():
        recs = Scorer(scored).score(items)
        return {"p_a": float(np.mean([r.probs[0] for r in recs]))}

    rows = steering_table(model, 1, v, [4.0, -4.0], rescore)
    assert [r["alpha"] for r in rows] == [0.0, -4.0, 4.0]
    assert rows[0]["delta_p_a"] == 0.0
    assert rows[1]["delta_p_a"] == pytest.approx(rows[1]["p_a"] - rows[0]["p_a"])
    assert rows[1]["p_a"] != rows[2]["p_a"]
    calls = []
    again = steering_table(model, 1, v, [4.0], lambda: calls.append(1) or rescore(), baseline={"p_a": rows[0]["p_a"]})
    assert len(calls) == 1 and again[0]["p_a"] == rows[0]["p_a"]  # the given baseline is not re-scored
