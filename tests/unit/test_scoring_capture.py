"""Activations recorded in the scorer's own forward passes, prefix sharing on (probe.activations.scoring_capture).

The tests drive ``Scorer.score(capture=spec)`` directly (the call the Runner makes per chunk), so batch size,
token budget and order can be varied; the Runner's road is checked against it at the end.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from probe.activations.hooks import discover
from probe.activations import scoring_capture
from probe.activations.scoring_capture import CaptureSpec, missing_positions
from probe.activations.store import Activations
from probe.scoring import ContinuationRequest, LabelRequest, PerplexityRequest, Scorer

SYSTEM = "Background: Person A has wrinkles. Person B has smooth skin. "


def _requests():
    """Label and continuation requests with shared prefixes (so the plain scorer shares them),
    a group, and two requests with identical prompts (deduplicated rows)."""
    reqs = []
    for i, q in enumerate(["Who was not comfortable using the phone?", "Who tried to book a cab?",
                           "Who saw a cat at the market?"]):
        prompt = SYSTEM + q + " Answer:"
        reqs.append(LabelRequest(f"lab{i}", prompt, ("A", "B"), group=f"g{i % 2}"))
        reqs.append(ContinuationRequest(f"con{i}", prompt, ("Person A", "Person B", "Unknown"), group=f"g{i % 2}"))
    reqs.append(LabelRequest("dup", SYSTEM + "Who was not comfortable using the phone? Answer:", ("A", "B")))
    reqs.append(LabelRequest("short", "The cat sat on the mat. Answer:", ("A", "B")))
    return reqs


def _fields(reqs):
    return {r.id: {"cue": "has wrinkles"} for r in reqs if r.id != "short"}


def _spec(lm, positions="last,span:cue,mean:cue", reqs=None, **kw):
    n = discover(lm.model).n_layers
    hooks = [f"blocks.{i}.hook_resid_pre" for i in range(n)] + ["blocks.0.hook_resid_post", "ln_final.hook_normalized"]
    return CaptureSpec(hooks=tuple(hooks), positions=positions, fields=_fields(reqs or _requests()), **kw)


def score_and_capture(scorer, reqs, spec):
    """The scorer's results and their vectors per key, ``[n_requests, d_model]`` in request order."""
    results = scorer.score(reqs, capture=spec)
    arrays = {k: np.stack([r.activations[k] for r in results]) for k in spec.keys}
    records = []
    for r in results:
        miss = missing_positions(r, spec)
        records.append({"id": r.id, **({"missing_positions": miss} if miss else {})})
    return results, Activations([r.id for r in reqs], arrays, records, {"keys": spec.keys})


def _hidden_states(lm, ids):
    """Plain single-sequence forward: output_hidden_states [layers + 1] x [len, d]."""
    out = lm.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    return [h[0] for h in out.hidden_states]


def _prompt_ids(scorer, r):
    e = scorer.encode(r)
    return e.sequences[0].ids[: e.n_prompt_tokens]


def _span(tok, prompt, text):
    enc = tok(prompt, return_offsets_mapping=True, add_special_tokens=False)
    s = prompt.find(text)
    return [i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > a and a < s + len(text) and b > s]


def _flat(results):
    out = []
    for r in results:
        out.extend(r.logprobs)
        out.extend(x for t in getattr(r, "token_logprobs", ()) for x in t)
    return np.array(out)


def test_capture_equals_output_hidden_states(tiny_lm):
    reqs = _requests()
    scorer = Scorer(tiny_lm, batch_size=4)
    _, acts = score_and_capture(scorer, reqs, _spec(tiny_lm))
    n = discover(tiny_lm.model).n_layers
    tok = tiny_lm.tokenizer
    assert acts.ids == [r.id for r in reqs]
    for k, r in enumerate(reqs):
        ids = _prompt_ids(scorer, r)
        hs = _hidden_states(tiny_lm, ids)
        for i in range(n):
            got = acts[f"blocks.{i}.hook_resid_pre@last"][k]
            assert np.abs(got - hs[i][-1].numpy()).max() <= 1e-5, (r.id, i)
        assert np.abs(acts["blocks.0.hook_resid_post@last"][k] - hs[1][-1].numpy()).max() <= 1e-5
        assert np.abs(acts["ln_final.hook_normalized@last"][k] - hs[n][-1].numpy()).max() <= 1e-5
        if r.id == "short":
            continue
        toks = _span(tok, r.prompt, "has wrinkles")
        assert len(toks) > 1  # a real multi-token span, so span and mean differ
        assert np.abs(acts["blocks.1.hook_resid_pre@span:cue"][k] - hs[1][toks[-1]].numpy()).max() <= 1e-5
        mean = hs[1][toks].mean(0).numpy()
        assert np.abs(acts["blocks.1.hook_resid_pre@mean:cue"][k] - mean).max() <= 1e-5


