"""Sampling-equivalent scores (SamplingSpec): against an independent full-logits reference on a tiny
random model, hand-computed cases through the pure helpers, invariances, records, resume and the CLI."""

from __future__ import annotations

import json
import math

import pytest
import torch

from probe.scoring import ContinuationRequest, LabelRequest, LabelResult, SamplingSpec, Scorer
from probe.scoring.sampler.sampling import sampled_label, sampling_distribution, target_logprobs

TOL = 1e-5
SPECS = (SamplingSpec(0.7, 0.9), SamplingSpec(1.0), SamplingSpec(1.5, 0.95), SamplingSpec(0.3, 0.5),
         SamplingSpec(2.0, 0.999))
PROMPTS = ["Who has wrinkles? Answer:", "Question: Was the woman the secretary?\nAnswer:",
           "The grandfather and the grandson tried to book a cab. Answer:"]


@pytest.fixture(autouse=True, scope="module")
def _threads(one_torch_thread):
    yield


# -- the independent reference: one plain forward, full logits, nucleus walked token by token ------------
def _special(tok, text: str) -> bool:
    return not (tok.bos_token and text.startswith(tok.bos_token))


@torch.no_grad()
def _full_logits(lm, ids: list[int]) -> torch.Tensor:
    return lm.model(torch.tensor([ids])).logits[0].double()


def _ref_dist(logits: torch.Tensor, t: float, top_p: float) -> torch.Tensor:
    """softmax(logits / t), then the nucleus: walk the tokens by logit (desc; ties: lower id first,
    torch.sort stable) and stop at the first one where the kept mass reaches top_p."""
    p = torch.softmax(logits / t, dim=-1)
    if top_p >= 1:
        return p
    order = torch.sort(logits, descending=True, stable=True).indices.tolist()
    kept, total = [], 0.0
    for i in order:
        kept.append(i)
        total += p[i].item()
        if total >= top_p:
            break
    out = torch.zeros_like(p)
    out[kept] = p[kept]
    return out / out.sum()


def _ref_label(lm, prompt: str, labels: list[str], spec: SamplingSpec) -> tuple[list[float], float]:
    tok = lm.tokenizer
    sp = _special(tok, prompt)
    ids = tok(prompt, add_special_tokens=sp).input_ids
    dist = _ref_dist(_full_logits(lm, ids)[-1], spec.temperature, spec.top_p)
    per = [dist[tok(prompt + " " + lab, add_special_tokens=sp).input_ids[len(ids)]].item() for lab in labels]
    mass = sum(per)
    return ([x / mass for x in per] if mass > 0 else [math.nan] * len(per)), mass


def _ref_continuation(lm, prompt: str, option: str, spec: SamplingSpec) -> list[float]:
    tok = lm.tokenizer
    sp = _special(tok, prompt)
    ctx = tok(prompt, add_special_tokens=sp).input_ids
    whole = tok(prompt + " " + option, add_special_tokens=sp).input_ids
    logits = _full_logits(lm, whole)
    out = []
    for i in range(len(ctx), len(whole)):
        p = _ref_dist(logits[i - 1], spec.temperature, spec.top_p)[whole[i]].item()
        out.append(math.log(p) if p > 0 else -math.inf)
    return out


def _close(a: float, b: float, tol: float = TOL) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= tol


# -- items whose labels / options the model actually puts mass on (so the nucleus matters) -------------
def _top_labels(lm, prompt: str, k: int = 4) -> tuple[str, ...]:
    """The k most likely next tokens that are clean space-prefixed words (distinct first tokens),
    plus one unlikely one: labels that the nucleus keeps and ones it cuts."""
    tok = lm.tokenizer
    sp = _special(tok, prompt)
    ids = tok(prompt, add_special_tokens=sp).input_ids
    order = torch.argsort(_full_logits(lm, ids)[-1], descending=True).tolist()
    picked: list[str] = []
    for t in order:
        text = tok.decode([t])
        word = text[1:] if text.startswith(" ") else ""
        if word.strip() == word and word and tok(prompt + " " + word, add_special_tokens=sp).input_ids[len(ids)] == t:
            if word not in picked:
                picked.append(word)
        if len(picked) == k:
            break
    for t in reversed(order):  # the least likely clean word
        text = tok.decode([t])
        word = text[1:] if text.startswith(" ") else ""
        if word.strip() == word and word and word not in picked \
                and tok(prompt + " " + word, add_special_tokens=sp).input_ids[len(ids)] == t:
            picked.append(word)
            break
    return tuple(picked)


