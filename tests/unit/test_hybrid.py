"""The hybrid estimator (probe.scoring.parse.hybrid): exact head + sampled tail, on a toy tree with a known answer."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from probe.scoring.parse.hybrid import draw_tail, hybrid_from_tail, tail_budget, wilson
from probe.scoring.sampler.chain import SamplerChain

# a toy generation tree: leaf path -> (probability, answer); the "head" is the first three leaves
LEAVES = {"aa": (0.30, "A"), "ab": (0.10, "B"), "b": (0.20, None), "ca": (0.15, "A"), "cb": (0.05, "B"),
          "cc": (0.02, "A"), "d": (0.18, "B")}
HEAD = ("aa", "ab", "b")


def _head():
    probs: dict = {}
    for leaf in HEAD:
        p, a = LEAVES[leaf]
        if a is not None:
            probs[a] = probs.get(a, 0.0) + p
    residual = 1 - sum(LEAVES[x][0] for x in HEAD)
    # the frontier: the open subtrees "c" and "d", by mass; completing one samples a leaf under it
    frontier = [(sum(p for k, (p, _) in LEAVES.items() if k.startswith(root)), root) for root in ("c", "d")]
    return probs, residual, frontier


def _complete(root, rng):
    leaves = [(k, p, a) for k, (p, a) in LEAVES.items() if k.startswith(root)]
    w = np.array([p for _, p, _ in leaves])
    return leaves[int(rng.choice(len(leaves), p=w / w.sum()))][2]


def test_frontier_partitions_the_tail():
    _, residual, frontier = _head()
    assert sum(m for m, _ in frontier) == pytest.approx(residual)


def test_unbiased_and_covered_on_a_toy_tree():
    probs, residual, frontier = _head()
    exact = {a: sum(p for p, b in LEAVES.values() if b == a) for a in ("A", "B")}
    rng = np.random.default_rng(0)
    estimates, covered = {"A": [], "B": []}, {"A": 0, "B": 0}
    reps = 2000
    for _ in range(reps):
        est = hybrid_from_tail(probs, residual, draw_tail(frontier, _complete, 8, rng))
        for a in ("A", "B"):
            estimates[a].append(est.estimate(a))
            lo, hi = est.ci(a)
            covered[a] += lo <= exact[a] <= hi
            assert probs.get(a, 0) <= lo <= hi <= probs.get(a, 0) + residual + 1e-12  # inside the certified bounds
    for a in ("A", "B"):
        se = np.std(estimates[a]) / math.sqrt(reps)
        assert abs(np.mean(estimates[a]) - exact[a]) < 4 * se  # unbiased
        assert covered[a] / reps >= 0.9  # the Wilson CI covers (nominal 95 %)


def test_ci_shrinks_with_the_residual():
    wide = hybrid_from_tail({"A": 0.1}, 0.8, ["A", None] * 10)
    narrow = hybrid_from_tail({"A": 0.8}, 0.1, ["A", None] * 10)
    w = lambda e: e.ci("A")[1] - e.ci("A")[0]  # noqa: E731
    assert w(narrow) == pytest.approx(w(wide) / 8)


def test_no_draws_gives_the_certified_interval_and_the_budget_rule():
    est = hybrid_from_tail({"A": 0.6}, 0.05, [])
    assert est.estimate("A") == 0.6 and est.ci("A") == (0.6, 0.65)
    assert tail_budget(residual=0.005, target=0.01, k=20) == 0  # T = 0.1: exact
    assert tail_budget(residual=0.5, target=0.01, k=25) == 13  # ceil(K r): grows with the residual
    assert tail_budget(residual=1.0, target=0.01, k=25) == 25  # nothing enumerated: the paper's K
    assert wilson(0, 0) == (0.0, 1.0)
    assert est.to_dict()["ci"]["A"] == [0.6, 0.65]


def test_parse_exact_frontier_is_the_residual_and_the_lm_tail_completes(tiny_lm):
    from tests.reference import LMCompleter
    from probe.scoring.parse.exact import _encode, eos_ids, parse_exact
    from probe.scoring.parse.schema import ParseSettings
    from probe.scoring.sampler.chain import SamplerChain
    from probe.scoring.sampler.sampling import SamplingSpec

    spec = SamplingSpec(1.0, 1.0)
    parser = lambda t: (t.strip()[:1] or None)  # noqa: E731
    d = parse_exact(tiny_lm, ["Hello there"], spec, parser,
                    ParseSettings(3, residual=0.0, max_nodes=4, prune=1e-4, frontier=True))[0]
    assert d.residual > 0 and d.frontier
    assert math.fsum(m for m, _ in d.frontier) == pytest.approx(d.residual, abs=1e-9)
    done = LMCompleter(tiny_lm, _encode(tiny_lm.tokenizer, "Hello there"), SamplerChain.from_spec(spec), 3, parser,
                       eos_ids(tiny_lm), seed=1)
    tail = draw_tail(d.frontier, done, 6, np.random.default_rng(0))
    est = hybrid_from_tail(d.probs, d.residual, tail)
    assert est.n_tail == 6
    for a in est.tail:
        if a is not None:
            lo, hi = d.bounds(a)
            assert lo - 1e-12 <= est.estimate(a) <= hi + 1e-12


# -- the hybrid wired into the parse stage ------------------------------------------------------------------
def _first(text):
    return text.strip()[:1] or None


def test_cached_completer_samples_the_tail_without_bias(tiny_lm, one_torch_thread):
    """Head + sampled tail, on the tiny model with the whole sampler (top-k, repetition penalty): over many
    draws the estimate reaches the fully enumerated answer (within 4 standard errors), and every draw is a
    completion the tree holds (the estimate stays inside the certified interval)."""
    from probe.scoring.parse.tail import CachedCompleter
    from probe.scoring.parse.exact import _encode, eos_ids, parse_exact
    from probe.scoring.parse.schema import ParseSettings

    chain = SamplerChain(temperature=1.5, top_k=6, repetition_penalty=1.3)
    prompt = "Who has item 3? Answer:"
    full = parse_exact(tiny_lm, [prompt], chain, _first, ParseSettings(3, residual=0.0, prune=0.0))[0]
    head = parse_exact(tiny_lm, [prompt], chain, _first,
                       ParseSettings(3, residual=0.0, max_nodes=3, prune=1e-3, frontier=True))[0]
    assert head.residual > 0.3  # a tail worth estimating
    ids = _encode(tiny_lm.tokenizer, prompt)
    done = CachedCompleter(tiny_lm, ids, chain, 3, _first, None, eos_ids(tiny_lm), seed=3,
                           prompt_cache=head.prompt_cache)  # the enumeration's prompt vectors, not run again
    own = CachedCompleter(tiny_lm, ids, chain, 3, _first, None, eos_ids(tiny_lm), seed=3)  # runs the prompt
    assert own.tokens == len(ids) and done.tokens == 0
    picks = [x[1] for x in head.frontier[:20]]
    assert [own(h) for h in picks] == [done(h) for h in picks]  # the same draws either way
    one = CachedCompleter(tiny_lm, ids, chain, 3, _first, None, eos_ids(tiny_lm), seed=3,
                          prompt_cache=head.prompt_cache)
    batched = CachedCompleter(tiny_lm, ids, chain, 3, _first, None, eos_ids(tiny_lm), seed=3,
                              prompt_cache=head.prompt_cache, batch_size=7)
    # draws advancing together, 7 a pass: each has its own stream, so the same answers as one at a time
    assert batched.complete(picks) == [one(h) for h in picks]
    # draws that share a frontier path run it once over the store
    assert 0 < batched.tokens <= one.tokens
    done = CachedCompleter(tiny_lm, ids, chain, 3, _first, None, eos_ids(tiny_lm), seed=3,
                           prompt_cache=head.prompt_cache)
    m = 1500
    est = hybrid_from_tail(head.probs, head.residual, draw_tail(head.frontier, done, m, np.random.default_rng(1)))
    for a, p in full.probs.items():
        share = (p - head.probs.get(a, 0.0)) / head.residual
        se = head.residual * math.sqrt(max(share * (1 - share), 1e-4) / m)
        assert abs(est.estimate(a) - p) < 4 * se, a
        lo, hi = head.bounds(a)
        assert lo - 1e-12 <= est.estimate(a) <= hi + 1e-12


def _requests(seed=0, samples=20, max_nodes=4, tail_max=None):
    from probe.scoring.parse.schema import ParseRequest, TailSpec

    chain = SamplerChain(temperature=1.2, top_k=8, repetition_penalty=1.2)
    prompts = ["Who has item 3? Answer:", "The cat sat on the", "Hello there"]
    return [ParseRequest(f"r{i}", p, 3, 1.2, 1.0, "first", _first, residual=0.01, max_nodes=max_nodes,
                         sampler=chain, tail=TailSpec(samples, tail_max, seed)) for i, p in enumerate(prompts)]


def test_hybrid_requests_are_seeded_within_budget_and_exact_when_closed(tiny_lm, one_torch_thread):
    from probe.scoring.parse.exact import run_parse_requests

    a = run_parse_requests(tiny_lm, _requests())
    b = run_parse_requests(tiny_lm, _requests()[::-1])[::-1]  # another order and batch: the same draws
    c = run_parse_requests(tiny_lm, _requests(seed=1))
    assert [x.to_dict() for x in a] == [x.to_dict() for x in b]
    assert [x.hybrid["tail"] for x in a] != [x.hybrid["tail"] for x in c]
    for d in a:
        h = d.hybrid
        assert h["n_tail"] == tail_budget(d.residual, 0.01, 20) > 0
        assert h["tokens"] <= h["n_tail"] * 3 <= 20 * 3  # never more generations than the paper's K
        assert sum(h["estimate"].values()) + h["rejected"] == pytest.approx(1.0, abs=1e-9)
        for ans, (lo, hi) in h["ci"].items():
            blo, bhi = d.bounds(ans)
            assert blo - 1e-12 <= lo <= h["estimate"][ans] <= hi <= bhi + 1e-12
    closed = run_parse_requests(tiny_lm, _requests(max_nodes=None))  # the tree closes: purely exact
    assert all(d.residual <= 0.01 and d.hybrid["n_tail"] == 0 and d.hybrid["tokens"] == 0 for d in closed)


def test_a_longer_tail_budget_leaves_the_cut_branches_open(tiny_lm, one_torch_thread):
    """The tail's own budget (HBB: the authors' 2048 tokens): branches the enumeration cut at its budget are not
    parsed there but stay in the residual, and the tail samples them on to the longer budget."""
    from probe.scoring.parse.exact import run_parse_requests

    short = run_parse_requests(tiny_lm, _requests(max_nodes=None))
    long = run_parse_requests(tiny_lm, _requests(max_nodes=None, tail_max=6))
    for s, d in zip(short, long):
        assert d.residual > s.residual + 0.1  # the cut branches are open, not parsed
        assert abs(d.total() - 1.0) < 1e-6 and d.hybrid["n_tail"] > 0 and d.hybrid["max_new_tokens"] == 6


def test_tail_draws_over_the_store_are_the_per_row_caches_draws(tiny_lm, one_torch_thread, monkeypatch):
    """The tail's draws over one key/value store (``Engine.tree_store_of``) are the draws of a cache per row: the
    same texts token for token (the logits agree to float rounding), from shared and unshared frontier paths,
    to a longer budget; shared path prefixes run once, so fewer forward tokens; a sliding window shorter than
    the draws keeps the per-row caches."""
    from probe.scoring.engine import Engine
    from probe.scoring.parse.tail import CachedCompleter
    from probe.scoring.parse.exact import _encode, eos_ids, parse_exact, run_parse_requests
    from probe.scoring.parse.schema import ParseSettings

    chain = SamplerChain(temperature=1.5, top_k=6, repetition_penalty=1.3)
    prompt = "Who has item 3? Answer:"
    head = parse_exact(tiny_lm, [prompt], chain, _first,
                       ParseSettings(3, residual=0.0, max_nodes=3, prune=1e-3, frontier=True))[0]
    ids = _encode(tiny_lm.tokenizer, prompt)
    picks = [x[1] for x in head.frontier[:12]] * 2  # repeated paths: shared prefixes

    def texts(batch):
        c = CachedCompleter(tiny_lm, ids, chain, 7, lambda t: t, None, eos_ids(tiny_lm), seed=5,
                            prompt_cache=head.prompt_cache, batch_size=batch)
        return c.complete(picks), c.tokens

    store_texts, store_tokens = texts(24)
    with monkeypatch.context() as m:
        m.setattr(Engine, "tree_store_of", lambda self, blocks, longest: None)
        row_texts, row_tokens = texts(24)
    assert store_texts == row_texts and len(set(store_texts)) > 3
    assert store_tokens < row_tokens
    assert texts(5)[0] == store_texts  # other chunks: the same draws
    # whole requests (several prompts in one store), against the per-row caches
    a = run_parse_requests(tiny_lm, _requests(tail_max=6))
    with monkeypatch.context() as m:
        m.setattr(Engine, "tree_store_of", lambda self, blocks, longest: None)
        b = run_parse_requests(tiny_lm, _requests(tail_max=6))
    assert [x.hybrid["tail"] for x in a] == [x.hybrid["tail"] for x in b]
    assert all(x.hybrid["tokens"] <= y.hybrid["tokens"] for x, y in zip(a, b))
    engine = Engine(tiny_lm.model, pad_id=0)
    block = head.prompt_cache[0]
    assert engine.tree_store_of([block], 10) is not None
    engine.window = 8  # a sliding window shorter than prompt + tail: not modelled by the store
    assert engine.tree_store_of([block], 10) is None and engine.tree_store_of([block], 8) is not None


def test_a_tail_batch_out_of_memory_runs_again_in_halves_with_the_same_draws(tiny_lm, one_torch_thread,
                                                                              monkeypatch):
    """A batch of tail draws that runs out of device memory (here: after it has advanced, so the draws' streams
    moved) runs again in halves, each draw from its stream's start: the same answers as batches that fit (the
    forward tokens differ: smaller batches share fewer path prefixes); an error that is not an allocation
    failure is not retried."""
    import torch

    import probe.scoring.parse.tail as hybrid
    from probe.scoring.parse.exact import run_parse_requests

    def answers(dists):
        return [{k: v for k, v in x.to_dict()["hybrid"].items() if k != "tokens"} for x in dists]

    want = answers(run_parse_requests(tiny_lm, _requests(tail_max=6)))
    real = hybrid._complete_batch
    sizes: list[int] = []

    def small_memory(engine, rows, *a):
        sizes.append(len(rows))
        out = real(engine, rows, *a)
        if len(rows) > 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return out

    monkeypatch.setattr(hybrid, "_complete_batch", small_memory)
    with pytest.warns(RuntimeWarning, match=r"out of memory with \d+ tail draws in one batch; continuing"):
        got = answers(run_parse_requests(tiny_lm, _requests(tail_max=6)))
    # halved from the batch that failed (57 rows, 28, 14, 7, 3), then batches of 3 to the end
    assert got == want and sizes[:5] == [sizes[0], sizes[0] // 2, sizes[0] // 4, sizes[0] // 8, 3]
    assert sizes[0] > 3 and set(sizes[5:]) <= {1, 2, 3}

    def broken(engine, rows, *a):
        raise RuntimeError("CUDA error: device-side assert triggered")

    monkeypatch.setattr(hybrid, "_complete_batch", broken)
    with pytest.raises(RuntimeError, match="device-side"):
        run_parse_requests(tiny_lm, _requests(tail_max=6))


def test_tail_batches_grow_to_a_gpus_free_memory():
    """On a CPU the tail's batch holds TAIL_BATCH_TOKENS positions; planned for a GPU's free memory it holds what
    HEADROOM of it takes, per position the keys and values of every layer plus one layer's head-expanded copy
    (never less than the CPU's)."""
    from types import SimpleNamespace

    import torch

    from probe.scoring.parse.hybrid import TAIL_BATCH_TOKENS, tail_tokens
    from probe.scoring.engine.memory import HEADROOM

    cfg = SimpleNamespace(hidden_size=576, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                          intermediate_size=1536, num_hidden_layers=30, vocab_size=49152,
                          _attn_implementation="sdpa")
    model = SimpleNamespace(config=cfg, parameters=lambda: iter([torch.zeros(1, dtype=torch.bfloat16)]))
    assert tail_tokens(model) == TAIL_BATCH_TOKENS
    per = 2 * 30 * 3 * 64 * 2 + 2 * 2 * 9 * 64 * 2  # keys and values of 30 layers + one layer's expanded copy
    free = 100 * 2**30
    assert tail_tokens(model, free=free) == int(HEADROOM * free - 3 * 256 * 49152 * 4) // per  # ~3.9M positions
    assert tail_tokens(model, free=2**20) == TAIL_BATCH_TOKENS


def test_hybrid_records_resume_byte_identically(tiny_lm, tmp_path, one_torch_thread):
    from probe.runs.runner import Runner

    out, whole = tmp_path / "parsed.jsonl", tmp_path / "whole.jsonl"
    Runner(tiny_lm).parse(_requests()[:2], out, progress=False)
    Runner(tiny_lm).parse(_requests(), out, progress=False)  # resumes: only the third is new
    Runner(tiny_lm).parse(_requests(), whole, progress=False)
    assert out.read_bytes() == whole.read_bytes()
    assert all("hybrid" in json.loads(x) for x in out.read_text().splitlines())


# -- the published estimator: exact head + each prompt's own tail (probe.metrics.hybrid) ----------------------
def _rec(a, residual, tail):
    return {"probs": {"A": a}, "rejected": 1 - a - residual, "residual": residual,
            "hybrid": {"n_tail": sum(tail.values()), "tail": tail}}


def _empty(residual=0.99, n=2, hit=0):
    tail = {"none": n - hit, **({"0": hit} if hit else {})}
    return {"probs": {}, "rejected": 1 - residual, "residual": residual, "hybrid": {"n_tail": n, "tail": tail}}


def test_hybrid_metric_by_hand():
    from probe.metrics.hybrid import Z95, hybrid_metric, hybrid_probs

    closed = {"probs": {"A": 0.3}, "rejected": 0.695, "residual": 0.005, "hybrid": {"n_tail": 0, "tail": {}}}
    recs = [_rec(0.5, 0.4, {"A": 1, "none": 3}), _rec(0.2, 0.2, {"A": 2, "B": 2}), closed]
    assert hybrid_probs(recs[0]) == pytest.approx({"A": 0.6})
    assert hybrid_probs(recs[1]) == pytest.approx({"A": 0.3, "B": 0.1})
    assert hybrid_probs(closed) == {"A": 0.3}  # closed: its exact head, the residual below the target

    def mean_a(probs_of):
        return {"mean A": sum(probs_of(d).get("A", 0.0) for d in recs) / 3}

    out = hybrid_metric(mean_a, n_boot=2000, seed=4)
    point, (lo, hi) = out["mean A"]
    assert point == pytest.approx((0.6 + 0.3 + 0.3) / 3)
    assert (lo + hi) / 2 == pytest.approx(point)  # centred on the point by construction, never stretched
    # by hand: each record's A share from its own draws, Jeffreys' Beta(hit + 1/2, none + 1/2) (the first reads
    # only A) times the split Dirichlet(A + 1/2, B + 1/2) (the second); variance x residual^2 / 9, summed; a
    # closed record adds nothing
    rng = np.random.default_rng(0)
    v0 = np.var(rng.beta(1.5, 3.5, 200_000)) * 0.4 ** 2
    v1 = np.var(rng.beta(4.5, 0.5, 200_000) * rng.beta(2.5, 2.5, 200_000)) * 0.2 ** 2
    assert (hi - lo) / 2 == pytest.approx(Z95 * math.sqrt((v0 + v1) / 9), rel=0.08)
    assert hybrid_metric(mean_a, n_boot=2000, seed=4) == out  # seeded


def test_a_closed_head_is_exact_with_width_zero():
    from probe.metrics.hybrid import closed, hybrid_metric

    d = {"probs": {"A": 0.7, "B": 0.295}, "rejected": 0.0, "residual": 0.005, "hybrid": {"n_tail": 0, "tail": {}}}
    assert closed(d)
    assert hybrid_metric(lambda p: {"A": p(d)["A"]}, n_boot=50)["A"] == (0.7, [0.7, 0.7])


def test_zero_draws_one_draw_and_all_unparsed():
    """0 draws on an open record: nothing answers its residual (the head, or a named fallback; prompt_estimate
    gives nothing); 1 draw: a point and a wide interval around it; every draw unparsed, head empty: the
    prompt is undefined given a parse, its parse rate 0 with width on the side it can go."""
    from probe.metrics.hybrid import answered, hybrid_metric, hybrid_probs, prompt_estimate

    open_ = {"probs": {"A": 0.2}, "rejected": 0.0, "residual": 0.8}  # an exact-only record: no hybrid entry
    assert hybrid_probs(open_) == {"A": 0.2}
    assert hybrid_probs(open_, lambda d: {"A": 1.0}) == {"A": 1.0}  # a named sensitivity rule, when asked for
    assert prompt_estimate(open_, ["A"]) is None and answered(open_)
    one = _rec(0.2, 0.8, {"A": 1})
    point, (lo, hi) = hybrid_metric(lambda p: {"A": p(one)["A"]}, n_boot=2000)["A"]
    assert point == pytest.approx(1.0) and lo < 0.7 and hi == pytest.approx(1.0 + (1.0 - lo))  # centred, uncut
    est = prompt_estimate(one, ["A"])["A"]
    assert est[0] == pytest.approx(1.0) and est[1] < 0.8 and est[2] == pytest.approx(1.0)  # cut to [0.2, 1]
    none = _empty(residual=0.9, n=12)
    assert not answered(none) and hybrid_probs(none) == {}
    rate = prompt_estimate(none, ["0", "1"])["parse rate"]
    # Jeffreys: Beta(0.5, 12.5), sd sqrt(0.5 x 12.5 / (13^2 x 14)); times the residual
    se = 0.9 * math.sqrt(0.5 * 12.5 / (13 ** 2 * 14))
    assert rate == pytest.approx((0.0, 0.0, 1.959963984540054 * se, se))


def test_an_undefined_metric_is_nan_never_zero_with_no_width():
    from probe.metrics.hybrid import answered, hybrid_metric, undefined_text

    recs = [_empty(n=4) for _ in range(8)]

    def share(probs_of):  # a given-a-parse share over the prompts that answer: none here
        kept = [probs_of(d) for d in recs if answered(d)]
        return {"share": float(np.mean([p.get("0", 0.0) / sum(p.values()) for p in kept])) if kept else math.nan}

    point, ci = hybrid_metric(share, n_boot=50)["share"]
    assert math.isnan(point) and all(math.isnan(x) for x in ci)
    assert undefined_text(8, 8, "questions") == "n/a: nothing parsed, 8 of 8 questions"


def test_k_sample_noise_adds_and_limits_cut():
    from probe.metrics.hybrid import Z95, hybrid_metric

    d = {"probs": {"A": 0.5}, "rejected": 0.5, "residual": 0.0}
    out = hybrid_metric(lambda p: {"n": p(d)["A"]}, noise=lambda p: {"n": 0.01}, limits=(0.0, 0.6))["n"]
    assert out == (0.5, [pytest.approx(0.5 - Z95 * 0.1), 0.6])


def test_each_prompt_keeps_its_own_draws_nothing_pooled():
    """Half the prompts' tails always answer, half never: each prompt's redrawn share follows its own draws;
    an empty prompt's draws do not borrow the others' rate."""
    from probe.metrics.hybrid import drawn_shares

    yes, no = _empty(n=20, hit=20), _empty(n=20)
    rng = np.random.default_rng(1)
    s_yes = np.mean([1 - drawn_shares(yes, rng, ("0", "1"))["none"] for _ in range(500)])
    s_no = np.mean([1 - drawn_shares(no, rng, ("0", "1"))["none"] for _ in range(500)])
    assert s_yes > 0.9 and s_no < 0.1
    shares = [drawn_shares(_empty(), np.random.default_rng(i), ("0", "1")) for i in range(400)]
    # a letter no draw read still has width
    assert max(s["1"] for s in shares) > 0.05 and abs(np.mean([s["0"] - s["1"] for s in shares])) < 0.05


def test_hybrid_metric_gives_width_to_answers_no_draw_read():
    from probe.metrics.hybrid import hybrid_metric

    d = {"probs": {}, "residual": 0.9, "hybrid": {"n_tail": 2, "tail": {"none": 2}}}

    def metric(probs_of):
        return {"a": probs_of(d).get("0", 0.0)}

    point, (lo, hi) = hybrid_metric(metric, n_boot=100, answers=lambda _d: ("0", "1"), limits=(0.0, 1.0))["a"]
    assert point == 0.0 and lo == 0.0 and 0.1 < hi <= 0.9


def test_cmp_iso_pair_resting_on_nothing_is_left_out_and_others_get_width():
    """A cmp pair whose head parsed nothing and whose tail draws read no label rests on nothing: left out and
    counted (before, the authors' 0.5 fallback made it a gap of 0). A pair with one label read gets the
    interval's width over every offered label, centred on its point."""
    import pandas as pd

    from probe.tasks.cmp_iso.parsed import _hybrid_cells

    def rows(tail):
        return [{"setting": "direct", "benchmark": "b", "context_pair_id": 1, "task_type": "cmp", "target": "t",
                 "order": order, "options": ["A", "B", "C"],
                 "parsed": {"probs": {}, "rejected": 0.2, "residual": 0.8,
                            "hybrid": {"n_tail": sum(tail.values()), "tail": dict(tail)}}}
                for order in ("t_first", "t_prime_first")]

    (point, ci, n), = _hybrid_cells(pd.DataFrame(rows({"none": 20})), k=5, seed=0).values()
    assert math.isnan(point) and n == 0
    (point, (lo, hi), n), = _hybrid_cells(pd.DataFrame(rows({"A": 1, "none": 19})), k=5, seed=0).values()
    assert n == 1 and lo < point < hi and (lo + hi) / 2 == pytest.approx(point)