def test_scores_equal_scoring_without_capture(tiny_lm):
    reqs = _requests()
    plain = Scorer(tiny_lm, batch_size=4).score(reqs)  # prefix sharing on
    hooks_before = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in tiny_lm.model.modules())
    scorer = Scorer(tiny_lm, batch_size=4)
    got, _ = score_and_capture(scorer, reqs, _spec(tiny_lm))
    assert [type(a) for a in got] == [type(b) for b in plain]
    assert np.abs(_flat(got) - _flat(plain)).max() <= 1e-5
    # prefix sharing stays on and no hook is left behind
    assert scorer.share_prefixes is True
    hooks_after = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in tiny_lm.model.modules())
    assert hooks_after == hooks_before  # (transformers keeps a few hooks of its own)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_batch_size_and_order_invariance(tiny_lm, batch_size):
    reqs = _requests()
    _, base = score_and_capture(Scorer(tiny_lm, batch_size=8), reqs, _spec(tiny_lm))
    shuffled = list(reqs)
    random.Random(batch_size).shuffle(shuffled)
    _, got = score_and_capture(Scorer(tiny_lm, batch_size=batch_size, token_budget=256), shuffled,
                               _spec(tiny_lm))
    order = [got.ids.index(i) for i in base.ids]
    assert got.keys() == base.keys()
    for key in base.keys():
        np.testing.assert_allclose(got[key][order], base[key], rtol=0, atol=1e-5, equal_nan=True, err_msg=key)
    assert np.isnan(base["blocks.0.hook_resid_pre@span:cue"]).any()  # the missing span stays NaN in both


def test_continuation_last_and_label_positions(tiny_lm):
    prompt = SYSTEM + "Who was not comfortable using the phone? Answer:"
    r = ContinuationRequest("c", prompt, ("Person A", "Unknown"))
    scorer = Scorer(tiny_lm)
    spec = CaptureSpec(hooks=("blocks.1.hook_resid_pre",), positions="last,label", answer_labels={"c": "Unknown"})
    [res], acts = score_and_capture(scorer, [r], spec)
    e = scorer.encode(r)
    n = e.n_prompt_tokens
    option_row = e.sequences[1].ids  # "Unknown"
    hs = _hidden_states(tiny_lm, option_row)[1]
    # last = the position before the first option token; label = the option's first token
    assert np.abs(acts["blocks.1.hook_resid_pre@last"][0] - hs[n - 1].numpy()).max() <= 1e-5
    assert np.abs(acts["blocks.1.hook_resid_pre@label"][0] - hs[n].numpy()).max() <= 1e-5
    [plain] = Scorer(tiny_lm).score([r])
    assert np.abs(np.array(res.logprobs) - np.array(plain.logprobs)).max() <= 1e-5


def test_label_position_of_label_request_leaves_scores_unchanged(tiny_lm):
    reqs = [LabelRequest("a", SYSTEM + "Who is old? Answer:", ("A", "B")),
            LabelRequest("b", SYSTEM + "Who is young? Answer:", ("A", "B")),
            LabelRequest("c", "The cat sat. Answer:", ("A", "B"))]  # shorter: its label token fills a pad column
    answers = {"a": "B", "b": "A", "c": "A"}
    scorer = Scorer(tiny_lm)
    spec = CaptureSpec(hooks=("blocks.1.hook_resid_pre",), positions=("last", "label"), answer_labels=answers)
    got, acts = score_and_capture(scorer, reqs, spec)
    plain = Scorer(tiny_lm).score(reqs)
    assert np.abs(_flat(got) - _flat(plain)).max() <= 1e-5
    for k, r in enumerate(reqs):
        e = scorer.encode(r)
        label_tok = e.label_variants[r.labels.index(answers[r.id])][0]
        hs = _hidden_states(tiny_lm, e.sequences[0].ids + (label_tok,))[1]
        assert np.abs(acts["blocks.1.hook_resid_pre@label"][k] - hs[-1].numpy()).max() <= 1e-5
        assert np.abs(acts["blocks.1.hook_resid_pre@last"][k] - hs[-2].numpy()).max() <= 1e-5


