"""parse_exact with the paper's whole sampler per path (SamplerChain): every path's probability against a
brute-force product of transformers' own logits processors, in generate's order, with plain full forwards."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from probe.scoring.parse.exact import ParseRequest, eos_ids, parse_exact, run_parse_requests

from probe.scoring.parse.schema import ParseSettings
from probe.scoring.sampler.chain import SamplerChain
from probe.scoring.sampler.sampling import SamplingSpec

PROMPTS = ["Who has item 3? Answer:", "<|im_start|>user\nWho was it?<|im_end|>\n<|im_start|>assistant\n",
           "The cat sat on the"]


def whole_text(text: str):
    """Every distinct text is its own answer: the answer masses are the path masses (summed over the paths
    that decode to the same text)."""
    return text


def _processors(chain: SamplerChain) -> LogitsProcessorList:
    """transformers' processors as ``generate`` orders them (penalty first, then the warpers)."""
    out = LogitsProcessorList()
    if chain.repetition_penalty != 1:
        out.append(RepetitionPenaltyLogitsProcessor(chain.repetition_penalty))
    if chain.temperature != 1:
        out.append(TemperatureLogitsWarper(chain.temperature))
    if chain.top_k:
        out.append(TopKLogitsWarper(chain.top_k))
    if chain.top_p < 1:
        out.append(TopPLogitsWarper(chain.top_p))
    if chain.min_p > 0:
        out.append(MinPLogitsWarper(chain.min_p))
    return out


def _api_penalties(chain: SamplerChain, generated: list[int], scores: torch.Tensor) -> torch.Tensor:
    """The OpenAI frequency / presence rule on the generated tokens, written out (transformers has none)."""
    c = Counter(generated)
    sub = torch.tensor([[c[j] * chain.frequency_penalty + float(c[j] > 0) * chain.presence_penalty
                         for j in range(scores.shape[-1])]], dtype=scores.dtype)
    return scores - sub


def brute_force(lm, prompt: str, chain: SamplerChain, max_new: int) -> dict:
    """Every generation's text -> probability: each step's distribution from transformers' processors on the
    prompt + path, one plain forward per prefix (no cache, no batching)."""
    tok = lm.tokenizer
    ids = tok(prompt, add_special_tokens=not prompt.startswith(tok.bos_token))["input_ids"]
    eos, procs = eos_ids(lm), _processors(chain)
    out: dict = {}
    frontier = [((), 1.0)]
    for depth in range(max_new):
        nxt = []
        for path, mass in frontier:
            seq = torch.tensor([list(ids) + list(path)])
            with torch.no_grad():
                logits = lm.model(seq).logits[:, -1].float()
            scores = logits.double()
            if chain.repetition_penalty != 1:
                scores = procs[0](seq, scores)
            if chain.frequency_penalty or chain.presence_penalty:
                scores = _api_penalties(chain, list(path), scores)
            for proc in procs[1:] if chain.repetition_penalty != 1 else procs:
                scores = proc(seq, scores)
            dist = torch.softmax(scores, dim=-1)[0]
            for t in dist.nonzero()[:, 0].tolist():
                m = mass * float(dist[t])
                if t in eos or depth == max_new - 1:
                    text = tok.decode(list(path) + ([] if t in eos else [t]), skip_special_tokens=True)
                    out[text] = out.get(text, 0.0) + m
                else:
                    nxt.append((path + (t,), m))
        frontier = nxt
    return out


@pytest.fixture(scope="module")
def lm(tiny_lm):
    return tiny_lm


CHAINS = [
    SamplerChain(temperature=0.8, top_k=6, repetition_penalty=1.2),  # HBB's open-weight wrapper, narrowed
    SamplerChain(temperature=1.5, top_k=8, top_p=0.9, min_p=0.05, repetition_penalty=1.5),
    SamplerChain(temperature=2.0, top_k=5, repetition_penalty=0.7),  # a penalty below 1 raises seen tokens
    SamplerChain(temperature=1.2, top_k=6, frequency_penalty=0.6, presence_penalty=0.3),  # the API rule
]


