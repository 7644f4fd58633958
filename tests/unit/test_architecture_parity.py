"""The Scorer (prefix tree, KV-cache segments, merged caches, chunked unembedding) against one plain forward
per sequence, on tiny random models of thirteen architecture families.

This is the test a new transformers release is most likely to break (the cache API, attention masks,
position ids, per-family quirks such as logit soft-capping or scaled logits), so ``tools/drift.py`` runs
it against the newest releases before the lock moves (docs/reliability.md)."""

from __future__ import annotations

import pytest

from probe.models import LoadedModel
from probe.scoring import ContinuationRequest, LabelRequest, PerplexityRequest, Scorer
from tests import reference
from tests.tiny import spread_lm, tiny_tokenizer

TOL = 1e-4
SYSTEM = "Background: Person A wears a tilak. Person B attends Sunday service. Context: they met at the market. "

#: family -> config overrides (beyond the shared tiny shape)
ARCHITECTURES = {
    "llama": {},
    "mistral": {"sliding_window": None},
    "qwen2": {},
    "qwen3": {"head_dim": 16},
    "gemma": {"head_dim": 16},
    "gemma2": {"head_dim": 16, "sliding_window": 256},  # soft-capped logits, extra norms
    "gemma3_text": {"head_dim": 16, "sliding_window": 256},
    "phi3": {},
    "olmo2": {},
    "cohere": {"logit_scale": 0.5},  # scaled logits
    "granite": {"logits_scaling": 2.0},  # divided logits
    "gpt_neox": {"drop": ("num_key_value_heads",)},  # parallel attention + MLP
    "stablelm": {},
}


def _model(arch: str, attn: str = "eager", **extra) -> LoadedModel:
    """The tiny ``arch`` model with ``attn`` attention and ``extra`` config overrides."""
    import transformers

    tok = tiny_tokenizer()
    overrides = {**ARCHITECTURES[arch], **extra}
    drop = overrides.pop("drop", ())
    kw = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
              bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
              **overrides)
    for key in drop:
        kw.pop(key)
    cfg = transformers.AutoConfig.for_model(arch, **kw)
    cfg._attn_implementation = attn
    return spread_lm(cfg, tok, f"tiny-{arch}")


def _requests() -> list:
    reqs = []
    for i, q in enumerate(["Who was not comfortable using the phone?", "Who tried to book a cab?",
                           "Who saw a cat at the market?"]):
        prompt = SYSTEM + q + " Answer:"
        reqs.append(LabelRequest(f"lab{i}", prompt, ("A", "B", "C"), group="q"))
        reqs.append(ContinuationRequest(f"con{i}", prompt, ("Person A", "Unknown"), group="q"))
    reqs.append(LabelRequest("short", "The cat sat on the mat. Answer:", ("Yes", "No")))
    reqs.append(PerplexityRequest("ppl", "The cat sat on the mat."))
    reqs.append(PerplexityRequest("ppl-prefixed", "The cat sat on the mat.", prefix=SYSTEM.rstrip()))
    return reqs


def _reference(lm, req) -> list[float]:
    if isinstance(req, LabelRequest):
        return reference.label_logprobs(lm, req.prompt, list(req.labels))
    if isinstance(req, ContinuationRequest):
        return [x for o in req.options for x in reference.continuation_logprobs(lm, req.prompt, o)]
    return [reference.perplexity(lm, req.text, req.prefix)[0]]


def _got(req, res) -> list[float]:
    if isinstance(req, LabelRequest):
        return list(res.logprobs)
    if isinstance(req, ContinuationRequest):
        return [x for t in res.token_logprobs for x in t]
    return [res.nll]


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_scorer_equals_plain_forwards(arch):
    pytest.importorskip("transformers")
    try:
        lm = _model(arch)
    except (ValueError, KeyError, ImportError) as exc:  # a family this transformers release does not have
        pytest.skip(f"{arch}: not in this transformers release ({exc})")
    reqs = _requests()
    results = Scorer(lm, batch_size=3).score(reqs)
    worst = 0.0
    for req, res in zip(reqs, results):
        ref, got = _reference(lm, req), _got(req, res)
        assert len(ref) == len(got), req.id
        worst = max(worst, max(abs(a - b) for a, b in zip(ref, got)))
    assert worst <= TOL, f"{arch}: max |scorer - plain forward| = {worst:.3g}"


#: sliding windows shorter than the prompts, so the window cuts in (a hybrid model gets one mask per layer kind)
WINDOWED = {
    "gemma2": {"sliding_window": 8},
    "gemma3_text": {"sliding_window": 8},
    "mistral": {"sliding_window": 8},
    "qwen2": {"sliding_window": 8, "use_sliding_window": True, "max_window_layers": 1},
}


@pytest.mark.parametrize("arch", sorted(WINDOWED))
def test_packed_pass_with_a_short_sliding_window_equals_plain_forwards(arch, monkeypatch):
    monkeypatch.setitem(ARCHITECTURES, arch, {**ARCHITECTURES[arch], **WINDOWED[arch]})
    try:
        lm = _model(arch)
    except (ValueError, KeyError, ImportError) as exc:
        pytest.skip(f"{arch}: not in this transformers release ({exc})")
    reqs = _requests()
    scorer = Scorer(lm, batch_size=3)
    results = scorer.score(reqs)
    assert scorer.engine.window == 8 and scorer.engine.counts()["forward_passes"] == 1  # packed, window in the mask
    worst = max(abs(a - b) for req, res in zip(reqs, results) for a, b in zip(_reference(lm, req), _got(req, res)))
    assert worst <= TOL, f"{arch}: max |scorer - plain forward| = {worst:.3g}"