def _greedy_text(lm, prompt: str, n: int = 4) -> str:
    tok = lm.tokenizer
    ids = tok(prompt + " ", add_special_tokens=_special(tok, prompt)).input_ids
    new = []
    for _ in range(n):
        new.append(int(_full_logits(lm, ids + new)[-1].argmax()))
    return tok.decode(new).strip() or "Person A"


@pytest.fixture(scope="module")
def items(tiny_lm):
    labels = [LabelRequest(f"l{i}", p, _top_labels(tiny_lm, p)) for i, p in enumerate(PROMPTS)]
    conts = [ContinuationRequest(f"c{i}", p, (_greedy_text(tiny_lm, p), "Person A", "Not enough information"))
             for i, p in enumerate(PROMPTS)]
    return labels, conts


# -- against the reference ------------------------------------------------------------------------------
def test_label_probs_match_full_logits_reference(tiny_lm, items):
    labels, _ = items
    results = Scorer(tiny_lm, batch_size=4).score(labels, sampling=SPECS)
    worst, cut = 0.0, 0
    for req, res in zip(labels, results):
        assert [s.spec for s in res.sampling] == list(SPECS)
        for s in res.sampling:
            ref_probs, ref_mass = _ref_label(tiny_lm, req.prompt, list(req.labels), s.spec)
            assert _close(s.mass, ref_mass), (req.id, s.spec, s.mass, ref_mass)
            for got, ref in zip(s.probs, ref_probs):
                assert _close(got, ref), (req.id, s.spec, s.probs, ref_probs)
                if not math.isnan(ref):
                    worst = max(worst, abs(got - ref))
            cut += sum(p == 0 for p in s.probs)
    assert worst <= TOL
    assert cut > 0  # some labels fall outside a nucleus: the cut is exercised


def test_continuation_logprobs_match_full_logits_reference(tiny_lm, items):
    _, conts = items
    results = Scorer(tiny_lm, batch_size=4).score(conts, sampling=SPECS)
    finite = inf = 0
    for req, res in zip(conts, results):
        for s in res.sampling:
            for o, option in enumerate(req.options):
                ref = _ref_continuation(tiny_lm, req.prompt, option, s.spec)
                got = s.token_logprobs[o]
                assert len(got) == len(ref)
                assert all(_close(g, r) for g, r in zip(got, ref)), (req.id, s.spec, option, got, ref)
                assert _close(s.logprobs[o], math.fsum(ref))
                finite += sum(math.isfinite(x) for x in got)
                inf += sum(x == -math.inf for x in got)
    assert finite > 0 and inf > 0  # tokens inside and outside nuclei were both checked


# -- hand-computed cases through the pure helpers ----------------------------------------------------------
def _dist(logits, t, top_p=1.0):
    return sampling_distribution(torch.tensor(logits, dtype=torch.float64), SamplingSpec(t, top_p)).tolist()


def _lp(logits, targets, t, top_p=1.0):
    return target_logprobs(torch.tensor([logits], dtype=torch.float64), [targets], [SamplingSpec(t, top_p)])[0][0]


def test_two_token_vocabulary():
    two = [math.log(3.0), 0.0]  # softmax (0.75, 0.25)
    assert _dist(two, 1.0) == pytest.approx([0.75, 0.25])
    assert _dist(two, 0.5) == pytest.approx([0.9, 0.1])  # (3^2, 1) / 10
    assert _dist(two, 2.0) == pytest.approx([math.sqrt(3) / (math.sqrt(3) + 1), 1 / (math.sqrt(3) + 1)])
    assert _dist(two, 1.0, 0.7) == [1.0, 0.0]  # 0.75 reaches 0.7: the nucleus is the first token
    assert _dist(two, 1.0, 0.8) == pytest.approx([0.75, 0.25])  # it does not reach 0.8: both
    assert _dist(two, 0.5, 0.85) == [1.0, 0.0]  # 0.9 reaches 0.85 at T = 0.5
    lp = _lp(two, [0, 1], 1.0, 0.7)
    assert lp[0] == pytest.approx(0.0, abs=1e-12) and lp[1] == -math.inf
    assert _lp(two, [0, 1], 0.5) == pytest.approx([math.log(0.9), math.log(0.1)])
    # ties: lower token id first
    assert _dist([0.0, 0.0], 1.0, 0.5) == [1.0, 0.0]
    assert _dist([0.0, 0.0], 1.0, 0.6) == pytest.approx([0.5, 0.5])
    assert _lp([0.0, 0.0], [0, 1], 1.0, 0.5) == [0.0, -math.inf]


