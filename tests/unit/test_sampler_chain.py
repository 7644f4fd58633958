"""The whole sampler per path (probe.scoring.sampler.chain) against transformers' own logits processors,
transformers' generate, a plain-Python reference of the OpenAI penalties and of vLLM's order, the
SamplingSpec it must reproduce bit for bit, and hand-computed cases."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from probe.scoring.sampler.chain import (
    SamplerChain,
    TokenHistory,
    processed_logits,
    sample,
    sample_next,
    step_distribution,
)
from probe.scoring.sampler.sampling import SamplingSpec, sampling_distribution

TOL = 1e-6
INF = math.inf


@pytest.fixture(autouse=True, scope="module")
def _threads(one_torch_thread):
    yield


# -- references ---------------------------------------------------------------------------------------------
def _hf(chain: SamplerChain, logits: torch.Tensor, ids: list[int],
        generated: list[int] = ()) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """transformers' processors in generate's order on one row (``ids``: prompt + generated); the final
    scores and the scores each truncating step was given (for the ambiguity check). transformers has no
    frequency / presence penalty: the API rule is applied after its repetition penalty, written out."""
    steps = []
    if chain.repetition_penalty != 1:
        steps.append(("rep", RepetitionPenaltyLogitsProcessor(chain.repetition_penalty)))
    if chain.frequency_penalty or chain.presence_penalty:
        c = Counter(generated)
        steps.append(("openai", lambda _, s: s - torch.tensor(
            [[c[j] * chain.frequency_penalty + float(c[j] > 0) * chain.presence_penalty
              for j in range(s.shape[-1])]], dtype=s.dtype)))
    if chain.temperature != 1:
        steps.append(("temperature", TemperatureLogitsWarper(chain.temperature)))
    if chain.top_k:
        steps.append(("top_k", TopKLogitsWarper(chain.top_k)))
    if chain.top_p < 1:
        steps.append(("top_p", TopPLogitsWarper(chain.top_p)))
    if chain.min_p > 0:
        steps.append(("min_p", MinPLogitsWarper(chain.min_p)))
    input_ids = torch.tensor([ids], dtype=torch.long) if ids else torch.zeros((1, 0), dtype=torch.long)
    scores, given_to = logits.clone().unsqueeze(0), {}
    for name, proc in steps:
        given_to[name] = scores[0].clone()
        scores = proc(input_ids, scores)
    given_to["final"] = scores[0]
    return scores[0], given_to


def _tempered(chain: SamplerChain, logits: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """The scores before any cut (penalty and temperature only): what tie groups are made of."""
    return _hf(SamplerChain(chain.temperature, repetition_penalty=chain.repetition_penalty), logits, ids)[0]


def _softmax(z: list[float]) -> list[float]:
    top = max(z)
    e = [math.exp(v - top) if v > -INF else 0.0 for v in z]
    s = math.fsum(e)
    return [v / s for v in e]


def _openai(logits: list[float], generated: list[int], frequency: float, presence: float, t: float) -> list[float]:
    """The OpenAI API reference's rule, written out: mu[j] - c[j] * a_freq - float(c[j] > 0) * a_pres,
    c[j] = how often token j was sampled before; then the temperature and the softmax."""
    c = Counter(generated)
    mu = [x - c[j] * frequency - float(c[j] > 0) * presence for j, x in enumerate(logits)]
    return _softmax([m / t for m in mu])


def _vllm(chain: SamplerChain, logits: list[float], prompt: list[int], generated: list[int]) -> list[float]:
    """vLLM's V1 sampler, token by token: penalties (repetition over prompt + output, then frequency and
    presence over output), temperature, min-p, top-k, top-p; ranks ties by lower id."""
    v = len(logits)
    seen, c = set(prompt) | set(generated), Counter(generated)
    z = []
    for j, x in enumerate(logits):
        if j in seen and chain.repetition_penalty != 1:
            x = x / chain.repetition_penalty if x > 0 else x * chain.repetition_penalty
        x -= chain.frequency_penalty * c[j]
        x -= chain.presence_penalty * float(c[j] > 0)
        z.append(x / chain.temperature)
    if chain.min_p > 0:
        p = _softmax(z)
        top = max(p)
        z = [-INF if p[j] < chain.min_p * top else z[j] for j in range(v)]
    if chain.top_k:
        kth = sorted(z, reverse=True)[min(chain.top_k, v) - 1]
        z = [-INF if x < kth else x for x in z]
    if chain.top_p < 1:
        p, before, keep = _softmax(z), 0.0, set()
        for j in sorted(range(v), key=lambda j: (-z[j], j)):
            if before < chain.top_p:
                keep.add(j)
            before += p[j]
        z = [z[j] if j in keep else -INF for j in range(v)]
    return _softmax(z)


def _ambiguous(chain: SamplerChain, given_to: dict[str, torch.Tensor], eps: float = 1e-9) -> bool:
    """Whether float rounding decides a cut: a token's ranked-before mass within eps of top-p, or its
    probability within eps of min-p times the top one (the two sums run in opposite directions)."""
    if chain.top_p < 1:
        p = torch.softmax(given_to["top_p"].double(), -1)
        before = torch.cumsum(torch.sort(p, descending=True).values, -1) - torch.sort(p, descending=True).values
        if bool(((before - chain.top_p).abs() < eps).any()):
            return True
    if chain.min_p > 0:
        p = torch.softmax(given_to["min_p"].double(), -1)
        if bool((((p - chain.min_p * p.max()).abs() < eps * p.max()) & (p < p.max())).any()):
            return True
    return False


def _assert_same(ours: torch.Tensor, kept: torch.Tensor, hf_scores: torch.Tensor, tempered: torch.Tensor) -> None:
    """Our distribution against softmax(hf_scores): equal token by token except inside a tie group that
    the cut splits (transformers' order among tied tokens is torch.sort's), where the same number of
    tied tokens is kept, ours the lowest ids; the sorted distributions are equal everywhere."""
    ref = torch.softmax(hf_scores.double(), -1)
    hf_kept = hf_scores > -INF
    assert torch.allclose(torch.sort(ours).values, torch.sort(ref).values, atol=TOL, rtol=0)
    split = torch.zeros_like(hf_kept)
    for value in torch.unique(tempered[hf_kept]):
        group = tempered == value
        if bool((hf_kept[group] != hf_kept[group][0]).any()):
            split |= group
            ids = group.nonzero()[:, 0]
            n_kept = int(hf_kept[group].sum())
            assert kept[ids].tolist() == [True] * n_kept + [False] * (len(ids) - n_kept)
    assert torch.allclose(ours[~split], ref[~split], atol=TOL, rtol=0)
    assert torch.equal(kept[~split], hf_kept[~split])


# -- random cases -------------------------------------------------------------------------------------------
def _random_chain(rng: random.Random, vocab: int, order: str = "transformers") -> SamplerChain:
    return SamplerChain(
        temperature=rng.choice([0.1, 0.3, 0.7, 1.0, 1.0, 1.5, 2.0]),
        top_k=rng.choice([0, 0, 1, 3, 50, vocab, vocab + 10]),
        top_p=rng.choice([1.0, 1.0, 0.5, 0.9, 0.95, round(rng.uniform(0.05, 0.999), 3)]),
        min_p=rng.choice([0.0, 0.0, 0.05, 0.2, 1.0, round(rng.uniform(0.0, 1.0), 3)]),
        repetition_penalty=rng.choice([1.0, 1.0, 1.2, 0.8, 2.0]),
        order=order,
    )


def _random_logits(rng: random.Random, gen: torch.Generator, vocab: int, ties: bool = True) -> torch.Tensor:
    x = torch.randn(vocab, generator=gen, dtype=torch.float64) * rng.choice([0.5, 2.0, 6.0])
    if ties and rng.random() < 0.3:  # whole groups of equal logits
        x = torch.round(x)
    if rng.random() < 0.3 and vocab > 1:  # some tokens the model can never emit
        x[torch.randperm(vocab, generator=gen)[: rng.randrange(1, vocab)]] = -INF
    return x


def _random_path(rng: random.Random, vocab: int) -> tuple[list[int], list[int]]:
    # ids past the vocabulary are ignored, as transformers does
    prompt = [rng.randrange(vocab + 3) for _ in range(rng.randrange(0, 25))]
    generated = [rng.randrange(vocab) for _ in range(rng.randrange(0, 8))]
    return prompt, generated


def test_against_transformers_processors_on_random_logits_and_paths():
    rng, gen = random.Random(0), torch.Generator().manual_seed(0)
    compared = skipped = 0
    for _ in range(400):
        vocab = rng.choice([1, 2, 3, 7, 50, 300, 700])
        chain = _random_chain(rng, vocab)
        x = _random_logits(rng, gen, vocab)
        prompt, generated = _random_path(rng, vocab)
        hf_scores, given_to = _hf(chain, x, prompt + generated)
        if _ambiguous(chain, given_to):
            skipped += 1
            continue
        d = step_distribution(x, chain, TokenHistory.from_ids([prompt], [generated]))
        _assert_same(d.probs[0], d.kept[0], hf_scores, _tempered(chain, x, prompt + generated))
        assert torch.allclose(d.logprobs[0].exp(), d.probs[0], atol=1e-12, rtol=0)
        compared += 1
    assert compared >= 380, (compared, skipped)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    logits=st.lists(st.one_of(st.sampled_from([-INF, -3.0, -1.0, 0.0, 0.5, 1.0, 2.0, 5.0]),
                              st.floats(-10, 10, allow_nan=False)), min_size=1, max_size=40),
    t=st.sampled_from([0.1, 0.5, 1.0, 1.3, 3.0]),
    top_k=st.integers(0, 45),
    top_p=st.sampled_from([1.0, 0.3, 0.5, 0.8, 0.9, 0.99]),
    min_p=st.sampled_from([0.0, 0.0, 0.1, 0.5, 1.0]),
    rep=st.sampled_from([1.0, 1.3, 0.7]),
    history=st.lists(st.integers(0, 45), max_size=12),
)
def test_against_transformers_processors_with_ties_and_inf(logits, t, top_k, top_p, min_p, rep, history):
    assume(any(v > -INF for v in logits))
    x = torch.tensor(logits, dtype=torch.float64)
    chain = SamplerChain(t, top_p=top_p, top_k=top_k, min_p=min_p, repetition_penalty=rep)
    hf_scores, given_to = _hf(chain, x, history)
    assume(not _ambiguous(chain, given_to))
    d = step_distribution(x, chain, TokenHistory.from_ids([history]))
    _assert_same(d.probs[0], d.kept[0], hf_scores, _tempered(chain, x, history))


def test_float32_logits_as_generate_processes_them():
    # generate runs the processors on float32 scores; the chain reads float32 in float64
    rng, gen = random.Random(1), torch.Generator().manual_seed(1)
    for _ in range(100):
        vocab = rng.choice([50, 300, 2000])
        chain = _random_chain(rng, vocab)
        x = (torch.randn(vocab, generator=gen) * 3).float()
        prompt, generated = _random_path(rng, vocab)
        hf_scores, given_to = _hf(chain, x, prompt + generated)
        if _ambiguous(chain, given_to, eps=1e-5):
            continue
        d = step_distribution(x, chain, TokenHistory.from_ids([prompt], [generated]))
        assert torch.allclose(d.probs[0], torch.softmax(hf_scores.double(), -1), atol=TOL, rtol=0)
        assert torch.equal(d.kept[0], hf_scores > -INF)


def test_batch_of_mixed_settings_equals_each_row_alone():
    rng, gen = random.Random(2), torch.Generator().manual_seed(2)
    vocab, n = 300, 24
    chains = [_random_chain(rng, vocab, order=rng.choice(["transformers", "vllm"])) for _ in range(n)]
    chains = [SamplerChain(**{**c.to_dict(), "frequency_penalty": rng.choice([0.0, 0.6]),
                              "presence_penalty": rng.choice([0.0, 0.3])}) for c in chains]
    x = torch.stack([_random_logits(rng, gen, vocab, ties=False) for _ in range(n)]).float()
    paths = [_random_path(rng, vocab) for _ in range(n)]
    history = TokenHistory.from_ids([p for p, _ in paths], [g for _, g in paths])
    batch = step_distribution(x, chains, history)
    for i in range(n):
        alone = step_distribution(x[i], chains[i], history.select([i]))
        assert torch.equal(batch.probs[i], alone.probs[0])
        assert torch.equal(batch.kept[i], alone.kept[0])
        p, g = paths[i]
        if chains[i].order == "vllm":
            ref = torch.tensor(_vllm(chains[i], x[i].double().tolist(), p, g), dtype=torch.float64)
        else:
            ref = torch.softmax(_hf(chains[i], x[i].double(), p + g, g)[0], -1)
        assert torch.allclose(batch.probs[i], ref, atol=TOL, rtol=0)
    assert {c.order for c in chains} == {"transformers", "vllm"} and any(c.frequency_penalty for c in chains)


# -- the OpenAI penalties and vLLM's order ------------------------------------------------------------------
def test_frequency_and_presence_penalties_against_the_api_rule():
    rng, gen = random.Random(3), torch.Generator().manual_seed(3)
    for _ in range(200):
        vocab = rng.choice([5, 60, 400])
        x = torch.randn(vocab, generator=gen, dtype=torch.float64) * 3
        prompt, generated = _random_path(rng, vocab)
        fp, pp, t = rng.choice([0.6, 0.0, -0.5, 2.0]), rng.choice([0.0, 0.4, -1.0]), rng.choice([0.8, 1.0, 0.3])
        chain = SamplerChain(temperature=t, frequency_penalty=fp, presence_penalty=pp)
        d = step_distribution(x, chain, TokenHistory.from_ids([prompt], [generated]))
        ref = _openai(x.tolist(), generated, fp, pp, t)
        assert torch.allclose(d.probs[0], torch.tensor(ref, dtype=torch.float64), atol=1e-12, rtol=0)


def test_openai_penalties_do_not_count_the_prompt():
    chain = SamplerChain(frequency_penalty=0.6, presence_penalty=0.4)
    x = torch.tensor([1.0, 1.0, 1.0])
    d = step_distribution(x, chain, TokenHistory.from_ids([[0, 0, 1, 1, 2]], [[]]))
    assert torch.allclose(d.probs[0], torch.full((3,), 1 / 3, dtype=torch.float64))


def test_vllm_order_against_a_plain_reference():
    rng, gen = random.Random(4), torch.Generator().manual_seed(4)
    for _ in range(200):
        vocab = rng.choice([3, 40, 300])
        chain = _random_chain(rng, vocab, order="vllm")
        x = torch.randn(vocab, generator=gen, dtype=torch.float64) * rng.choice([1.0, 4.0])
        prompt, generated = _random_path(rng, vocab)
        d = step_distribution(x, chain, TokenHistory.from_ids([prompt], [generated]))
        ref = torch.tensor(_vllm(chain, x.tolist(), prompt, generated), dtype=torch.float64)
        assert torch.allclose(d.probs[0], ref, atol=TOL, rtol=0)


def test_the_two_orders_differ_only_by_min_p_against_top_p():
    x = torch.tensor([0.6, 0.15, 0.15, 0.05, 0.05], dtype=torch.float64).log()
    hf = step_distribution(x, SamplerChain(top_p=0.8, min_p=0.2)).probs[0]
    vllm = step_distribution(x, SamplerChain(top_p=0.8, min_p=0.2, order="vllm")).probs[0]
    # transformers: top-p keeps 0.6, 0.15, 0.15 (mass before the third: 0.75 < 0.8), min-p (0.12) keeps them
    assert torch.allclose(hf, torch.tensor([0.6, 0.15, 0.15, 0, 0], dtype=torch.float64) / 0.9)
    # vLLM: min-p first drops the 0.05s; renormalised, 0.6 / 0.9 + 0.15 / 0.9 = 0.833 >= 0.8 before the third
    assert torch.allclose(vllm, torch.tensor([0.8, 0.2, 0, 0, 0], dtype=torch.float64))
    same = SamplerChain(0.7, top_p=0.9, top_k=5, repetition_penalty=1.2)
    y = torch.randn(2, 50, generator=torch.Generator().manual_seed(5))
    h = TokenHistory.from_ids([[1, 2, 3], [4]])
    vllm_same = SamplerChain(**{**same.to_dict(), "order": "vllm"})
    assert torch.equal(step_distribution(y, same, h).probs, step_distribution(y, vllm_same, h).probs)


# -- transformers' generate itself ---------------------------------------------------------------------------
@pytest.mark.parametrize("chain", [
    SamplerChain(0.8, top_k=50, repetition_penalty=1.2),  # the HBB open-weight wrappers
    SamplerChain(0.7, top_p=0.9),
    SamplerChain(0.5, top_k=5, top_p=0.8, min_p=0.1, repetition_penalty=1.3),
    SamplerChain(1.0, repetition_penalty=0.7),
])
def test_generate_scores_equal_the_chain_step_by_step(chain):
    """generate (left-padded batch, output_scores) with generate_kwargs: at every step the processed
    scores are the chain's distribution given the raw logits, the unpadded prompt and the tokens so far."""
    from tests.tiny import tiny_lm

    lm = tiny_lm()
    tok, model = lm.tokenizer, lm.model
    prompts = [tok("Person A has wrinkles. Answer:").input_ids, tok("The cat sat on the mat. The cat").input_ids,
               tok("Yes No Skip").input_ids]
    width, pad = max(map(len, prompts)), tok.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    torch.manual_seed(0)
    out = model.generate(ids, attention_mask=mask, max_new_tokens=6, output_scores=True, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=pad, eos_token_id=tok.eos_token_id,
                         **chain.generate_kwargs())
    checked = 0
    for step, (raw, scores) in enumerate(zip(out.logits, out.scores)):
        generated = out.sequences[:, width: width + step].tolist()
        live = [b for b in range(len(prompts)) if tok.eos_token_id not in generated[b]]
        history = TokenHistory.from_ids([prompts[b] for b in live], [generated[b] for b in live])
        d = step_distribution(raw[live], chain, history)
        ref = torch.softmax(scores[live].double(), -1)
        assert torch.allclose(d.probs, ref, atol=TOL, rtol=0)
        assert torch.equal(d.kept, scores[live] > -INF)
        checked += len(live)
    assert checked >= 12


