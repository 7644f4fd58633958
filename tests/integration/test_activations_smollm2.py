"""The capture on the real SmolLM2: hooks vs output_hidden_states, TransformerLens backend agreement."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probe.activations.extract import HFBackend, extract
from probe.activations.hooks import capture, discover, hook_names
from probe.activations.items import ActivationItem
from probe.activations.positions import parse_positions
from probe.activations.store import ActivationWriter, load

pytestmark = pytest.mark.integration


def _items(lm):
    from probe.prompts.chat import render_prompt

    users = ["Background: Person A has wrinkles. Person B has smooth skin.\nWho forgot the keys?\nA. Person A\n"
             "B. Person B\nC. Unknown", "Who paid the rent late?\nA. The rich man\nB. The poor man\nC. Unknown"]
    return [ActivationItem.from_dict({"id": f"u{i}", "user": u, "prefill": "Answer:", "labels": ["A", "B", "C"]},
                                     render=lambda user, system=None, prefill=None, messages=None:
                                     render_prompt(lm.tokenizer, user, system=system, prefill=prefill))
            for i, u in enumerate(users)]


def test_capture_matches_hidden_states(smollm2):
    model = smollm2.model
    ids = torch.tensor([smollm2.tokenizer("Person A has wrinkles.").input_ids])
    names = hook_names(discover(model), "0,10,-2", ["resid_post"])
    with torch.no_grad(), capture(model, names, lambda h: {"all": h[0]}) as cap:
        hs = model(ids, output_hidden_states=True).hidden_states
    got = cap.pop()
    for name, i in zip(names, (0, 10, discover(model).n_layers - 2)):
        np.testing.assert_array_equal(got[f"{name}@all"], hs[i + 1][0].numpy())


def test_transformer_lens_backend_agrees(smollm2, tmp_path):
    pytest.importorskip("transformer_lens")
    from probe.activations.tl_backend import TLBackend

    items = _items(smollm2)
    specs = parse_positions("last")
    names = hook_names(discover(smollm2.model), "0,15,-1", ["resid_post", "mlp_out"])
    keys = [f"{h}@last" for h in names]
    stores = {}
    for be in (HFBackend(smollm2.model), TLBackend(smollm2.model, smollm2.tokenizer)):
        with ActivationWriter(tmp_path / be.name, {"keys": keys}) as w:
            extract(be, smollm2.tokenizer, items, names, specs, w, batch_size=2)
        stores[be.name] = load(tmp_path / be.name)
    hf, tl = stores["hf"], stores["transformer_lens"]
    for k in keys:  # SDPA (HF default) vs eager attention (the bridge) reorder float ops
        scale = np.abs(hf[k]).max()
        np.testing.assert_allclose(tl[k], hf[k], atol=1e-4 * scale, rtol=0, err_msg=k)
    for a, b in zip(hf.records, tl.records):
        np.testing.assert_allclose(a["label_logprobs"], b["label_logprobs"], atol=1e-3)


def test_score_and_capture_on_smollm2(smollm2):
    """Capture in the scoring passes: the last-token residual equals output_hidden_states and the
    scores equal the prefix-sharing scorer's."""
    from probe.activations.scoring_capture import CaptureSpec, score_and_capture
    from probe.prompts.chat import render_prompt
    from probe.scoring import ContinuationRequest, LabelRequest, Scorer

    prompt = render_prompt(smollm2.tokenizer, "Person A has wrinkles. Person B has smooth skin. Who forgot the keys?",
                           prefill="Answer:")
    reqs = [LabelRequest("l", prompt, ("A", "B")), ContinuationRequest("c", prompt, ("Person A", "Person B"))]
    scorer = Scorer(smollm2)
    results, acts = score_and_capture(scorer, reqs, CaptureSpec(hooks=("blocks.12.hook_resid_post",), positions=("last",)))
    plain = scorer.score(reqs)
    for a, b in zip(results, plain):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) <= 1e-4
    ids = torch.tensor([smollm2.tokenizer(prompt, add_special_tokens=False).input_ids])
    with torch.no_grad():
        hs = smollm2.model(ids, output_hidden_states=True).hidden_states
    got = acts.arrays["blocks.12.hook_resid_post@last"]
    for row in got:
        np.testing.assert_allclose(row, hs[13][0, -1].numpy(), atol=1e-4)
