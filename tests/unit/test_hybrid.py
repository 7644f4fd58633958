"""The hybrid estimator (probe.scoring.hybrid): exact head + sampled tail, on a toy tree with a known answer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from probe.scoring.hybrid import draw_tail, hybrid_from_tail, tail_budget, wilson

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
    assert tail_budget(nodes=40, residual=0.005, target=0.01, k=20, max_new_tokens=16) == 0  # T = 0.1: exact
    assert tail_budget(nodes=100, residual=0.5, target=0.01, k=25, max_new_tokens=8) == 12
    assert wilson(0, 0) == (0.0, 1.0)
    assert est.to_dict()["ci"]["A"] == [0.6, 0.65]


def test_parse_exact_frontier_is_the_residual_and_the_lm_tail_completes(tiny_lm):
    from probe.scoring.hybrid import LMCompleter
    from probe.scoring.parse_exact import _encode, eos_ids, parse_exact
    from probe.scoring.sampler_chain import SamplerChain
    from probe.scoring.sampling import SamplingSpec

    spec = SamplingSpec(1.0, 1.0)
    parser = lambda t: (t.strip()[:1] or None)  # noqa: E731
    d = parse_exact(tiny_lm, ["Hello there"], spec, max_new_tokens=3, parser=parser, residual=0.0, max_nodes=4,
                    prune=1e-4, frontier=True)[0]
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