def test_generate_kwargs_set_every_warper_and_refuse_what_generate_lacks():
    kw = SamplerChain(0.7, top_p=0.9).generate_kwargs()
    assert kw["top_k"] == 0 and kw["min_p"] == 0.0 and kw["repetition_penalty"] == 1.0 and kw["do_sample"]
    with pytest.raises(ValueError, match="frequency"):
        SamplerChain(0.8, frequency_penalty=0.6).generate_kwargs()
    with pytest.raises(ValueError, match="vLLM's order"):
        SamplerChain(top_p=0.9, min_p=0.1, order="vllm").generate_kwargs()


# -- the SamplingSpec it replaces ----------------------------------------------------------------------------
def test_sampling_spec_is_bit_identical_in_the_chain():
    gen = torch.Generator().manual_seed(6)
    specs = [SamplingSpec(0.7, 0.9), SamplingSpec(1.0), SamplingSpec(0.1), SamplingSpec(1.5, 0.95),
             SamplingSpec(0.3, 0.5), SamplingSpec(2.0, 0.999), SamplingSpec(0.8, 1.0)]
    for vocab, scale in ((5, 1.0), (400, 3.0), (3000, 1.0), (3000, 0.3)):  # long nuclei: past the top-256 prefix
        x = (torch.randn(16, vocab, generator=gen) * scale).float()
        x[0] = torch.round(x[0])  # ties
        x[1, : vocab // 2] = -INF
        for spec in specs:
            chain = SamplerChain.from_spec(spec)
            assert chain.to_spec() == spec
            assert torch.equal(step_distribution(x, chain).probs, sampling_distribution(x, spec))
    mixed = [SamplerChain.from_spec(specs[i % len(specs)]) for i in range(16)]
    got = step_distribution(x, mixed).probs
    for i in range(16):
        assert torch.equal(got[i], sampling_distribution(x[i], specs[i % len(specs)]))


def test_sampling_matches_the_generation_row_sampler():
    """One generator per row: the same picks as probe.scoring.generate's row sampler from the same seeds."""
    from probe.scoring.generate import _RowSampler

    gen = torch.Generator().manual_seed(7)
    spec = SamplingSpec(0.7, 0.9)
    seeds = [11, 12, 13, 14, 15]
    row_sampler = _RowSampler(spec, seeds)
    ours = [torch.Generator().manual_seed(s) for s in seeds]
    for _ in range(20):
        x = torch.randn(5, 300, generator=gen) * 2
        theirs = row_sampler(None, x).argmax(-1)
        assert torch.equal(sample(x, SamplerChain.from_spec(spec), ours), theirs)


def test_to_spec_refuses_a_chain_with_more():
    with pytest.raises(ValueError, match="top_k"):
        SamplerChain(0.8, top_k=50).to_spec()


# -- hand-computed cases -------------------------------------------------------------------------------------
def _probs(x, chain, prompt=(), generated=()) -> list[float]:
    h = TokenHistory.from_ids([list(prompt)], [list(generated)])
    return [round(v, 6) for v in step_distribution(torch.tensor([x], dtype=torch.float64), chain, h).probs[0].tolist()]


def test_repetition_penalty_by_hand():
    # seen {0, 1}: 2 -> 2 / 2 = 1, -1 -> -1 * 2 = -2; 0.5 unseen; a repeated id counts once
    z = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    assert _probs([2.0, -1.0, 0.5], SamplerChain(repetition_penalty=2.0), [0, 1, 1], [0]) == \
        [round(v, 6) for v in torch.softmax(z, -1).tolist()]
    # then the temperature: (1, -2, 0.5) / 0.5
    assert _probs([2.0, -1.0, 0.5], SamplerChain(0.5, repetition_penalty=2.0), [0], [1]) == \
        [round(v, 6) for v in torch.softmax(z / 0.5, -1).tolist()]
    # a penalty below 1 rewards; a zero logit stays 0; -inf stays -inf
    assert _probs([0.0, math.log(3), -INF], SamplerChain(repetition_penalty=0.5), [0, 2]) == [0.25, 0.75, 0.0]


def test_frequency_and_presence_by_hand():
    # generated 0, 0, 1: token 0 -> 1 - 2 * 0.5 - 0.25 = -0.25, token 1 -> 1 - 0.5 - 0.25 = 0.25, token 2 -> 1
    z = torch.tensor([-0.25, 0.25, 1.0], dtype=torch.float64)
    chain = SamplerChain(frequency_penalty=0.5, presence_penalty=0.25)
    assert _probs([1.0, 1.0, 1.0], chain, [2, 2], [0, 0, 1]) == [round(v, 6) for v in torch.softmax(z, -1).tolist()]
    counts = TokenHistory.from_counts([{2}], [{0: 2, 1: 1}])
    assert torch.equal(step_distribution(torch.ones(1, 3), chain, counts).probs,
                       step_distribution(torch.ones(1, 3), chain, TokenHistory.from_ids([[2, 2]], [[0, 0, 1]])).probs)


def test_top_k_by_hand():
    # ties with the k-th score are all kept; k past the vocabulary keeps everything
    assert _probs([1.0, 2.0, 2.0, 2.0, 0.0], SamplerChain(top_k=2)) == [0.0, 0.333333, 0.333333, 0.333333, 0.0]
    x = [0.0, math.log(3), -INF]
    assert _probs(x, SamplerChain(top_k=10)) == [0.25, 0.75, 0.0]
    assert _probs(x, SamplerChain(top_k=3)) == [0.25, 0.75, 0.0]
    assert _probs(x, SamplerChain(top_k=1)) == [0.0, 1.0, 0.0]


def test_top_p_ties_at_the_boundary_by_hand():
    # five equal tokens (0.2 each), top-p 0.5: the mass before the 3rd is 0.4 < 0.5, before the 4th 0.6:
    # three are kept, the lower ids first
    assert _probs([0.0] * 5, SamplerChain(top_p=0.5)) == [0.333333, 0.333333, 0.333333, 0.0, 0.0]
    # exactly on the boundary (0.25 each, all sums exact): the 3rd has 0.5 before it, not < 0.5: out, as in
    # transformers (its ascending sums 0.25, 0.5 <= 1 - 0.5 are removed)
    assert _probs([0.0] * 4, SamplerChain(top_p=0.5)) == [0.5, 0.5, 0.0, 0.0]
    hf = TopPLogitsWarper(0.5)(None, torch.zeros(1, 4, dtype=torch.float64))
    assert int((hf > -INF).sum()) == 2
    # a tie wholly inside the nucleus is kept whole
    assert _probs([math.log(6), 0.0, 0.0, -INF], SamplerChain(top_p=0.9)) == [0.75, 0.125, 0.125, 0.0]
    # the top token is always kept, however small top-p
    assert _probs([1.0, 0.0], SamplerChain(top_p=0.01)) == [1.0, 0.0]


def test_min_p_by_hand():
    x = [math.log(v) for v in (0.5, 0.3, 0.15, 0.05)]
    # threshold 0.2 * 0.5 = 0.1: the 0.05 goes
    assert _probs(x, SamplerChain(min_p=0.2)) == [round(v / 0.95, 6) for v in (0.5, 0.3, 0.15)] + [0.0]
    assert _probs(x, SamplerChain(min_p=0.0)) == [0.5, 0.3, 0.15, 0.05]
    # min-p 1 keeps the top token and only what ties with it
    assert _probs(x, SamplerChain(min_p=1.0)) == [1.0, 0.0, 0.0, 0.0]
    assert _probs([1.0, 1.0, 0.0], SamplerChain(min_p=1.0)) == [0.5, 0.5, 0.0]
    # after the temperature: at T = 0.5 the ratios square, 0.15 / 0.5 -> 0.09 < 0.2
    assert _probs(x, SamplerChain(0.5, min_p=0.2))[2:] == [0.0, 0.0]


def test_kept_set_and_its_mass():
    x = torch.tensor([[math.log(v) for v in (0.5, 0.3, 0.15, 0.05)]], dtype=torch.float64)
    d = step_distribution(x, SamplerChain(top_p=0.7))
    assert d.kept[0].tolist() == [True, True, False, False] and d.n_kept.tolist() == [2]
    assert d.kept_mass.tolist() == pytest.approx([0.8], abs=1e-12)
    assert d.children(0) == ([0, 1], pytest.approx([0.625, 0.375], abs=1e-12))
    assert step_distribution(x, SamplerChain()).kept_mass.tolist() == [1.0]
    # log-probabilities do not underflow where the probabilities do
    far = torch.tensor([[0.0, -100.0]])
    low = step_distribution(far, SamplerChain(0.1))
    assert low.probs[0, 1] == 0 and low.logprobs[0, 1].item() == pytest.approx(-1000.0)
    assert low.kept[0].tolist() == [True, True] and low.children(0) == ([0], [1.0])
    assert processed_logits(far, SamplerChain(0.1, top_k=1))[0, 1].item() == -INF


def test_sampling_draws_from_the_distribution_and_never_outside():
    probs = torch.tensor([[0.0, 0.25, 0.0, 0.75]], dtype=torch.float64).repeat(4000, 1)
    picks = sample_next(probs, torch.Generator().manual_seed(0))
    counts = Counter(picks.tolist())
    assert set(counts) == {1, 3}
    assert abs(counts[3] / 4000 - 0.75) < 4 * math.sqrt(0.75 * 0.25 / 4000)


def test_one_generator_per_row_is_independent_of_the_batch():
    x = torch.randn(6, 100, generator=torch.Generator().manual_seed(8)) * 2
    chain = SamplerChain(0.9, top_k=20)
    together = sample(x, chain, [torch.Generator().manual_seed(100 + i) for i in range(6)])
    alone = [sample(x[i:i + 1], chain, [torch.Generator().manual_seed(100 + i)]).item() for i in range(6)]
    assert together.tolist() == alone


def test_a_path_followed_step_by_step():
    # extend / select: the history of a sampled path is the one from_ids builds
    rng = random.Random(9)
    chain = SamplerChain(0.8, top_k=50, repetition_penalty=1.2, frequency_penalty=0.3)
    h = TokenHistory.from_ids([[1, 2, 3], [4, 5]])
    gen, paths = torch.Generator().manual_seed(9), [[], []]
    for _ in range(5):
        x = torch.randn(2, 60, generator=gen)
        t = sample(x, chain, gen, h)
        h = h.extend(t)
        for i in range(2):
            paths[i].append(int(t[i]))
        ref = TokenHistory.from_ids([[1, 2, 3], [4, 5]], paths)
        y = torch.randn(2, 60, generator=torch.Generator().manual_seed(rng.randrange(1000)))
        assert torch.equal(step_distribution(y, chain, h).probs, step_distribution(y, chain, ref).probs)
    branched = h.select([1, 1, 0])
    assert len(branched) == 3 and torch.equal(branched.seen[0], branched.seen[1])


# -- the spec -------------------------------------------------------------------------------------------------
def test_chain_is_frozen_hashable_and_serialisable():
    a = SamplerChain(0.8, top_k=50, repetition_penalty=1.2)
    b = SamplerChain.from_dict({"temperature": 0.8, "top_k": 50.0, "repetition_penalty": 1.2})
    assert a == b and hash(a) == hash(b) and isinstance(b.top_k, int)
    assert SamplerChain.from_dict(a.to_dict()) == a
    assert a.steps() == ("repetition_penalty", "temperature", "top_k")
    assert SamplerChain(top_k=5, top_p=0.9, min_p=0.1, order="vllm").steps() == ("min_p", "top_k", "top_p")
    assert a.describe() == "T = 0.8, top-k 50, repetition penalty 1.2"
    assert a.uses_history and a.uses_prompt and not SamplerChain(frequency_penalty=0.6).uses_prompt
    with pytest.raises(AttributeError):
        a.temperature = 1.0


@pytest.mark.parametrize("bad, message", [
    ({"temperature": 0}, "temperature must be > 0"),
    ({"top_p": 0}, r"top_p must be in \(0, 1\]"),
    ({"top_k": -1}, "top_k must be an integer >= 0"),
    ({"top_k": 2.5}, "top_k must be an integer"),
    ({"min_p": 1.5}, r"min_p must be in \[0, 1\]"),
    ({"repetition_penalty": 0}, "repetition_penalty must be > 0"),
    ({"frequency_penalty": math.nan}, "frequency_penalty must be a finite number"),
    ({"temperature": True}, "temperature must be a finite number"),
    ({"order": "hf"}, "order must be one of transformers, vllm"),
    ({"top_n": 3}, "unknown sampler setting 'top_n'"),
])
def test_bad_settings_say_which_field(bad, message):
    with pytest.raises(ValueError, match=message) as err:
        SamplerChain.from_dict(bad, where="config.yaml: sampler")
    assert str(err.value).startswith("config.yaml: sampler: ") and "\n" not in str(err.value)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="needs each path's TokenHistory"):
        step_distribution(torch.zeros(2, 5), SamplerChain(repetition_penalty=1.2))
    with pytest.raises(ValueError, match="row 1 has a NaN"):
        step_distribution(torch.tensor([[0.0, 1.0], [math.nan, 0.0]]), SamplerChain())
    with pytest.raises(ValueError, match="row 0 .* no finite one"):
        step_distribution(torch.tensor([[-INF, -INF]]), SamplerChain())
    with pytest.raises(ValueError, match="one per row"):
        step_distribution(torch.zeros(3, 5), [SamplerChain()] * 2)
    with pytest.raises(ValueError, match="2 generators for 3 rows"):
        sample_next(torch.full((3, 4), 0.25), [torch.Generator(), torch.Generator()])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_same_numbers_on_cuda():
    rng, gen = random.Random(10), torch.Generator().manual_seed(10)
    chains = [_random_chain(rng, 500) for _ in range(32)]
    x = torch.stack([_random_logits(rng, gen, 500) for _ in range(32)]).float()
    paths = [_random_path(rng, 500) for _ in range(32)]
    h = TokenHistory.from_ids([p for p, _ in paths], [g for _, g in paths])
    cpu = step_distribution(x, chains, h)
    cuda = step_distribution(x.cuda(), chains, h.to("cuda"))
    assert torch.allclose(cuda.probs.cpu(), cpu.probs, atol=1e-12, rtol=0)
    assert torch.equal(cuda.kept.cpu(), cpu.kept)


