"""``Scorer.score(capture=...)`` with prefix sharing on, on tiny models of several architectures.

Every captured vector must equal a plain single-sequence ``output_hidden_states``
forward (within 1e-4 relative), whether its position was read in a shared
segment's pass or in the row's own leaf, and must not depend on batch size,
request order or padding.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from probe.activations.scoring_capture import CaptureSpec
from probe.models import LoadedModel
from probe.scoring import ContinuationRequest, LabelRequest, Scorer
from probe.scoring.capture import Taps
from tests.unit._tiny_models import tiny_tokenizer

SYSTEM = "Background: Person A has wrinkles. Person B has smooth skin. "
N_LAYERS = 3


def _model(arch: str) -> LoadedModel:
    import transformers

    tok = tiny_tokenizer()
    kw = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=N_LAYERS,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
              bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    if arch == "gemma2":  # sliding window, logit soft-capping, extra norms
        kw.update(head_dim=16, sliding_window=256)
    if arch == "gpt_neox":  # parallel attention + MLP, no grouped KV heads
        kw.pop("num_key_value_heads")
    cfg = transformers.AutoConfig.for_model(arch, **kw)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    model.requires_grad_(False)
    with torch.no_grad():  # random init is near-uniform: make the layers differ visibly
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(4.0)
    return LoadedModel(model=model, tokenizer=tok, name=f"tiny-{arch}", source="tests")


ARCHS = ("llama", "qwen2", "gemma2", "gpt_neox")


@pytest.fixture(scope="module", params=ARCHS)
def lm(request):
    return _model(request.param)


def _requests() -> list:
    """BBQ-like requests: a shared background (so the tree shares it), spans inside it, a lone short one."""
    reqs = []
    for i, q in enumerate(["Who was not comfortable using the phone?", "Who tried to book a cab?",
                           "Who saw a cat at the market?"]):
        prompt = SYSTEM + q + " Answer:"
        meta = {"cue": "has wrinkles", "question": q, "answer_label": "B"}
        reqs.append(LabelRequest(f"lab{i}", prompt, ("A", "B"), meta=meta))
        reqs.append(ContinuationRequest(f"con{i}", prompt, ("Person A", "Unknown"), meta={**meta, "answer_label": "Unknown"}))
    reqs.append(LabelRequest("short", "The cat sat on the mat. Answer:", ("A", "B"), meta={"answer_label": "A"}))
    return reqs


def _spec() -> CaptureSpec:
    hooks = [f"blocks.{i}.hook_resid_post" for i in range(N_LAYERS - 1)] + ["ln_final.hook_normalized"]
    return CaptureSpec(tuple(hooks), "last,label,span:cue,mean:cue,span:question")


def _close(got: np.ndarray, want: np.ndarray, rel: float = 1e-4) -> bool:
    return float(np.abs(got - want).max()) <= rel * float(np.abs(want).max())


def test_capture_equals_output_hidden_states_with_sharing(lm, monkeypatch):
    shared_reads = []
    original = Taps.pass_at

    def spy(self, places):
        shared_reads.extend(not n.is_leaf for n, _, _ in places if self.need.get(id(n)))
        return original(self, places)

    monkeypatch.setattr(Taps, "pass_at", spy)
    reqs = _requests()
    scorer = Scorer(lm, batch_size=4)
    assert scorer.share_prefixes
    results = scorer.score(reqs, capture=_spec())
    assert any(shared_reads), "no position was read in a shared segment's pass"
    tok = lm.tokenizer
    for r, res in zip(reqs, results):
        e = scorer.encode(r)
        n = e.n_prompt_tokens
        if isinstance(r, LabelRequest):
            k = r.labels.index(r.meta["answer_label"])
            row = e.sequences[0].ids + (e.label_variants[k][0],)
        else:
            row = e.sequences[r.options.index(r.meta["answer_label"])].ids
        hs = [h[0].numpy() for h in lm.model(input_ids=torch.tensor([row]), output_hidden_states=True).hidden_states]
        want = {"last": [n - 1], "label": [n]}
        if "cue" in r.meta:
            text = r.prompt.rstrip(" ")
            offs = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
            for f in ("cue", "question"):
                s = text.find(r.meta[f])
                want[f] = [i for i, (a, b) in enumerate(offs) if b > a and a < s + len(r.meta[f]) and b > s]
            assert len(want["cue"]) > 1
        for i, hook in enumerate(_spec().hooks):
            h = hs[i + 1] if hook != "ln_final.hook_normalized" else hs[N_LAYERS]
            for pos, toks in (("last", want["last"]), ("label", want["label"])):
                assert _close(res.activations[f"{hook}@{pos}"], h[toks[0]]), (r.id, hook, pos)
            if "cue" in want:
                assert _close(res.activations[f"{hook}@span:cue"], h[want["cue"][-1]]), (r.id, hook)
                assert _close(res.activations[f"{hook}@mean:cue"], h[want["cue"]].mean(0)), (r.id, hook)
                assert _close(res.activations[f"{hook}@span:question"], h[want["question"][-1]]), (r.id, hook)
            else:
                assert np.isnan(res.activations[f"{hook}@span:cue"]).all()


def test_scores_unchanged_by_capture(lm):
    reqs = _requests()
    plain = Scorer(lm, batch_size=4).score(reqs)
    got = Scorer(lm, batch_size=4).score(reqs, capture=_spec())
    for a, b in zip(got, plain):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
        assert not b.activations and a.activations


@pytest.mark.parametrize("batch_size,token_budget,seed", [(1, 8192, 1), (3, 200, 2), (16, 8192, 3)])
def test_batch_size_order_and_padding_invariance(batch_size, token_budget, seed):
    lm = _model("llama")
    reqs = _requests()
    base = {r.id: r.activations for r in Scorer(lm, batch_size=8).score(reqs, capture=_spec())}
    shuffled = list(reqs)
    random.Random(seed).shuffle(shuffled)
    got = Scorer(lm, batch_size=batch_size, token_budget=token_budget).score(shuffled, capture=_spec())
    off = Scorer(lm, share_prefixes=False, batch_size=batch_size).score(shuffled, capture=_spec())
    for res, plain in zip(got, off):
        for key, want in base[res.id].items():
            np.testing.assert_allclose(res.activations[key], want, rtol=0, atol=1e-5, equal_nan=True, err_msg=key)
            np.testing.assert_allclose(plain.activations[key], want, rtol=0, atol=1e-5, equal_nan=True, err_msg=key)


def test_no_hook_left_and_cache_bypassed(tmp_path):
    from probe.models.fingerprint import model_fingerprint
    from probe.scoring.cache import ENGINE_VERSION, ScoreCache

    lm = _model("llama")
    before = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in lm.model.modules())
    cache = ScoreCache(tmp_path / "c.sqlite", model_fingerprint(lm, ENGINE_VERSION))
    scorer = Scorer(lm, cache=cache)
    scorer.score(_requests())  # fills the cache
    res = scorer.score(_requests(), capture=_spec())  # still computes: the cache holds no activations
    assert all(r.activations for r in res)
    after = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in lm.model.modules())
    assert after == before
    cache.close()


def test_parse_and_errors():
    spec = CaptureSpec.parse(["blocks.1.hook_resid_post@last", "blocks.0.hook_mlp_out@mean:cue"])
    assert spec.keys == ["blocks.1.hook_resid_post@last", "blocks.0.hook_mlp_out@mean:cue"]
    for bad in (["blocks.1.hook_resid_post"], ["@last"], ["blocks.1.hook_resid_post@middle"], []):
        with pytest.raises(ValueError):
            CaptureSpec.parse(bad)
    lm = _model("llama")
    with pytest.raises(KeyError):
        Scorer(lm).score(_requests()[:1], capture=CaptureSpec.parse(["blocks.9.hook_resid_post@last"]))


def test_perplexity_requests_capture_their_texts_last_token(lm):
    """HBB-SG / CrowS (b) texts: 'last' is the text's last token, shared prefixes or not; scores unchanged;
    any other position is refused, naming the request."""
    from probe.scoring import PerplexityRequest

    texts = [SYSTEM + "Person A is old.", SYSTEM + "Person B is old.", "A lone short text."]
    reqs = [PerplexityRequest(id=f"p{i}", text=t, prefix=SYSTEM.strip() if i == 1 else "")
            for i, t in enumerate(texts)]
    scorer = Scorer(lm, batch_size=2)
    hook = "blocks.1.hook_resid_post"
    results = scorer.score(reqs, capture=CaptureSpec((hook,), "last"))
    plain = scorer.score(reqs)
    for r, res, ref in zip(reqs, results, plain):
        # capture adds a row, never changes a score beyond the float rounding of a differently packed pass
        assert abs(res.nll - ref.nll) <= 1e-5 * (1 + abs(ref.nll))
        row = scorer.encode(r).sequences[0].ids
        hs = lm.model(input_ids=torch.tensor([row]), output_hidden_states=True).hidden_states
        assert _close(res.activations[f"{hook}@last"], hs[2][0, len(row) - 1].numpy()), r.id
    with pytest.raises(ValueError, match="'p0': a perplexity request is captured at 'last'"):
        scorer.score(reqs[:1], capture=CaptureSpec((hook,), "mean:cue"))
