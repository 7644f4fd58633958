"""Certified intervals (probe.metrics.certified): hand-computed cases and brute force over residual splits."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from probe.metrics.certified import (conditional_vertices, contains, interval_mean, mass_bounds, point_conditional,
                                     point_masses, ratio_range, share_range, uncertified)


def _random_split(rng, k, r):
    """A random split of r over k answers and the non-answer (the answers' part)."""
    w = rng.dirichlet(np.ones(k + 1)) * r
    return w[:k]


def test_zero_residual_gives_a_point():
    v = conditional_vertices([0.2, 0.3, 0.1], 0.0)
    assert v.shape == (1, 3)
    np.testing.assert_allclose(v[0], [1 / 3, 0.5, 1 / 6])
    lo, hi = share_range([v[:, 0].tolist()])
    assert lo == hi == pytest.approx(1 / 3)


def test_residual_one_is_anything():
    v = conditional_vertices([0.0, 0.0, 0.0], 1.0)
    assert v.tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]]
    assert point_conditional([0.0, 0.0, 0.0]) is None
    assert point_masses([0.0, 0.0], 1.0).tolist() == [0.0, 0.0]


def test_never_parses_has_no_vertex():
    assert conditional_vertices([0.0, 0.0], 0.0).shape == (0, 2)


def test_empty_groups_are_nan():
    assert all(math.isnan(x) for x in share_range([]))
    assert all(math.isnan(x) for x in ratio_range([], [], 0.0, 0.0))
    assert all(math.isnan(x) for x in interval_mean([]))


def test_hand_computed_conditional():
    # A = 0.5, r = 0.5: q_0 in [0.4 / 1.0, 0.9 / 1.0]
    v = conditional_vertices([0.4, 0.1], 0.5)
    assert share_range([v[:, 0].tolist()]) == pytest.approx((0.4, 0.9))
    # the point rule: the enumerated conditional, and the residual in the enumerated mix
    np.testing.assert_allclose(point_conditional([0.4, 0.1]), [0.8, 0.2])
    np.testing.assert_allclose(point_masses([0.4, 0.1], 0.5), [0.8, 0.2])
    assert mass_bounds([0.4, 0.1], 0.5) == [(0.4, 0.9), (0.1, 0.6)]


def test_uncertified_flags_the_published_floor_case():
    assert uncertified(3e-5, 4.9e-4, 0.05)  # residual / parsed = 16
    assert not uncertified(0.9, 0.04, 0.05)
    assert uncertified(0.0, 0.01, 0.05)
    assert not uncertified(0.0, 0.01, None)


def test_conditional_vertices_bound_every_split():
    rng = np.random.default_rng(0)
    for _ in range(200):
        k = int(rng.integers(2, 4))
        p = rng.dirichlet(np.ones(k + 2))[:k]  # some rejected, some residual
        r = float(rng.uniform(0, 1 - p.sum()))
        v = conditional_vertices(p, r)
        x = _random_split(rng, k, r)
        if p.sum() + x.sum() <= 0:
            continue
        q = (p + x) / (p.sum() + x.sum())
        for j in range(k):
            assert v[:, j].min() - 1e-12 <= q[j] <= v[:, j].max() + 1e-12


def test_ratio_range_matches_brute_force():
    rng = np.random.default_rng(1)
    for _ in range(150):
        n = int(rng.integers(1, 5))
        num = [rng.uniform(-1, 1, size=int(rng.integers(1, 4))) for _ in range(n)]
        den = [rng.uniform(0.1, 1, size=len(x)) for x in num]
        num0, den0 = float(rng.uniform(-1, 1)), float(rng.uniform(0, 1))
        values = [(num0 + sum(x[c] for x, c in zip(num, pick))) / (den0 + sum(d[c] for d, c in zip(den, pick)))
                  for pick in itertools.product(*[range(len(x)) for x in num])]
        lo, hi = ratio_range(num, den, num0, den0)
        assert lo == pytest.approx(min(values), abs=1e-12)
        assert hi == pytest.approx(max(values), abs=1e-12)