# -- the papers' presets --------------------------------------------------------------------------------------
def test_the_papers_presets_as_their_authors_ran_them():
    from probe.tasks.paper_samplers import PRESETS, preset

    assert preset("implicitbbq").chain == SamplerChain(0.1)
    assert preset("cmp_iso").chain == SamplerChain(0.7, top_p=0.9, order="vllm")
    assert preset("cmp_iso").max_new_tokens == 2000
    assert preset("hbb").chain == SamplerChain(0.8, top_k=50, repetition_penalty=1.2)
    assert preset("hbb-api").chain == SamplerChain(0.8, frequency_penalty=0.6)
    assert preset("hbb").max_new_tokens == preset("hbb-api").max_new_tokens == 2048
    for p in PRESETS.values():
        assert p.source and p.models and SamplerChain.from_dict(p.to_dict()["sampler"]) == p.chain
    # the open-weight HBB sampler is one transformers' generate can run; the API one is not
    assert preset("hbb").chain.generate_kwargs()["top_k"] == 50
    with pytest.raises(ValueError, match="frequency"):
        preset("hbb-api").chain.generate_kwargs()
    with pytest.raises(ValueError, match="unknown sampler preset 'hbb2'"):
        preset("hbb2")


def test_hbb_repetition_penalty_reaches_the_first_token_through_the_prompt():
    # the option letters are in the prompt: the first answer token is already penalised (logits > 0: / 1.2)
    prompt, a, b = [5, 1, 6, 2, 7], 1, 2
    x = torch.zeros(10, dtype=torch.float64)
    x[a], x[b], x[3] = 6.0, 5.0, 5.5
    hbb = step_distribution(x, SamplerChain(0.8, top_k=50, repetition_penalty=1.2), TokenHistory.from_ids([prompt]))
    plain = step_distribution(x, SamplerChain(0.8)).probs[0]
    assert plain.argmax() == a and hbb.probs[0].argmax() == 3
    z = torch.tensor([6.0 / 1.2, 5.0 / 1.2, 5.5]) / 0.8
    assert (hbb.probs[0, [a, b, 3]] / hbb.probs[0, 3]).tolist() == pytest.approx((z - z[2]).exp().tolist(), abs=1e-6)