def test_temperature_to_zero_is_argmax_one_hot():
    logits = [1.0, 1.2, 0.3, -2.0]
    assert _dist(logits, 1e-3) == pytest.approx([0.0, 1.0, 0.0, 0.0], abs=1e-12)
    assert _dist(logits, 1e-3, 0.9) == [0.0, 1.0, 0.0, 0.0]
    lp = _lp(logits, [0, 1, 2], 1e-3)
    assert lp[1] == pytest.approx(0.0, abs=1e-12) and lp[0] < -100 and lp[2] < -100


def test_top_p_one_is_the_plain_tempered_softmax():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 50, generator=g, dtype=torch.float64) * 4
    for t in (0.3, 1.0, 2.5):
        want = torch.log_softmax(logits / t, dim=-1)
        got = target_logprobs(logits, [list(range(50))] * 3, [SamplingSpec(t, 1.0)])[0]
        assert torch.allclose(torch.tensor(got, dtype=torch.float64), want, atol=1e-12)
        assert torch.allclose(sampling_distribution(logits, SamplingSpec(t)), want.exp(), atol=1e-12)


@pytest.mark.parametrize("top", [2, 5, 256])
def test_helpers_agree_with_each_other(monkeypatch, top):
    """target_logprobs (edge by rank, top-k first then a full sort where unsure) equals the log of
    sampling_distribution (a full sort, the nucleus scattered back), ties at the top-k edge included."""
    from probe.scoring.sampler import sampling

    monkeypatch.setattr(sampling, "_TOP", top)
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(6, 60, generator=g) * 3).round()  # rounded: many ties
    logits[5] = 0.0  # all tied
    specs = (SamplingSpec(0.7, 0.9), SamplingSpec(1.3, 0.5), SamplingSpec(0.5, 0.99), SamplingSpec(0.2, 0.3))
    got_all = target_logprobs(logits, [list(range(60))] * 6, specs)
    for spec, got in zip(specs, got_all):
        dist = sampling_distribution(logits, spec)
        assert torch.allclose(torch.tensor(got, dtype=torch.float64).exp(), dist, atol=1e-12)


def test_top_p_cutting_a_label_gives_it_zero_and_lowers_the_mass(tiny_lm, items):
    req = items[0][0]  # labels: the 4 likeliest clean words, in rank order, then an unlikely one
    tok = tiny_lm.tokenizer
    ids = tok(req.prompt).input_ids
    p = torch.softmax(_full_logits(tiny_lm, ids)[-1], dim=-1)
    first = tok(req.prompt + " " + req.labels[0]).input_ids[len(ids)]
    before = p[p > p[first]].sum().item()
    top_p = before + p[first].item() / 2  # the nucleus ends at the first label's token
    [res] = Scorer(tiny_lm).score([req], sampling=(SamplingSpec(1.0, 1.0), SamplingSpec(1.0, top_p)))
    full, cut = res.sampling
    assert cut.probs[0] == 1.0 and all(x == 0.0 for x in cut.probs[1:])  # the later labels are cut
    assert full.probs[1] > 0
    assert cut.mass == pytest.approx(p[first].item() / (before + p[first].item()), abs=TOL)
    # the mass drops by what the cut labels would have carried under the same renormalisation
    kept_if_uncut = full.mass / (before + p[first].item())
    assert cut.mass < kept_if_uncut - 1e-3
    # through the pure helper: a label outside the nucleus adds nothing, renormalised over what is left
    s = sampled_label(SamplingSpec(1.0), {5: math.log(0.5), 6: -math.inf, 7: math.log(0.1)}, [(5,), (6,), (7,)], True)
    assert s.probs == pytest.approx((0.5 / 0.6, 0.0, 0.1 / 0.6)) and s.mass == pytest.approx(0.6)
    none = sampled_label(SamplingSpec(1.0), {5: -math.inf}, [(5,)], True)
    assert none.mass == 0 and math.isnan(none.probs[0])  # no label can be sampled


