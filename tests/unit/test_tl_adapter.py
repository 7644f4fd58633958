"""The TransformerLens backend as a model adapter (probe.models.tl_adapter): the one Scorer, with prefix
sharing, on a TransformerBridge-wrapped module; capture at the bridge's own hook points.

Scores and the hooks both paths name alike must equal the plain Hugging Face path (eager attention on
both) on tiny models of several architectures."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformer_lens")

from probe.activations.scoring_capture import CaptureSpec  # noqa: E402
from probe.errors import ModelLoadError  # noqa: E402
from probe.models.tl_adapter import bridge_of, hook_points, to_transformer_lens, with_backend  # noqa: E402
from probe.scoring import Scorer  # noqa: E402
from probe.scoring.requests import LabelRequest  # noqa: E402
from probe.scoring.capture import Taps  # noqa: E402
from tests.unit.test_capture_sharing import N_LAYERS, _model, _requests  # noqa: E402

POSITIONS = "last,label,span:cue,mean:cue,span:question"
ARCHS = ("llama", "qwen2", "gemma2", "gpt_neox", "gemma3_text")
# Gemma-style blocks norm the attention / MLP output before adding it; TransformerLens' hook_attn_out and
# hook_mlp_out are after that norm (what enters the residual), the plain hooks before it (docs/activations.md)
POST_NORMED = ("gemma2", "gemma3_text")


def _hooks(arch: str) -> tuple[str, ...]:
    kinds = ("resid_pre", "resid_post") if arch in POST_NORMED else ("resid_pre", "resid_post", "attn_out", "mlp_out")
    return tuple(f"blocks.{i}.hook_{k}" for i in range(N_LAYERS) for k in kinds) + ("ln_final.hook_normalized",)


@pytest.fixture(scope="module", params=ARCHS)
def pair(request):
    lm = _model(request.param)
    return request.param, lm, to_transformer_lens(lm)


def test_scores_and_shared_captures_equal_the_plain_path(pair, monkeypatch):
    arch, lm, tl = pair
    shared = []
    level, packed = Taps.pass_of, Taps.pass_at

    def spy_level(self, nodes, column):
        shared.extend(not n.is_leaf for n in nodes if self.need.get(id(n)))
        return level(self, nodes, column)

    def spy_packed(self, places):
        shared.extend(not n.is_leaf for n, _, _ in places if self.need.get(id(n)))
        return packed(self, places)

    # either road reads a shared segment's positions in the pass that computes it (packed, or level by level)
    monkeypatch.setattr(Taps, "pass_of", spy_level)
    monkeypatch.setattr(Taps, "pass_at", spy_packed)
    spec = CaptureSpec(_hooks(arch), POSITIONS)
    reqs = _requests()
    plain = Scorer(lm, batch_size=4).score(reqs, capture=spec)
    shared.clear()
    bridged = Scorer(tl, batch_size=4).score(reqs, capture=spec)
    assert any(shared), "no position was read in a shared segment's pass"
    for a, b in zip(bridged, plain):
        np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=0, atol=1e-5, err_msg=a.id)
        assert set(a.activations) == set(b.activations) == set(spec.keys)
        for k, want in b.activations.items():
            np.testing.assert_allclose(a.activations[k], want, rtol=0, atol=1e-5, equal_nan=True, err_msg=f"{a.id} {k}")


def test_caller_model_untouched_and_wrapped_once(pair):
    arch, lm, tl = pair
    assert bridge_of(lm.model) is None and hook_points(lm.model) is None
    assert tl.model is not lm.model and bridge_of(tl.model) is not None
    assert "Bridge" not in type(lm.model.get_decoder().layers[0]).__name__
    assert to_transformer_lens(tl) is tl  # already wrapped
    assert tl.info()["backend"] == "transformer_lens" and "backend" not in lm.info()
    assert tl.model.config._attn_implementation == "eager"


def test_transformer_lens_only_hooks():
    lm = _model("llama")
    tl = to_transformer_lens(lm)
    hooks = ("blocks.1.hook_resid_pre", "blocks.1.hook_attn_out", "blocks.1.hook_resid_mid",
             "blocks.1.ln1.hook_normalized")
    res = Scorer(tl).score(_requests()[:3], capture=CaptureSpec(hooks, "last"))
    for r in res:
        v = {k.split("@")[0]: x for k, x in r.activations.items()}
        np.testing.assert_allclose(v["blocks.1.hook_resid_mid"],
                                   v["blocks.1.hook_resid_pre"] + v["blocks.1.hook_attn_out"], rtol=0, atol=1e-4)
        assert np.isfinite(v["blocks.1.ln1.hook_normalized"]).all()
    with pytest.raises(KeyError, match="no hook"):  # a name the bridge lacks: before any work
        Scorer(tl).score(_requests()[:1], capture=CaptureSpec(("blocks.9.hook_resid_post",), "last"))
    with pytest.raises(ValueError, match="d_model"):  # [batch, head, q, k]: not a per-position vector
        Scorer(tl).score(_requests()[:1], capture=CaptureSpec(("blocks.0.attn.hook_pattern",), "last"))
    # hooks are removed after the call, even after an error
    assert all(not hp._forward_hooks for hp in hook_points(tl.model).values())


def test_adapter_equals_transformer_lens_own_forward():
    """The adapter's capture equals TransformerLens' run_with_cache on the whole row (one sequence)."""
    lm = _model("qwen2")
    tl = to_transformer_lens(lm)
    scorer = Scorer(tl)
    req = _requests()[0]
    hooks = ("blocks.0.hook_resid_post", "blocks.2.ln2.hook_normalized")
    res = scorer.score([req], capture=CaptureSpec(hooks, "last"))[0]
    ids = torch.tensor([scorer.encode(req).sequences[0].ids])
    _, cache = bridge_of(tl.model).run_with_cache(ids, names_filter=list(hooks), return_cache_object=False)
    last = scorer.encode(req).n_prompt_tokens - 1
    for h in hooks:
        np.testing.assert_allclose(res.activations[f"{h}@last"], cache[h][0, last].numpy(), rtol=0, atol=1e-5)


def test_backend_choices_and_unsupported_architecture(caplog):
    import transformers

    from probe.models import LoadedModel

    lm = _model("llama")
    assert with_backend(lm, "hf") is lm
    with pytest.raises(ModelLoadError, match="backend must be"):
        with_backend(lm, "vllm")
    # BioGPT: a causal LM TransformerLens 4.3 has no adapter for
    cfg = transformers.AutoConfig.for_model("biogpt", vocab_size=len(lm.tokenizer), hidden_size=32, num_hidden_layers=1,
                                            num_attention_heads=2, intermediate_size=64)
    other = LoadedModel(model=transformers.AutoModelForCausalLM.from_config(cfg).eval(), tokenizer=lm.tokenizer,
                        name="tiny-biogpt", source="tests")
    with pytest.raises(ModelLoadError, match="cannot wrap BioGptForCausalLM"):
        to_transformer_lens(other)
    assert with_backend(other, "auto") is other  # falls back to plain hooks, saying why
    assert "using plain torch hooks" in caplog.text
    assert bridge_of(other.model) is None


def test_steering_and_patching_act_the_same_on_the_wrapped_model(pair):
    """The analyses' interventions (forward hooks on the decoder blocks) fire inside the bridge's components:
    steered scores and patching effects equal the plain model's."""
    from probe.analysis.patching import patch_effects
    from probe.analysis.steering import steer

    _, lm, tl = pair
    reqs = _requests()
    v = np.random.default_rng(0).normal(size=lm.model.config.hidden_size).astype(np.float32)
    plain = [r.logprobs for r in Scorer(lm).score(reqs)]
    with steer(lm.model, 1, v, 2.0):
        want = [r.logprobs for r in Scorer(lm).score(reqs)]
    with steer(tl.model, 1, v, 2.0):
        got = [r.logprobs for r in Scorer(tl).score(reqs)]
    assert max(abs(a - b) for x, y in zip(want, plain) for a, b in zip(x, y)) > 1e-3  # the steer does something
    assert max(abs(a - b) for x, y in zip(want, got) for a, b in zip(x, y)) < 1e-4
    items = [LabelRequest(i, f"Background: Person A {c}. Who is old? Answer:", ("A", "B"), meta={"cue": c})
             for i, c in (("t", "has wrinkles"), ("s", "rides a skateboard every day"))]
    ref = patch_effects(lm, *items, "A", positions=["last", "span:cue"])
    np.testing.assert_allclose(patch_effects(tl, *items, "A", positions=["last", "span:cue"]), ref,
                               atol=1e-4, rtol=0)
