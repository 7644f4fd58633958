"""parse_exact against an independent brute-force enumeration with plain full forwards (no cache, no batching)."""

from __future__ import annotations

import math

import pytest
import torch

from probe.scoring.parse.exact import ParseDistribution, ParseRequest, eos_ids, parse_exact, run_parse_requests

from probe.scoring.parse.schema import ParseSettings
from probe.scoring.sampler.sampling import SamplingSpec, sampling_distribution

PROMPTS = ["Who has item 3? Answer:", "<|im_start|>user\nWho was it?<|im_end|>\n<|im_start|>assistant\n",
           "The cat sat on the"]


def first_char(text: str):
    t = text.strip()
    return t[:1] if t else None


def brute_force(lm, prompt, spec, max_new, parser):
    """Every generation of up to ``max_new`` tokens with its probability, one plain forward per prefix."""
    tok = lm.tokenizer
    ids = tok(prompt, add_special_tokens=not prompt.startswith(tok.bos_token))["input_ids"]
    eos = eos_ids(lm)
    out: dict = {}
    frontier = [((), 1.0)]
    for depth in range(max_new):
        nxt = []
        for path, mass in frontier:
            with torch.no_grad():
                logits = lm.model(torch.tensor([list(ids) + list(path)])).logits[0, -1]
            dist = sampling_distribution(logits.float(), spec)
            for t in dist.nonzero()[:, 0].tolist():
                m = mass * float(dist[t])
                if t in eos or depth == max_new - 1:
                    text = tok.decode(list(path) + ([] if t in eos else [t]), skip_special_tokens=True)
                    a = parser(text)
                    out[a] = out.get(a, 0.0) + m
                else:
                    nxt.append((path + (t,), m))
        frontier = nxt
    return out


@pytest.fixture(scope="module")
def lm(tiny_lm):
    return tiny_lm


@pytest.mark.parametrize("spec,max_new", [(SamplingSpec(40.0, 0.05), 3), (SamplingSpec(1.0, 0.9), 4)])
def test_matches_brute_force(lm, spec, max_new):
    res = parse_exact(lm, PROMPTS, spec, first_char,
                      ParseSettings(max_new, residual=0.0, prune=0.0, batch_size=5, prompt_batch=2))
    for prompt, d in zip(PROMPTS, res):
        ref = brute_force(lm, prompt, spec, max_new, first_char)
        assert d.residual == pytest.approx(0.0, abs=1e-9)
        assert abs(d.total() - 1.0) < 1e-6
        assert d.rejected == pytest.approx(ref.get(None, 0.0), abs=1e-6)
        for a in set(ref) | set(d.probs):
            if a is not None:
                assert d.probs.get(a, 0.0) == pytest.approx(ref.get(a, 0.0), abs=1e-6), (prompt, a)


def test_bound_holds_with_residual(lm):
    """Pruned and stopped early: every answer's true probability lies in [p, p + residual]."""
    spec = SamplingSpec(40.0, 0.05)
    exact = parse_exact(lm, PROMPTS, spec, first_char, ParseSettings(3, residual=0.0, prune=0.0))
    rough = parse_exact(lm, PROMPTS, spec, first_char, ParseSettings(3, residual=0.2, prune=1e-3))
    for e, r in zip(exact, rough):
        assert abs(r.total() - 1.0) < 1e-6
        assert r.nodes <= e.nodes
        for a, p in e.probs.items():
            lo, hi = r.bounds(a)
            assert lo - 1e-9 <= p <= hi + 1e-9
        assert r.rejected <= e.rejected + 1e-9


def test_max_nodes_caps_work_and_reports_residual(lm):
    spec = SamplingSpec(40.0, 0.1)
    d = parse_exact(lm, PROMPTS[:1], spec, first_char, ParseSettings(4, residual=0.0, max_nodes=7, batch_size=3))[0]
    assert d.nodes <= 7
    assert d.residual > 0
    assert abs(d.total() - 1.0) < 1e-6


def test_batch_and_group_invariance(lm):
    spec = SamplingSpec(40.0, 0.05)
    a = parse_exact(lm, PROMPTS, spec, first_char,
                    ParseSettings(3, residual=0.0, prune=0.0, batch_size=1, prompt_batch=1))
    b = parse_exact(lm, PROMPTS, spec, first_char,
                    ParseSettings(3, residual=0.0, prune=0.0, batch_size=64, prompt_batch=3))
    for x, y in zip(a, b):
        assert set(x.probs) == set(y.probs)
        for k in x.probs:
            assert x.probs[k] == pytest.approx(y.probs[k], abs=1e-6)


def test_decided_closes_branches_without_changing_the_answer(lm):
    spec = SamplingSpec(40.0, 0.05)
    full = parse_exact(lm, PROMPTS, spec, first_char, ParseSettings(3, residual=0.0, prune=0.0))
    early = parse_exact(lm, PROMPTS, spec, first_char,
                        ParseSettings(3, residual=0.0, prune=0.0), decided=lambda t: bool(t.strip()))
    for f, e in zip(full, early):
        assert e.nodes <= f.nodes
        for k in f.probs:
            assert e.probs.get(k, 0.0) == pytest.approx(f.probs[k], abs=1e-6)


def test_token_id_prompts_and_per_prompt_parsers(lm):
    tok = lm.tokenizer
    ids = tok(PROMPTS[0])["input_ids"]
    spec = SamplingSpec(1.0)
    by_text = parse_exact(lm, [PROMPTS[0]], spec, first_char, ParseSettings(2, residual=0.0, prune=0.0))[0]
    by_ids = parse_exact(lm, [ids, ids], spec, [first_char, lambda t: None], ParseSettings(2, residual=0.0, prune=0.0))
    assert by_ids[0].probs == pytest.approx(by_text.probs, abs=1e-6)
    assert by_ids[1].probs == {} and by_ids[1].rejected == pytest.approx(1.0)