def test_t1_top_p1_equals_the_exact_scores(tiny_lm, items):
    labels, conts = items
    both = LabelRequest("both", PROMPTS[0], ("A", "B"), space="both")  # token variants summed like the exact path
    reqs = [*labels, both, *conts]
    for res in Scorer(tiny_lm).score(reqs, sampling=(SamplingSpec(1.0),)):
        [s] = res.sampling
        if isinstance(res, LabelResult):
            assert s.probs == pytest.approx(res.probs, abs=1e-6)
            assert s.mass == pytest.approx(res.label_mass, rel=1e-5)
        else:
            assert s.logprobs == pytest.approx(res.logprobs, abs=1e-4)


# -- invariances and the exact path -------------------------------------------------------------------------
def _numbers(results):
    out = []
    for r in results:
        for s in r.sampling:
            out += list(s.probs) + [s.mass] if hasattr(s, "mass") else [x for t in s.token_logprobs for x in t]
    return out


def test_batch_size_and_prefix_sharing_do_not_change_sampled_numbers(tiny_lm, items):
    reqs = [r for pair in zip(*items) for r in pair]
    base = _numbers(Scorer(tiny_lm, batch_size=1).score(reqs, sampling=SPECS))
    for scorer in (Scorer(tiny_lm, batch_size=16), Scorer(tiny_lm, batch_size=16, share_prefixes=False),
                   Scorer(tiny_lm, batch_size=3, min_shared=1)):
        other = _numbers(scorer.score(reqs, sampling=SPECS))
        assert len(other) == len(base)
        assert all(_close(a, b) for a, b in zip(base, other))


def test_without_specs_results_and_records_are_unchanged(tiny_lm, items):
    from probe.runs.record import Record

    reqs = [*items[0], *items[1]]
    plain = Scorer(tiny_lm).score(reqs)
    with_specs = Scorer(tiny_lm).score(reqs, sampling=SPECS)
    for a, b in zip(plain, with_specs):
        assert a.sampling == ()
        assert a.logprobs == b.logprobs  # the same forward pass: exact numbers are bit-identical
        d = Record.from_result("t", "m", a).to_dict()
        assert "sampling" not in d


def test_score_cache_is_bypassed_with_specs(tiny_lm, items, tmp_path):
    from probe.models.fingerprint import model_fingerprint
    from probe.scoring.cache import ENGINE_VERSION, ScoreCache

    reqs = list(items[0])
    with ScoreCache(tmp_path / "c.sqlite", model_fingerprint(tiny_lm, ENGINE_VERSION)) as cache:
        scorer = Scorer(tiny_lm, cache=cache)
        got = scorer.score(reqs, sampling=SPECS)
        assert cache.stats.writes == 0 and cache.stats.hits == 0
        scorer.score(reqs)  # exact only: cached
        assert cache.stats.writes > 0
        again = scorer.score(reqs, sampling=SPECS)  # still computed, not read
        assert cache.stats.hits == 0
    assert _numbers(got) == _numbers(again)


def test_spec_validation(tiny_lm):
    for bad in ((0.0, 1.0), (-1.0, 0.5), (1.0, 0.0), (1.0, 1.5), (math.nan, 1.0), (1.0, math.inf)):
        with pytest.raises(ValueError):
            SamplingSpec(*bad)
    assert SamplingSpec(1, 1) == SamplingSpec(1.0, 1.0)
    with pytest.raises(TypeError):
        Scorer(tiny_lm).score([], sampling=((0.7, 0.9),))  # type: ignore[arg-type]