def test_missing_span_is_nan_and_listed(tiny_lm):
    reqs = _requests()
    _, acts = score_and_capture(Scorer(tiny_lm), reqs, _spec(tiny_lm))
    k = acts.ids.index("short")
    assert np.isnan(acts["blocks.0.hook_resid_pre@span:cue"][k]).all()
    assert np.isfinite(acts["blocks.0.hook_resid_pre@last"][k]).all()
    assert acts.records[k] == {"id": "short", "missing_positions": ["span:cue", "mean:cue"]}
    others = [i for i in range(len(reqs)) if i != k]
    assert np.isfinite(acts["blocks.0.hook_resid_pre@mean:cue"][others]).all()


def test_deprecated_side_roads_warn_and_still_work(tiny_lm):
    reqs = _requests()
    scorer = Scorer(tiny_lm)
    _, whole = score_and_capture(scorer, reqs, _spec(tiny_lm))
    with pytest.warns(DeprecationWarning, match=r"Runner\(lm, RunOptions\(\.\.\.\)\)\.score\(requests, capture=spec\)"):
        _, old = scoring_capture.score_and_capture(scorer, reqs, _spec(tiny_lm))
    assert old.ids == whole.ids and old.records == whole.records and old.manifest["d_model"] == tiny_lm.model.config.hidden_size
    with pytest.warns(DeprecationWarning, match="iter_score_and_capture"):
        parts = list(scoring_capture.iter_score_and_capture(scorer, reqs, _spec(tiny_lm), chunk_size=3))
    assert [len(res) for res, _ in parts] == [3, 3, 2]
    ids = [i for _, a in parts for i in a.ids]
    assert ids == whole.ids
    key = "blocks.1.hook_resid_pre@mean:cue"
    stacked = np.concatenate([a[key] for _, a in parts])
    np.testing.assert_allclose(stacked, whole[key], atol=1e-5, equal_nan=True)
    np.testing.assert_array_equal(old[key], whole[key])


def test_runner_road_records_the_scorers_vectors(tiny_lm):
    """The Runner (in memory, chunked) records exactly what the scorer's capture reads."""
    from probe.runs.runner import RunOptions, Runner

    reqs = _requests()
    _, want = score_and_capture(Scorer(tiny_lm, batch_size=4), reqs, _spec(tiny_lm))
    with Runner(tiny_lm, RunOptions(batch_size=4, chunk_size=3, progress=False, threads=1)) as runner:
        records = runner.score(reqs, capture=_spec(tiny_lm))
        got = runner.activations
    assert sorted(r.id for r in records) == sorted(got.ids) == sorted(want.ids)  # chunks keep groups whole
    order = [got.ids.index(i) for i in want.ids]
    for key in want.keys():
        np.testing.assert_allclose(got[key][order], want[key], rtol=0, atol=1e-5, equal_nan=True, err_msg=key)
    assert [got.records[k].get("missing_positions") for k in order] == [r.get("missing_positions") for r in want.records]


def test_bad_input_is_rejected(tiny_lm):
    scorer = Scorer(tiny_lm)
    ok = LabelRequest("q", SYSTEM + "Who? Answer:", ("A", "B"))
    spec = CaptureSpec(hooks="blocks.0.hook_resid_post", positions="last")
    with pytest.raises(ValueError, match="unique"):
        score_and_capture(scorer, [ok, ok], spec)
    with pytest.raises(ValueError, match="a perplexity request is captured at 'last'"):  # only there
        score_and_capture(scorer, [PerplexityRequest("p", "some text")], CaptureSpec(("blocks.0.hook_resid_post",),
                                                                                     "label"))
    with pytest.raises(ValueError, match="'cue'.*not in the prompt"):
        score_and_capture(scorer, [ok], CaptureSpec(("blocks.0.hook_resid_post",), "span:cue",
                                                    fields={"q": {"cue": "has no such words"}}))
    with pytest.raises(ValueError, match="answer_label"):
        score_and_capture(scorer, [ok], CaptureSpec(("blocks.0.hook_resid_post",), "label"))
    with pytest.raises(ValueError, match="not one of"):
        score_and_capture(scorer, [ok], CaptureSpec(("blocks.0.hook_resid_post",), "label", answer_labels={"q": "C"}))
    with pytest.raises(KeyError):
        score_and_capture(scorer, [ok], CaptureSpec(("blocks.9.hook_resid_post",), "last"))
    with pytest.raises(ValueError):
        CaptureSpec(hooks=(), positions="last")
