"""Labels whose continuations share their first token (SentencePiece: " 1" = "▁" + "1", as on Gemma 3):
the shared prefix is scored as part of the sequence and each label by its next token, exactly."""

from __future__ import annotations

import functools
import math

import pytest

from probe.scoring import LabelRequest, Scorer
from probe.scoring.sampler.sampling import SamplingSpec
from probe.scoring.tokens import shared_prefix
from tests import reference

CORPUS = ["Answer: 1. Answer: 2. Answer: 3. Who was it? The first person, the second one, or unknown."] * 4


@functools.lru_cache(maxsize=None)
def _sp_lm():
    """A tiny random Llama with a SentencePiece-like tokenizer: word-initial "▁", digits split off alone."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from probe.models import LoadedModel
    from tests.tiny import tiny_model

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never"),
        pre_tokenizers.Digits(individual_digits=True)])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=120, special_tokens=["<bos>", "<eos>", "<pad>"],
                                                        show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>")
    return LoadedModel(model=tiny_model(len(fast), seed=3), tokenizer=fast, name="tiny-sp", source="test")


def test_shared_prefix_rule():
    assert shared_prefix([(7, 1), (7, 2), (7, 3)]) == ((7,), (1, 2, 3))
    assert shared_prefix([(7, 8, 1), (7, 8, 2)]) == ((7, 8), (1, 2))
    assert shared_prefix([(1,), (2,)]) == ((), ())  # first tokens differ: nothing to do
    assert shared_prefix([(7, 1), (8, 1)]) == ((), ())
    assert shared_prefix([(7, 1), (7, 1, 2)]) == ((), ())  # same token after the prefix
    assert shared_prefix([(7,), (7, 2)]) == ((), ())  # one label is the prefix itself
    assert shared_prefix([(7, 1), (7, 2), (9, 3)]) == ((), ())  # only some collide: still an error upstream
    assert shared_prefix([(7, 1)]) == ((), ())


def test_tokenizer_splits_like_sentencepiece():
    tok = _sp_lm().tokenizer
    assert tok.convert_ids_to_tokens(tok(" 1", add_special_tokens=False)["input_ids"]) == ["▁", "1"]


def test_spaced_digit_labels_score_the_joint_probability():
    lm = _sp_lm()
    scorer = Scorer(lm)
    req = LabelRequest("q", "Who was it? Answer:", ("1", "2", "3"))
    enc = scorer.encode(req)
    tok = lm.tokenizer
    seq = enc.sequences[0]
    assert tok.convert_ids_to_tokens(list(seq.ids[seq.score_from:])) == ["▁"]
    assert [tok.convert_ids_to_tokens(v[0]) for v in enc.label_variants] == ["1", "2", "3"]
    [res] = scorer.score([req])
    # log P(" 1" | prompt) = log P("▁") + log P("1" | "▁"), from a plain forward pass
    ref = [sum(reference.continuation_logprobs(lm, req.prompt, lab)) for lab in req.labels]
    assert list(res.logprobs) == pytest.approx(ref, abs=1e-4)
    assert res.label_mass == pytest.approx(sum(math.exp(x) for x in ref), rel=1e-4)
    assert sum(res.probs) == pytest.approx(1.0)


def test_shared_prefix_in_sampling_and_cache(tmp_path):
    lm = _sp_lm()
    req = LabelRequest("q", "Who was it? Answer:", ("1", "2", "3"))
    [exact] = Scorer(lm).score([req])
    # T = 1, top-p = 1: sampling the two tokens is the model's own distribution
    [res] = Scorer(lm).score([req], sampling=[SamplingSpec(1.0, 1.0)])
    s = res.sampling[0]
    assert s.mass == pytest.approx(exact.label_mass, rel=1e-4)
    assert list(s.probs) == pytest.approx(list(exact.probs), abs=1e-5)
    from probe.models.fingerprint import model_fingerprint
    from probe.scoring.cache import ENGINE_VERSION, ScoreCache

    with ScoreCache(tmp_path / "c.sqlite", model_fingerprint(lm, ENGINE_VERSION)) as cache:
        first = Scorer(lm, cache=cache).score([req])[0]
        again = Scorer(lm, cache=cache).score([req])[0]
    assert list(first.logprobs) == pytest.approx(list(exact.logprobs), abs=1e-5)
    assert list(again.logprobs) == pytest.approx(list(first.logprobs), abs=1e-9)


def test_partial_collision_still_an_error():
    with pytest.raises(ValueError, match="same token"):
        Scorer(_sp_lm()).encode(LabelRequest("x", "Answer:", ("1", "2", "unknown 1"), space="both"))


def test_shared_word_prefix_still_an_error():
    # "Person A" / "Person B" share a word, not a separator: their first tokens collide as before
    with pytest.raises(ValueError, match="same token"):
        Scorer(_sp_lm()).encode(LabelRequest("x", "Answer:", ("first person", "first one")))