@pytest.mark.parametrize("chain", CHAINS, ids=lambda c: c.describe())
def test_every_path_equals_transformers_processors(lm, chain):
    max_new = 3
    res = parse_exact(lm, PROMPTS, chain, whole_text,
                      ParseSettings(max_new, residual=0.0, prune=0.0, batch_size=5, prompt_batch=2))
    for prompt, d in zip(PROMPTS, res):
        ref = brute_force(lm, prompt, chain, max_new)
        assert d.residual == pytest.approx(0.0, abs=1e-9) and abs(d.total() - 1.0) < 1e-6
        assert len(ref) > 10  # a tree with many paths, not a single greedy one
        assert set(d.probs) == {t for t, m in ref.items() if m > 0}
        for text, m in ref.items():
            assert d.probs.get(text, 0.0) == pytest.approx(m, abs=1e-6), (prompt, text)


def test_the_penalty_changes_the_answer(lm):
    """The repetition penalty is not a no-op here: the same tree without it differs by more than the tolerance."""
    with_penalty = parse_exact(lm, PROMPTS[:1], CHAINS[0], whole_text, ParseSettings(3, residual=0.0, prune=0.0))[0]
    without = parse_exact(lm, PROMPTS[:1], SamplerChain(temperature=0.8, top_k=6), whole_text,
                          ParseSettings(3, residual=0.0, prune=0.0))[0]
    diff = max(abs(with_penalty.probs.get(t, 0.0) - without.probs.get(t, 0.0))
               for t in set(with_penalty.probs) | set(without.probs))
    assert diff > 1e-3


@pytest.mark.parametrize("t,p", [(0.7, 0.9), (1.0, 1.0), (40.0, 0.05)])
def test_a_temperature_top_p_chain_is_the_sampling_spec_bit_for_bit(lm, t, p):
    settings = ParseSettings(3, residual=0.01, max_nodes=40, batch_size=4)
    old = parse_exact(lm, PROMPTS, SamplingSpec(t, p), whole_text, settings)
    new = parse_exact(lm, PROMPTS, SamplerChain(temperature=t, top_p=p, order="vllm"), whole_text, settings)
    for a, b in zip(old, new):
        assert a.to_dict() == b.to_dict()


def test_requests_carry_the_chain_and_group_by_it(lm):
    chain = SamplerChain(temperature=0.8, top_k=6, repetition_penalty=1.2)
    reqs = [ParseRequest("a", PROMPTS[0], 2, 0.8, 1.0, "whole", whole_text, residual=0.0, sampler=chain),
            ParseRequest("b", PROMPTS[0], 2, 0.8, 1.0, "whole", whole_text, residual=0.0)]
    assert reqs[0].spec_key != reqs[1].spec_key
    out = run_parse_requests(lm, reqs)
    alone = parse_exact(lm, [PROMPTS[0]], chain, whole_text, ParseSettings(2, residual=0.0))[0]
    plain = parse_exact(lm, [PROMPTS[0]], SamplingSpec(0.8), whole_text, ParseSettings(2, residual=0.0))[0]
    assert out[0].to_dict() == alone.to_dict() and out[1].to_dict() == plain.to_dict()
    with pytest.raises(ValueError, match="disagrees"):
        ParseRequest("c", PROMPTS[0], 2, 0.7, 1.0, "whole", whole_text, sampler=chain)


def test_the_chain_is_part_of_the_digest_only_when_set():
    from probe.runs.resume import request_digest

    a = ParseRequest("x", "p", 2, 0.8, 1.0, "rule/1", whole_text)
    b = ParseRequest("x", "p", 2, 0.8, 1.0, "rule/1", whole_text, sampler=None)
    c = ParseRequest("x", "p", 2, 0.8, 1.0, "rule/1", whole_text,
                     sampler=SamplerChain(temperature=0.8, top_k=50, repetition_penalty=1.2))
    assert request_digest(a) == request_digest(b) != request_digest(c)
    # the digest a request had before the field existed (fixed text: a stored sidecar must still match)
    assert request_digest(a) == _digest_without_sampler(a)


def _digest_without_sampler(request) -> str:
    import dataclasses
    import hashlib
    import json

    fields = dataclasses.asdict(request)
    for key in ("parser", "decided", "sampler", "tail"):
        fields.pop(key)
    fields.pop("answer_residual")
    text = json.dumps(fields, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
