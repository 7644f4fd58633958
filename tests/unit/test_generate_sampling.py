"""Sampled generation: one seeded stream per request (batch size, order and resume never change a chain),
greedy unchanged, sampling settings in the input check."""

from __future__ import annotations

import json

import pytest
import torch

from probe.errors import ProbeError
from probe.runs.resume import request_digest
from probe.runs.runner import RunOptions, Runner
from probe.scoring.generate import GenerationRequest, generation_seed, greedy_generate, run_generation
from probe.scoring.tokens import wants_special_tokens

PROMPTS = ["Tell me about cats", "Why is the sky blue? Think.", "One two three", "A longer prompt about dogs and why"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread):
    pass


def _sampled(temperature=1.0, top_p=1.0, seed=0, n=4, max_new=8):
    return [GenerationRequest(f"q{i}", PROMPTS[i], max_new, temperature=temperature, top_p=top_p, seed=seed)
            for i in range(n)]


@torch.inference_mode()
def _old_greedy(lm, prompts, max_new_tokens, batch_size):
    """The greedy generation as committed before sampling existed (8301748..d9b1bd4), inlined as the reference."""
    tok, model = lm.tokenizer, lm.model
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    out = [""] * len(prompts)
    for b in range(0, len(order), batch_size):
        idx = order[b: b + batch_size]
        encs = [tok(prompts[i], add_special_tokens=wants_special_tokens(tok, prompts[i]))["input_ids"] for i in idx]
        width = max(len(e) for e in encs)
        ids = torch.full((len(encs), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for j, e in enumerate(encs):
            ids[j, width - len(e):] = torch.tensor(e)
            mask[j, width - len(e):] = 1
        gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=pad)
        for j, i in enumerate(idx):
            out[i] = tok.decode(gen[j, width:], skip_special_tokens=True)
    return out


def test_greedy_is_unchanged(tiny_lm):
    for bs in (1, 3):
        assert greedy_generate(tiny_lm, PROMPTS, max_new_tokens=6, batch_size=bs) == _old_greedy(tiny_lm, PROMPTS, 6, bs)
    reqs = [GenerationRequest(f"g{i}", p, 6) for i, p in enumerate(PROMPTS)]
    assert run_generation(tiny_lm, reqs, batch_size=2) == greedy_generate(tiny_lm, PROMPTS, 6, batch_size=2)


def test_greedy_digest_is_the_one_before_sampling_fields():
    """A greedy request's input-check digest ignores the (unused) sampling fields: older outputs still resume."""
    import hashlib

    r = GenerationRequest("g", "prompt", 7, meta={"kind": "cot"})
    old = {"id": "g", "prompt": "prompt", "max_new_tokens": 7, "stop": [], "group": None, "meta": {"kind": "cot"},
           "kind": "generation"}
    text = json.dumps(old, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=str)
    assert request_digest(r) == hashlib.sha256(text.encode()).hexdigest()
    s = GenerationRequest("g", "prompt", 7, meta={"kind": "cot"}, temperature=0.1)
    assert request_digest(s) != request_digest(r)
    assert request_digest(s) != request_digest(GenerationRequest("g", "prompt", 7, meta={"kind": "cot"},
                                                                 temperature=0.1, seed=1))


def test_sampled_chains_do_not_depend_on_batch_size_or_order(tiny_lm):
    reqs = _sampled()
    one = run_generation(tiny_lm, reqs, batch_size=1)
    assert run_generation(tiny_lm, reqs, batch_size=3) == one
    assert run_generation(tiny_lm, reqs[::-1], batch_size=4) == one[::-1]
    assert run_generation(tiny_lm, reqs[2:3], batch_size=1) == one[2:3]  # alone, as a resumed run would
    other = run_generation(tiny_lm, _sampled(seed=1), batch_size=2)
    assert other != one  # another seed, other chains (T = 1 on a random model: near-uniform tokens)
    assert len(set(one)) == len(one)  # and each request its own stream
    assert generation_seed(0, "q0") == generation_seed(0, "q0") != generation_seed(1, "q0")


def test_sampling_limits_reduce_to_greedy(tiny_lm):
    """T -> 0, or a nucleus holding only the top token, samples the argmax: the greedy text."""
    greedy = greedy_generate(tiny_lm, PROMPTS, max_new_tokens=6, batch_size=2)
    assert run_generation(tiny_lm, _sampled(temperature=1e-4, max_new=6), batch_size=2) == greedy
    assert run_generation(tiny_lm, _sampled(temperature=5.0, top_p=1e-9, max_new=6), batch_size=2) == greedy


def test_request_validates_sampling_fields():
    with pytest.raises(ValueError, match="temperature"):
        GenerationRequest("g", "p", temperature=0.0)
    with pytest.raises(ValueError, match="top_p"):
        GenerationRequest("g", "p", temperature=1.0, top_p=1.5)
    assert GenerationRequest("g", "p").settings() == {}
    assert GenerationRequest("g", "p", temperature=0.5, seed=3).settings() == {"temperature": 0.5, "top_p": 1.0,
                                                                            "seed": 3}


def test_sampled_generations_are_recorded_resumed_and_checked(tiny_lm, tmp_path):
    reqs = _sampled(temperature=0.7, top_p=0.9)
    full = Runner(tiny_lm, RunOptions(progress=False, batch_size=4)).generate(reqs, tmp_path / "full.jsonl")
    out = tmp_path / "generations.jsonl"
    # an interrupted run: the first two chains, at another batch size; then the resume
    Runner(tiny_lm, RunOptions(progress=False, batch_size=1)).generate(reqs[:2], out)
    runner = Runner(tiny_lm, RunOptions(progress=False, batch_size=2))
    assert runner.generate(reqs, out) == full
    assert len(out.read_text().splitlines()) == 4  # the two recorded chains kept, the missing two appended
    line = json.loads(out.read_text().splitlines()[0])
    assert (line["temperature"], line["top_p"], line["seed"]) == (0.7, 0.9, 0)
    with pytest.raises(ProbeError, match="different input"):
        runner.generate(_sampled(temperature=0.5, top_p=0.9), out)


@torch.inference_mode()
def test_generation_through_the_engine_equals_transformers_generate_with_its_processors_and_eos(tiny_lm):
    """Batched generation runs through the engine's cached extension, not ``generate``: with a repetition
    penalty in the model's generation config (one of transformers' own processors) and an end-of-sequence
    token some rows reach early, greedy and sampled texts equal transformers' ``generate`` with the same
    config and the same row sampler."""
    import copy

    from transformers import LogitsProcessorList

    from probe.scoring.generate import _RowSampler, sample_generate
    from probe.scoring.sampler.sampling import SamplingSpec

    model, tok = tiny_lm.model, tiny_lm.tokenizer
    before = copy.deepcopy(model.generation_config)
    first = greedy_generate(tiny_lm, PROMPTS, max_new_tokens=8, batch_size=4)
    try:
        model.generation_config.repetition_penalty = 1.5

        def reference(sampler=None, ids_only=False):
            pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
            encs = [tok(p, add_special_tokens=wants_special_tokens(tok, p))["input_ids"] for p in PROMPTS]
            width = max(map(len, encs))
            ids = torch.full((len(encs), width), pad, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for j, e in enumerate(encs):
                ids[j, width - len(e):], mask[j, width - len(e):] = torch.tensor(e), 1
            extra = {"logits_processor": LogitsProcessorList([sampler])} if sampler else {}
            gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                                 pad_token_id=pad, **extra)
            if ids_only:
                return gen[:, width:]
            return [tok.decode(g[width:], skip_special_tokens=True) for g in gen]

        model.generation_config.eos_token_id = int(reference(ids_only=True)[1, 2])  # row 1 ends at step 3
        # one batch in prompt order (the library sorts by length: the order of rows never changes a row)
        greedy = greedy_generate(tiny_lm, PROMPTS, max_new_tokens=8, batch_size=4)
        assert greedy == reference() and greedy != first
        assert any(len(tok(t, add_special_tokens=False)["input_ids"]) < 8 for t in greedy)  # a row stopped early
        seeds = [11, 12, 13, 14]
        sampled = sample_generate(tiny_lm, PROMPTS, seeds, temperature=1.0, max_new_tokens=8, batch_size=4)
        assert sampled == reference(_RowSampler(SamplingSpec(1.0, 1.0), seeds))
    finally:
        model.generation_config = before
