"""Activation patching between paired prompts on a tiny random Llama."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probe.activations.items import ActivationItem
from probe.analysis.patching import patch_effects, patch_pairs
from tests.unit._tiny_models import tiny_llama, tiny_tokenizer


@pytest.fixture(scope="module")
def lm():
    tok = tiny_tokenizer()
    return tiny_llama(tok, n_layers=3), tok


def _item(i, cue):
    return ActivationItem.from_dict({"id": i, "prompt": f"Background: Person A {cue}. Who is old? Answer:",
                                     "labels": ["A", "B"], "cue": cue})


def _logp(model, tok, item, label):
    ids = tok(item.prompt).input_ids
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1], -1)
    return lp[tok(" " + label, add_special_tokens=False).input_ids[0]].item()


def test_self_patching_changes_nothing(lm):
    model, tok = lm
    it = _item("x", "has wrinkles")
    eff = patch_effects(model, tok, it, it, "A", positions=["last", "span:cue"])
    assert eff.shape == (3, 2)
    np.testing.assert_allclose(eff, np.zeros((3, 2)), atol=1e-5, rtol=0)


def test_last_layer_last_token_patch_gives_source_logprob(lm):
    model, tok = lm
    tgt, src = _item("t", "has wrinkles"), _item("s", "rides a skateboard every day")  # different lengths
    eff = patch_effects(model, tok, tgt, src, "A", positions=["last"])
    # at the final layer the last position's residual fully determines the output there
    expected = _logp(model, tok, src, "A") - _logp(model, tok, tgt, "A")
    assert eff[-1, 0] == pytest.approx(expected, abs=1e-4)
    assert np.abs(eff).max() > 1e-3  # a different source changes something


def test_patch_pairs_stacks_and_rejects_mean_positions(lm):
    model, tok = lm
    a, b = _item("a", "has wrinkles"), _item("b", "uses a cane")
    out = patch_pairs(model, tok, [(a, b, "A"), (b, a, "B")], positions=["last"])
    assert out.shape == (2, 3, 1)
    with pytest.raises(ValueError, match="single-token"):
        patch_effects(model, tok, a, b, "A", positions=["mean:cue"])
    with pytest.raises(ValueError, match="not one of its labels"):
        patch_effects(model, tok, a, b, "C")
    with pytest.raises(ValueError, match="hook"):
        patch_effects(model, tok, a, b, "A", hook="q")
