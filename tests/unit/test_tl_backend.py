"""Backend parity: TransformerLens 4.x TransformerBridge vs plain torch hooks (tiny random Llama, float32)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformer_lens")

from probe.activations.extract import HFBackend, collate, encode_item, pad_id  # noqa: E402
from probe.activations.hooks import discover, hook_names  # noqa: E402
from probe.activations.items import ActivationItem  # noqa: E402
from probe.activations.positions import parse_positions  # noqa: E402
from probe.scoring.tokens import Encoder  # noqa: E402
from probe.activations.tl_backend import TLBackend, make_backend  # noqa: E402
from tests.unit._tiny_models import tiny_llama, tiny_tokenizer  # noqa: E402


def test_bridge_and_hooks_agree():
    tok = tiny_tokenizer()
    model = tiny_llama(tok, n_layers=2)
    items = [ActivationItem.from_dict({"id": f"q{i}", "prompt": "Background: Person B has wrinkles" + "!" * i
                                       + " Who is old? Answer:", "labels": ["A", "B", "C"],
                                       "cue": "has wrinkles", "answer_label": "A"}) for i in range(4)]
    specs = parse_positions("last,label,mean:cue")
    names = hook_names(discover(model), "all", ["resid_pre", "resid_post", "attn_out", "mlp_out"])
    keys = [f"{h}@{s.name}" for h in names for s in specs]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    enc = Encoder(tok)
    encoded = [encode_item(enc, it, specs) for it in items]
    runs = {}
    for backend in (HFBackend(model), TLBackend(model, tok)):
        logits, acts = [], {}
        for start in (0, 3):  # batches of 3 + 1: left padding
            batch = collate(encoded[start:start + 3], pad_id(tok), "left")
            lg, ac = backend.run(batch, names, [s.name for s in specs])
            logits.append(lg.numpy())
            for k, v in ac.items():
                acts.setdefault(k, []).append(v)
        runs[backend.name] = (np.concatenate(logits), {k: np.concatenate(v) for k, v in acts.items()})
    (hf_logits, hf), (tl_logits, tl) = runs["hf"], runs["transformer_lens"]
    for k in keys:
        np.testing.assert_allclose(tl[k], hf[k], atol=1e-5, rtol=0, err_msg=k)
    np.testing.assert_allclose(tl_logits, hf_logits, atol=1e-4, rtol=0)
    # the bridge works on a copy: the caller's model is untouched
    assert all((model.state_dict()[k] == v).all() for k, v in before.items())


def test_make_backend_choices():
    tok = tiny_tokenizer()
    model = tiny_llama(tok, n_layers=1)
    assert make_backend(model, tok, "hf").name == "hf"
    assert make_backend(model, tok, "auto").name == "transformer_lens"
    with pytest.raises(ValueError):
        make_backend(model, tok, "vllm")
