"""Activation patching between paired prompts on a tiny random Llama, through the scorer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probe.analysis.patching import patch_effects, patch_logprobs, patch_pairs
from probe.models import LoadedModel
from probe.scoring.requests import ContinuationRequest, LabelRequest
from tests.unit._tiny_models import tiny_llama, tiny_tokenizer


@pytest.fixture(scope="module")
def lm():
    tok = tiny_tokenizer()
    return LoadedModel(model=tiny_llama(tok, n_layers=3), tokenizer=tok, name="tiny", source="tests")


def _item(i, cue):
    return LabelRequest(i, f"Background: Person A {cue}. Who is old? Answer:", ("A", "B"), meta={"cue": cue})


def _logp(model, tok, item, label):
    ids = tok(item.prompt).input_ids
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1], -1)
    return lp[tok(" " + label, add_special_tokens=False).input_ids[0]].item()


def test_self_patching_changes_nothing(lm):
    it = _item("x", "has wrinkles")
    eff = patch_effects(lm, it, it, "A", positions=["last", "span:cue"])
    assert eff.shape == (3, 2)
    np.testing.assert_allclose(eff, np.zeros((3, 2)), atol=1e-5, rtol=0)


def test_last_layer_last_token_patch_gives_source_logprob(lm):
    model, tok = lm.model, lm.tokenizer
    tgt, src = _item("t", "has wrinkles"), _item("s", "rides a skateboard every day")  # different lengths
    eff = patch_effects(lm, tgt, src, "A", positions=["last"])
    # at the final layer the last position's residual fully determines the output there
    expected = _logp(model, tok, src, "A") - _logp(model, tok, tgt, "A")
    assert eff[-1, 0] == pytest.approx(expected, abs=1e-4)
    assert np.abs(eff).max() > 1e-3  # a different source changes something
    every = patch_logprobs(lm, tgt, src, positions=["last", "span:cue"], layers=[0, -1])
    assert every.shape == (2, 2, 2)  # layers x positions x labels
    np.testing.assert_allclose(every[1, 0, 0], eff[-1, 0], atol=1e-6)


def test_patching_leaves_the_model_and_later_scores_unchanged(lm):
    from probe.scoring import Scorer

    tgt, src = _item("t", "has wrinkles"), _item("s", "uses a cane")
    before = Scorer(lm).score([tgt])[0].logprobs
    patch_effects(lm, tgt, src, "A", positions=["span:cue"])
    assert Scorer(lm).score([tgt])[0].logprobs == before
    assert sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in lm.model.modules()) == 0


def test_patch_pairs_stacks_and_rejects_mean_positions(lm):
    a, b = _item("a", "has wrinkles"), _item("b", "uses a cane")
    out = patch_pairs(lm, [(a, b, "A"), (b, a, "B")], positions=["last"])
    assert out.shape == (2, 3, 1)
    with pytest.raises(ValueError, match="single-token"):
        patch_effects(lm, a, b, "A", positions=["mean:cue"])
    with pytest.raises(ValueError, match="not one of its labels"):
        patch_effects(lm, a, b, "C")
    with pytest.raises(ValueError, match="hook"):
        patch_effects(lm, a, b, "A", hook="q")
    with pytest.raises(ValueError, match="lacks the span"):
        patch_effects(lm, a, LabelRequest("n", "Who is old? Answer:", ("A", "B")), "A", positions=["span:cue"])
    with pytest.raises(ValueError, match="label request"):
        patch_effects(lm, a, ContinuationRequest("c", "Who is old?", ("x", "y")), "A")