# -- runner, records, resume, CLI ------------------------------------------------------------------------------
def test_runner_records_carry_sampling_and_resume_checks_it(tiny_lm, items, tmp_path):
    from probe.errors import ProbeError
    from probe.runs.runner import RunOptions, Runner

    reqs = [items[0][0], items[1][0]]
    out = tmp_path / "r.jsonl"
    opts = RunOptions(progress=False, sampling=[{"temperature": 0.7, "top_p": 0.9}, {"temperature": 2.0}])
    assert opts.sampling == (SamplingSpec(0.7, 0.9), SamplingSpec(2.0, 1.0))
    recs = Runner(tiny_lm, opts).score(reqs, out)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [list(s) for s in lines[0]["sampling"]] == [["mass", "probs", "temperature", "top_p"]] * 2
    assert [sorted(s) for s in lines[1]["sampling"]] == [["logprobs", "temperature", "top_p"]] * 2
    assert recs[0].sampling[0]["temperature"] == 0.7 and len(recs[0].sampling[0]["probs"]) == len(reqs[0].labels)
    assert all(isinstance(x, float) for x in recs[1].sampling[0]["logprobs"])  # null (-inf) read back as -inf
    assert Runner(tiny_lm, opts).score(reqs, out) == recs  # same specs: resumes
    with pytest.raises(ProbeError, match="sampling"):
        Runner(tiny_lm, RunOptions(progress=False)).score(reqs, out)
    with pytest.raises(ProbeError, match="sampling"):
        Runner(tiny_lm, RunOptions(progress=False, sampling=[{"temperature": 0.7}])).score(reqs, out)


def test_cli_temperature_and_top_p(tmp_path, model_dir):
    from probe.cli import main

    items = [{"id": "q1", "prompt": "Who has wrinkles?", "options": ["A", "B", "C"], "kind": "label"},
             {"id": "q2", "prompt": "Who has smooth skin?", "options": ["Person A", "Person B"], "kind": "continuation"}]
    inp = tmp_path / "items.jsonl"
    inp.write_text("".join(json.dumps(x) + "\n" for x in items))
    base = ["score", "--model", str(model_dir), "--input", str(inp), "--batch-size", "2"]
    assert main([*base, "--output", str(tmp_path / "a.jsonl"), "--temperature", "0.7", "1.0", "--top-p", "0.9"]) == 0
    a = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [(s["temperature"], s["top_p"]) for s in a[0]["sampling"]] == [(0.7, 0.9), (1.0, 0.9)]
    assert set(a[0]["sampling"][0]) == {"temperature", "top_p", "probs", "mass"}
    assert set(a[1]["sampling"][0]) == {"temperature", "top_p", "logprobs"}
    assert main([*base, "--output", str(tmp_path / "b.jsonl")]) == 0
    b = [json.loads(x) for x in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert all("sampling" not in r for r in b)
    assert [{k: v for k, v in r.items() if k != "sampling"} for r in a] == b  # exact fields unchanged
    assert main([*base, "--output", str(tmp_path / "c.jsonl"), "--top-p", "0.9"]) == 1  # top-p needs a temperature
    with pytest.raises(SystemExit):
        main([*base, "--output", str(tmp_path / "d.jsonl"), "--temperature", "0"])
@pytest.mark.parametrize("scale,ties", [(0.5, False), (5.0, False), (30.0, False), (10.0, True)])
def test_nucleus_from_candidates_is_the_full_ranking_bit_for_bit(monkeypatch, scale, ties):
    """One row's nucleus ranked from its top candidates equals the whole-vocabulary ranking exactly (ties
    at the candidates' edge included); where the candidates hold too little mass the full sort runs."""
    import probe.scoring.sampler.sampling as S

    used = []
    real = S._nucleus_from_candidates
    monkeypatch.setattr(S, "_nucleus_from_candidates", lambda *a: used.append(real(*a)) or used[-1])
    gen = torch.Generator().manual_seed(int(scale * 10) + ties)
    for _ in range(20):
        lg = torch.randn(4096, generator=gen) * scale
        if ties:
            lg = torch.round(lg * 2) / 2
        for t, p in [(0.7, 0.9), (1.0, 0.5), (0.1, 0.95), (1.0, 0.999)]:
            fast = S.sampling_distribution(lg.float(), SamplingSpec(t, p))
            monkeypatch.setattr(S, "NUCLEUS_CANDIDATES", 10**9)
            full = S.sampling_distribution(lg.float(), SamplingSpec(t, p))
            monkeypatch.setattr(S, "NUCLEUS_CANDIDATES", 1024)
            assert torch.equal(fast, full)
    assert any(x is not None for x in used)  # the candidates path ran
    if scale == 0.5:
        assert any(x is None for x in used)  # and a flat row fell back to the full sort
