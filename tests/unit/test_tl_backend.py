"""Backend parity: TransformerLens 4.x TransformerBridge vs plain torch hooks (tiny random Llama, float32)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformer_lens")

from probe.activations.extract import HFBackend, extract  # noqa: E402
from probe.activations.hooks import discover, hook_names  # noqa: E402
from probe.activations.items import ActivationItem  # noqa: E402
from probe.activations.positions import parse_positions  # noqa: E402
from probe.activations.store import ActivationWriter, load  # noqa: E402
from probe.activations.tl_backend import TLBackend, make_backend  # noqa: E402
from tests.unit._tiny_models import tiny_llama, tiny_tokenizer  # noqa: E402


def test_bridge_and_hooks_agree(tmp_path):
    tok = tiny_tokenizer()
    model = tiny_llama(tok, n_layers=2)
    items = [ActivationItem.from_dict({"id": f"q{i}", "prompt": "Background: Person B has wrinkles" + "!" * i
                                       + " Who is old? Answer:", "labels": ["A", "B", "C"],
                                       "cue": "has wrinkles", "answer_label": "A"}) for i in range(4)]
    specs = parse_positions("last,label,mean:cue")
    names = hook_names(discover(model), "all", ["resid_pre", "resid_post", "attn_out", "mlp_out"])
    keys = [f"{h}@{s.name}" for h in names for s in specs]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stores = {}
    for backend in (HFBackend(model), TLBackend(model, tok)):
        d = tmp_path / backend.name
        with ActivationWriter(d, {"keys": keys}) as w:
            extract(backend, tok, items, names, specs, w, batch_size=3)  # batches of 3 + 1: left padding
        stores[backend.name] = load(d)
    hf, tl = stores["hf"], stores["transformer_lens"]
    assert hf.ids == tl.ids
    for k in keys:
        np.testing.assert_allclose(tl[k], hf[k], atol=1e-5, rtol=0, err_msg=k)
    for a, b in zip(hf.records, tl.records):
        np.testing.assert_allclose(a["label_logprobs"], b["label_logprobs"], atol=1e-5, rtol=0)
    # the bridge works on a copy: the caller's model is untouched
    assert all((model.state_dict()[k] == v).all() for k, v in before.items())


def test_make_backend_choices():
    tok = tiny_tokenizer()
    model = tiny_llama(tok, n_layers=1)
    assert make_backend(model, tok, "hf").name == "hf"
    assert make_backend(model, tok, "auto").name == "transformer_lens"
    with pytest.raises(ValueError):
        make_backend(model, tok, "vllm")
