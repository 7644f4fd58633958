"""Logit lens (read in the scoring passes): the last layer reproduces the model's own label log-probs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probe.activations.hooks import discover
from probe.analysis.logit_lens import lens_logprobs, logit_lens
from probe.models import LoadedModel
from probe.scoring.requests import LabelRequest
from tests.unit._tiny_models import tiny_llama, tiny_tokenizer


def test_last_layer_equals_model_output():
    tok = tiny_tokenizer()
    model = tiny_llama(tok, n_layers=3)
    items = [LabelRequest(f"q{i}", "Who" + "?" * (i + 1) + " Answer:", ("A", "B", "C")) for i in range(3)]
    lm = LoadedModel(model=model, tokenizer=tok, name="tiny", source="tests")
    res = logit_lens(lm, items, batch_size=2)
    assert res.logprobs.shape == (3, 3, 3) and res.ids == ["q0", "q1", "q2"]
    label_ids = [tok(" " + x, add_special_tokens=False).input_ids[0] for x in "ABC"]
    for i, it in enumerate(items):
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([tok(it.prompt).input_ids])).logits[0, -1], -1)
        np.testing.assert_allclose(res.logprobs[i, -1], lp[label_ids].numpy(), atol=1e-5)
    np.testing.assert_allclose(res.probs.sum(-1), 1.0, atol=1e-6)
    assert (res.label_mass <= 1 + 1e-6).all()
    # earlier layers differ (the lens is not a constant)
    assert not np.allclose(res.logprobs[:, 0], res.logprobs[:, -1])
    full = lens_logprobs(discover(model), torch.zeros(2, 64))
    assert full.shape == (2, len(tok)) and torch.allclose(full.exp().sum(-1), torch.ones(2))


def test_lens_needs_shared_labels():
    tok = tiny_tokenizer()
    model = tiny_llama(tok, n_layers=1)
    lm = LoadedModel(model=model, tokenizer=tok, name="tiny", source="tests")
    a, b = LabelRequest("a", "Q?", ("A", "B")), LabelRequest("b", "Q?", ("A", "C"))
    with pytest.raises(ValueError, match="same"):
        logit_lens(lm, [a, b])
    with pytest.raises(ValueError):
        logit_lens(lm, [])


def test_lens_through_the_runners_scorer_is_the_same(tmp_path):
    """A Runner's scorer (its batching, a score cache it never reads for capture) gives the same lens."""
    from probe.runs.runner import RunOptions, Runner

    tok = tiny_tokenizer()
    model = tiny_llama(tok, n_layers=2)
    lm = LoadedModel(model=model, tokenizer=tok, name="tiny", source="tests")
    items = [LabelRequest(f"q{i}", "Who" + "?" * (i + 1) + " Answer:", ("A", "B")) for i in range(3)]
    runner = Runner(lm, RunOptions(batch_size=1, progress=False, score_cache=str(tmp_path / "cache")))
    alone = logit_lens(lm, items, batch_size=3)
    via = logit_lens(lm, items, scorer=runner.scorer)
    assert via.ids == alone.ids
    np.testing.assert_allclose(via.logprobs, alone.logprobs, atol=1e-5)