def test_ratio_of_conditional_shares_bounds_every_split():
    # an Acc_dis-like ratio: sum q_correct / sum (1 - q_unknown), over prompts' random splits
    rng = np.random.default_rng(2)
    for _ in range(60):
        n = int(rng.integers(1, 5))
        ps = [rng.dirichlet(np.ones(5))[:3] for _ in range(n)]
        rs = [float(rng.uniform(0, 1 - p.sum())) for p in ps]
        verts = [conditional_vertices(p, r) for p, r in zip(ps, rs)]
        num = [v[:, 0] for v in verts]
        den = [v[:, 0] + v[:, 1] for v in verts]
        lo, hi = ratio_range(num, den)
        if math.isnan(lo):
            continue
        for _ in range(30):
            qs = []
            for p, r in zip(ps, rs):
                x = _random_split(rng, 3, r)
                qs.append((p + x) / (p.sum() + x.sum()))
            value = sum(q[0] for q in qs) / sum(q[0] + q[1] for q in qs)
            assert contains((lo, hi), value)


def test_denominator_reaching_zero_is_nan():
    assert all(math.isnan(x) for x in ratio_range([np.array([0.0, 1.0])], [np.array([0.0, 1.0])]))


def test_interval_mean_and_contains():
    assert interval_mean([(0.0, 1.0), (0.5, 0.5), (math.nan, math.nan)]) == (0.25, 0.75)
    assert contains((0.1, 0.2), 0.2) and not contains((0.1, 0.2), 0.3) and not contains((0, 1), math.nan)


def _bbq_records(rng, n):
    recs = []
    for i in range(n):
        t, u = rng.permutation(3)[:2]
        cond = "ambig" if rng.random() < 0.5 else "disambig"
        label = int(u) if cond == "ambig" else int(rng.choice([x for x in range(3) if x != u]))
        mass = rng.dirichlet(np.ones(5))
        raw = mass[:3] * (0 if rng.random() < 0.15 else 1)  # some prompts with nothing parsed
        recs.append(dict(context_condition=cond, question_polarity=str(rng.choice(["neg", "nonneg"])), label=label,
                         target_index=int(t), unknown_index=int(u), dimension=str(rng.choice(["a", "b"])),
                         raw=raw.tolist(), residual=float(rng.uniform(0, 0.4))))
    return recs


def test_bbq_intervals_contain_every_split():
    """ImplicitBBQ's certified Acc / Bias contain the metrics of random residual splits (prompts that then
    parse nothing drop out, as the point estimate drops them)."""
    from probe.tasks.bbq.metrics import bbq_metrics
    from probe.tasks.implicitbbq.certify import macro_intervals, pooled_intervals
    from probe.tasks.implicitbbq.tables import _macro

    rng = np.random.default_rng(3)
    for _ in range(25):
        recs = _bbq_records(rng, int(rng.integers(2, 9)))
        pooled, macro = pooled_intervals(recs), macro_intervals(recs)
        for _ in range(20):
            split = []
            for r in recs:
                p = np.asarray(r["raw"])
                x = _random_split(rng, 3, r["residual"]) * (rng.random() < 0.8)
                if p.sum() + x.sum() <= 0:
                    continue
                split.append({**r, "probs": ((p + x) / (p.sum() + x.sum())).tolist(), "item_id": str(len(split))})
            if not split:
                continue
            got = bbq_metrics(split)["expected"]
            mac = _macro(split, "expected", 0, 0)
            for m in ("acc_amb", "bias_amb", "acc_dis", "bias_dis", "acc_dis_all"):
                if not math.isnan(got[m]):
                    assert contains(pooled[m], got[m]), (m, pooled[m], got[m])
            for m in ("acc_amb", "bias_amb", "acc_dis", "bias_dis"):
                if not math.isnan(mac[m]):
                    assert contains(macro[m], mac[m]), (m, macro[m], mac[m])


def test_bbq_interval_is_a_point_without_residual():
    from probe.tasks.implicitbbq.certify import pooled_intervals

    rec = dict(context_condition="disambig", question_polarity="neg", label=0, target_index=0, unknown_index=2,
               dimension="a", raw=[0.3, 0.1, 0.2], residual=0.0)
    m = pooled_intervals([rec])
    assert m["acc_dis"] == pytest.approx([0.75, 0.75])  # 0.3 / (0.3 + 0.1)
    assert m["bias_dis"] == pytest.approx([0.5, 0.5])
    assert all(math.isnan(x) for x in m["acc_amb"])  # no ambiguous prompt


