"""The scorer on the real embedded model (SmolLM2-135M-Instruct), offline.

(a) every output equals a plain one-prompt-one-forward log_softmax reference;
(b) batch size 1 vs 8 vs shuffled order agree;
(c) KV-reused continuation scores equal full recomputation;
(d) the chat template and prefill render as documented.
The worst deviations are printed (run with -s) for the record.
"""

from __future__ import annotations

import random
import time

import pytest

from probe.tasks.demo.data import demo_items
from probe.tasks.demo.task import request_for, user_turn
from probe.prompts.chat import render_prompt
from probe.scoring import ContinuationRequest, LabelRequest, PerplexityRequest, Scorer
from tests import reference

pytestmark = pytest.mark.integration
TOL = 1e-4


def _requests(lm):
    items = [it for it in demo_items() if it["scenario"] in (0, 2, 4)][::2]  # 12 items, both context kinds
    reqs = []
    for it in items:
        prompt = render_prompt(lm.tokenizer, user_turn(it), system="Answer with one word.", prefill="Answer:")
        reqs.append(LabelRequest(f"{it['id']}-abc", prompt, ("A", "B", "C"), group=str(it["scenario"])))
        reqs.append(ContinuationRequest(f"{it['id']}-cont", prompt, tuple(it["options"]), group=str(it["scenario"])))
        reqs.append(PerplexityRequest(f"{it['id']}-ppl", " " + it["question"], prefix=it["context"]))
    return reqs


def test_a_matches_independent_reference(smollm2):
    reqs = _requests(smollm2)
    results = Scorer(smollm2, batch_size=8).score(reqs)
    worst = 0.0
    for req, res in zip(reqs, results):
        if isinstance(req, LabelRequest):
            ref = reference.label_logprobs(smollm2, req.prompt, list(req.labels))
        elif isinstance(req, ContinuationRequest):
            ref = [x for o in req.options for x in reference.continuation_logprobs(smollm2, req.prompt, o)]
        else:
            nll, n = reference.perplexity(smollm2, req.text, req.prefix)
            assert n == res.n_tokens
            ref = None
            worst = max(worst, abs(nll - res.nll) / n)
            continue
        got = reference.result_numbers(res)
        assert len(got) == len(ref)
        worst = max(worst, max(abs(a - b) for a, b in zip(got, ref)))
    print(f"\n(a) max |scorer - reference| log-prob = {worst:.2e}")
    assert worst <= TOL


def test_b_batch_size_and_order_invariance(smollm2):
    reqs = _requests(smollm2)
    base = {r.id: reference.result_numbers(r) for r in Scorer(smollm2, batch_size=1).score(reqs)}
    shuffled = reqs[:]
    random.Random(7).shuffle(shuffled)
    worst = 0.0
    for bs, rs in ((8, reqs), (8, shuffled), (3, shuffled)):
        for res in Scorer(smollm2, batch_size=bs).score(rs):
            worst = max(worst, max(abs(a - b) for a, b in zip(reference.result_numbers(res), base[res.id])))
    print(f"\n(b) max |bs=1 - bs=8/shuffled/bs=3| log-prob = {worst:.2e}")
    assert worst <= TOL


def test_c_kv_reuse_equals_full_recomputation(smollm2):
    items = demo_items()[:8]
    reqs = [request_for(it, smollm2.tokenizer) for it in items]
    shared = Scorer(smollm2, batch_size=8)
    full = Scorer(smollm2, batch_size=8, share_prefixes=False)
    a, b = shared.score(reqs), full.score(reqs)
    worst = max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(reference.result_numbers(ra), reference.result_numbers(rb)))
    print(f"\n(c) max |KV-reuse - full recomputation| = {worst:.2e}; tokens run {shared.engine.tokens_run} vs {full.engine.tokens_run}")
    assert worst <= TOL
    assert shared.engine.tokens_run < full.engine.tokens_run / 2


def test_d_chat_template_and_prefill_render(smollm2):
    text = render_prompt(smollm2.tokenizer, "Who?", system="Be brief.", prefill="Answer:")
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWho?<|im_end|>\n<|im_start|>assistant\nAnswer:"
    scorer = Scorer(smollm2)
    enc = scorer.encode(LabelRequest("x", text, ("A", "B")))
    # no second BOS: the template's <|im_start|> is the first token, once
    assert enc.sequences[0].ids[0] == smollm2.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert enc.sequences[0].ids[1] != enc.sequences[0].ids[0]
    assert [smollm2.tokenizer.convert_ids_to_tokens(v[0]) for v in enc.label_variants] == ["ĠA", "ĠB"]
    plain = render_prompt(smollm2.tokenizer, "Who?", system="Be brief.", prefill="Answer:", chat_template=False)
    assert plain == "Be brief.\n\nWho?\nAnswer:"


def test_cached_conversion_loads_fast(smollm2):
    from probe.models import load_model

    start = time.perf_counter()
    again = load_model("smollm2")
    assert time.perf_counter() - start < 15  # the GGUF conversion (~30 s) is not repeated
    assert again.file_sha256 == smollm2.file_sha256


def test_demo_resumes(tmp_path, smollm2):
    import json

    import probe

    out = tmp_path / "demo"
    first = probe.evaluate(smollm2, "demo", output=out, limit=4, progress=False)
    assert len(first.records) == 4
    assert json.loads((out / "timing.json").read_text())["scored_this_invocation"]["continuation"]["n"] == 4
    again = probe.evaluate(smollm2, "demo", output=out, limit=4, progress=False)
    assert json.loads((out / "timing.json").read_text())["scored_this_invocation"] == {}  # nothing rescored
    assert again.summary == first.summary
    assert (out / "records.jsonl").read_text().count("\n") == 4
    assert {"summary.json", "report.md", "records.jsonl", "provenance.json"} <= {p.name for p in out.iterdir()}