def test_bad_arguments(lm):
    with pytest.raises(TypeError):
        parse_exact(lm, PROMPTS, {"temperature": 1.0}, first_char, ParseSettings(2))
    with pytest.raises(ValueError, match="max_new_tokens"):
        parse_exact(lm, PROMPTS, SamplingSpec(1.0), first_char, ParseSettings(0))
    with pytest.raises(ValueError, match="parsers for"):
        parse_exact(lm, PROMPTS, SamplingSpec(1.0), [first_char], ParseSettings(2))
    with pytest.raises(ValueError, match="residual"):
        parse_exact(lm, PROMPTS, SamplingSpec(1.0), first_char, ParseSettings(2, residual=1.0))


def test_top_generations_are_sorted_and_counted(lm):
    d = parse_exact(lm, PROMPTS[:1], SamplingSpec(40.0, 0.05), first_char,
                    ParseSettings(3, residual=0.0, prune=0.0, top=4))[0]
    masses = [m for _, m, _ in d.top]
    assert len(d.top) == 4 and masses == sorted(masses, reverse=True)
    js = d.to_dict(top=2)
    assert len(js["top"]) == 2 and set(js) >= {"probs", "rejected", "residual", "nodes", "top"}


def test_requests_group_by_setting(lm):
    reqs = [ParseRequest(f"r{i}", p, 2, t, 1.0, "first-char", first_char) for i, (p, t) in
            enumerate([(PROMPTS[0], 1.0), (PROMPTS[1], 2.0), (PROMPTS[2], 1.0)])]
    out = run_parse_requests(lm, reqs)
    alone = parse_exact(lm, [PROMPTS[1]], SamplingSpec(2.0), first_char, ParseSettings(2))[0]
    assert out[1].probs == pytest.approx(alone.probs, abs=1e-6)
    assert all(isinstance(d, ParseDistribution) for d in out)


def test_request_digest_ignores_the_callable_but_not_its_name():
    from probe.runs.resume import request_digest

    a = ParseRequest("x", "p", 2, 1.0, 1.0, "rule/1", first_char)
    b = ParseRequest("x", "p", 2, 1.0, 1.0, "rule/1", lambda t: None)
    c = ParseRequest("x", "p", 2, 1.0, 1.0, "rule/2", first_char)
    assert request_digest(a) == request_digest(b) != request_digest(c)


def test_distribution_helpers():
    d = ParseDistribution({"A": 0.5, "B": 0.25}, rejected=0.15, residual=0.1, nodes=3)
    assert d.bounds("A") == (0.5, 0.6) and d.bounds("C") == (0.0, 0.1)
    assert d.normalized(["A", "B"]) == pytest.approx([2 / 3, 1 / 3])
    assert ParseDistribution({}, 0.9, 0.1, 1).normalized(["A"]) is None
    assert math.isclose(d.total(), 1.0)


def rare_answer(text: str):
    """Accepts only generations starting with the least common first characters: a prompt whose parsed mass
    is small, where an absolute residual says little about the answer's conditional distribution."""
    t = text.strip()
    return t[:1] if t[:1] and t[:1] in "xyzqjkXYZQJK0123456789" else None


def test_answer_residual_certifies_the_distribution_given_a_parse(lm):
    spec = SamplingSpec(40.0, 0.05)
    exact = parse_exact(lm, PROMPTS, spec, rare_answer, ParseSettings(3, residual=0.0, prune=0.0))
    loose = parse_exact(lm, PROMPTS, spec, rare_answer, ParseSettings(3, residual=0.05, prune=0.0))
    tight = parse_exact(lm, PROMPTS, spec, rare_answer, ParseSettings(3, residual=0.05, answer_residual=0.5, prune=0.0))
    targets = []
    for e, lo, ti in zip(exact, loose, tight):
        accepted = sum(ti.probs.values())
        # the target: at most half the parsed mass, never below the floor 0.05 x 0.5 = 0.025
        targets.append(max(0.025, min(0.05, 0.5 * accepted)))
        assert ti.residual <= targets[-1] + 1e-9
        assert ti.nodes >= lo.nodes and abs(ti.total() - 1.0) < 1e-6
        for a, p in e.probs.items():  # still a certified bound on every answer
            low, high = ti.bounds(a)
            assert low - 1e-9 <= p <= high + 1e-9
    assert sum(t.nodes for t in tight) > sum(x.nodes for x in loose)  # the test's prompts needed the extra work
    assert 0.025 < max(targets) < 0.05  # a prompt whose target is relative (neither the floor nor residual)
    with pytest.raises(ValueError, match="answer_residual"):
        parse_exact(lm, PROMPTS, spec, first_char, ParseSettings(2, answer_residual=0.0))


def test_answer_residual_is_part_of_the_digest_only_when_set():
    from probe.runs.resume import request_digest

    a = ParseRequest("x", "p", 2, 1.0, 1.0, "rule/1", first_char)
    b = ParseRequest("x", "p", 2, 1.0, 1.0, "rule/1", first_char, answer_residual=None)
    c = ParseRequest("x", "p", 2, 1.0, 1.0, "rule/1", first_char, answer_residual=0.05)
    assert request_digest(a) == request_digest(b) != request_digest(c)
    assert a.spec_key != c.spec_key