def test_parsed_table_prints_the_certified_interval_beside_the_ci():
    from probe.tasks.implicitbbq.certify import certified_summary
    from probe.tasks.implicitbbq.summary import parsed_tables
    from probe.tasks.implicitbbq.tables import KINDS, summarize

    rng = np.random.default_rng(4)
    recs = [{**r, "strategy": "zero_shot", "answer_format": "oneword", "context_kind": "explicit",
             "item_id": str(i), "uncertified": i == 0} for i, r in enumerate(_bbq_records(rng, 12))]
    point = []
    for r in recs:
        p = np.asarray(r["raw"])
        if p.sum() > 0:
            point.append({**r, "probs": (p / p.sum()).tolist(), "mass": float(p.sum())})
    cert = certified_summary(recs, KINDS)
    table = next(iter(parsed_tables(summarize(point, n_boot=10), "m", {"temperature": 0.1, "top_p": 1.0},
                                    cert).values()))
    cell = table.loc[0, "Acc Amb Exp"]
    lo, hi = cert["zero_shot|oneword"]["explicit"]["macro"]["acc_amb"]
    assert cell.endswith(f"cert. [{lo:.2f}, {hi:.2f}]") and table.loc[0, "not certified (prompts)"] == "1"


@pytest.mark.parametrize("task_type", ["iso", "cmp"])
def test_parity_gap_bounds_contain_every_split(task_type):
    """iso/cmp: the pair's K-sample preference over random residual splits stays in its certified interval, and
    the point (residual in the enumerated mix) too."""
    from probe.tasks.cmp_iso.parsed import _pair_bounds, _preference, _probs

    rng = np.random.default_rng(5)
    slots = ("t", "t_prime") if task_type == "iso" else ("t_first", "t_prime_first")
    labels = ("Yes", "No") if task_type == "iso" else ("A", "B")
    for _ in range(30):
        ds = {}
        for s in slots:
            m = rng.dirichlet(np.ones(4)) * rng.uniform(0.3, 1)
            ds[s] = {"probs": {labels[0]: m[0], labels[1]: m[1]}, "residual": float(1 - m[:3].sum())}
        lo, hi = _pair_bounds(task_type, ds, 5)
        assert lo <= hi
        assert lo - 1e-9 <= _preference(task_type, {s: _probs(d) for s, d in ds.items()}, 5) <= hi + 1e-9
        for _ in range(10):
            split = {}
            for s, d in ds.items():
                x = _random_split(rng, 2, d["residual"])
                split[s] = {labels[0]: d["probs"][labels[0]] + x[0], labels[1]: d["probs"][labels[1]] + x[1]}
            assert lo - 1e-9 <= _preference(task_type, split, 5) <= hi + 1e-9
    # no residual: a point
    ds = {s: {"probs": {labels[0]: 0.3, labels[1]: 0.5}, "residual": 0.0} for s in slots}
    lo, hi = _pair_bounds(task_type, ds, 5)
    assert lo == pytest.approx(hi)


def test_hbb_count_bounds_contain_every_split():
    """HBB: P(S >= threshold) per instance over random residual splits lies in its coupled bounds."""
    from probe.tasks.hbb.certify import instance_bounds
    from probe.tasks.hbb.sampling import instance_stats

    rng = np.random.default_rng(6)
    m = rng.dirichlet(np.ones(4), size=(2, 20))  # per question: a, b, non-answer, residual
    m[:, :5, 3] = 0.0  # some questions fully enumerated
    m[:, :5] /= m[:, :5].sum(axis=2, keepdims=True)
    q1, q2 = m[0], m[1]
    lo, hi = instance_bounds(q1[:, 0], q1[:, 1], q1[:, 3], q2[:, 0], q2[:, 1], q2[:, 3], n_samples=4, threshold=20)
    assert np.all(lo <= hi + 1e-12)
    exact = instance_stats(q1[:5, 0], q1[:5, 1], q2[:5, 0], q2[:5, 1], n_samples=4, threshold=20)["p_over"]
    np.testing.assert_allclose(lo[:5], exact, atol=1e-12)
    np.testing.assert_allclose(hi[:5], exact, atol=1e-12)
    for _ in range(20):
        s1 = np.array([_random_split(rng, 2, r) for r in q1[:, 3]])
        s2 = np.array([_random_split(rng, 2, r) for r in q2[:, 3]])
        p = instance_stats(q1[:, 0] + s1[:, 0], q1[:, 1] + s1[:, 1], q2[:, 0] + s2[:, 0], q2[:, 1] + s2[:, 1],
                           n_samples=4, threshold=20)["p_over"]
        assert np.all(lo - 1e-9 <= p) and np.all(p <= hi + 1e-9)
