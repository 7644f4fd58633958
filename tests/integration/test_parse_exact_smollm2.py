"""parse_exact against transformers' own ``generate`` sampling on SmolLM2, on prompts written for this test.

The exact side certifies ``P(answer) in [probs[a], probs[a] + residual]``; K
samples from ``generate`` (``do_sample``, ``top_k=0`` so only temperature and
nucleus act, as in ``sampling_distribution``) must land within sampling error
of that interval for every answer, and the T = 0.1 enumeration must reach a
residual <= 0.01 with 10 new tokens.
"""

from __future__ import annotations

import math

import pytest
import torch

from probe.prompts.chat import render_prompt
from probe.scoring.parse.exact import parse_exact
from probe.scoring.parse.schema import ParseSettings
from probe.scoring.sampler.sampling import SamplingSpec

pytestmark = pytest.mark.integration

QUESTIONS = [
    "A baker and a pilot shared a table on the train. Who ordered tea? Answer in one word.",
    "Is a tomato a fruit or a vegetable? Answer in one word.",
    "Name a colour of the sea in one word.",
]
K = 200


def first_word(text: str):
    words = text.strip().split()
    return words[0].strip(".,!?:;\"'*").lower() or None if words else None


def sampled(lm, prompt: str, spec: SamplingSpec, max_new: int, seed: int) -> list[str]:
    """K samples from ``generate``. The prompt (all but its last token) is run once and its key/value cache
    repeated for the K rows: ``num_return_sequences=K`` would run the same prompt K times (4/5 of the test's
    time). Same seed, same samples (checked: 200 of 200 identical texts at T = 0.1)."""
    tok = lm.tokenizer
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        cache = lm.model(ids[:, :-1], use_cache=True).past_key_values
        cache.batch_repeat_interleave(K)
        torch.manual_seed(seed)
        mask = torch.ones(K, ids.shape[1], dtype=torch.long)
        out = lm.model.generate(input_ids=ids.expand(K, -1), attention_mask=mask, past_key_values=cache,
                                do_sample=True, temperature=spec.temperature, top_p=spec.top_p, top_k=0,
                                max_new_tokens=max_new, pad_token_id=tok.pad_token_id)
    return [tok.decode(o[ids.shape[1]:], skip_special_tokens=True) for o in out]


@pytest.mark.parametrize("spec,max_nodes", [(SamplingSpec(0.1), None), (SamplingSpec(0.8, 0.9), 150)])
def test_agrees_with_generate(smollm2, one_torch_thread, spec, max_nodes):
    lm = smollm2
    questions = QUESTIONS if spec.temperature < 0.5 else QUESTIONS[:2]  # the wide tree: two prompts suffice
    prompts = [render_prompt(lm.tokenizer, q) for q in questions]
    exact = parse_exact(lm, prompts, spec, first_word, ParseSettings(10, residual=0.01, max_nodes=max_nodes))
    for i, (prompt, d) in enumerate(zip(prompts, exact)):
        assert abs(d.total() - 1.0) < 1e-6
        if spec.temperature == 0.1:
            assert d.residual <= 0.01
        texts = sampled(lm, prompt, spec, 10, seed=1000 + i)
        counts: dict = {}
        for t in texts:
            a = first_word(t)
            counts[a] = counts.get(a, 0) + 1
        answers = set(counts) | set(d.probs) | {None}
        for a in answers:
            f = counts.get(a, 0) / K
            lo = d.rejected if a is None else d.probs.get(a, 0.0)
            hi = min(1.0, lo + d.residual)
            se = math.sqrt(max(hi * (1 - lo), 1.0 / K) / K)
            assert lo - 4.5 * se <= f <= hi + 4.5 * se, (questions[i], a, f, lo, hi)
