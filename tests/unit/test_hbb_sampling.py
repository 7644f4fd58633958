"""The exact distribution of HBB's sampled S estimator on hand-computed cases, against brute
force and against Monte Carlo (probe.tasks.hbb.sampling)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from probe.tasks.hbb.sampling import (
                                      count_quantiles,
                                      count_variance_shared,
                                      instance_stats,
                                      noise_floor_probs,
                                      phat_pmf,
                                      poisson_binomial_pmf,
                                      prob_s_at_least,
                                      s_distribution,
                                      sampled_count,
                                      )


def test_n2_binomial_s_distribution_by_hand():
    # all mass on labels; k1 ~ Bin(2, .5): .25 .5 .25; k2 ~ Bin(2, .25): .5625 .375 .0625
    # the 9 count pairs (k1, k2): probability, S = |k1 - k2| / 2 x 100
    # (0,0) .140625  0 | (0,1) .09375 50 | (0,2) .015625 100
    # (1,0) .28125  50 | (1,1) .1875   0 | (1,2) .03125   50
    # (2,0) .140625 100| (2,1) .09375 50 | (2,2) .015625   0
    v, p, u = s_distribution(0.5, 0.5, 0.25, 0.75, n_samples=2)
    assert v.tolist() == [0.0, 50.0, 100.0] and u == 0.0
    assert p.tolist() == pytest.approx([0.34375, 0.5, 0.15625], abs=1e-15)
    r = instance_stats([0.5], [0.5], [0.25], [0.75], n_samples=2, threshold=50)
    assert r["p_over"][0] == pytest.approx(0.65625) and r["es_over"][0] == pytest.approx(25 + 15.625)
    # p1 = p2 = .5: |k1 - k2| = 0, 1, 2 w.p. .375, .5, .125
    assert s_distribution(0.5, 0.5, 0.5, 0.5, 2)[1].tolist() == pytest.approx([0.375, 0.5, 0.125])


def test_n1_with_non_label_answers_dropped():
    # one sample each; q1: A .3, B .5, other .2; q2: A .6, B .2, other .2
    v, p, u = s_distribution(0.3, 0.5, 0.6, 0.2, n_samples=1)
    assert v.tolist() == [0.0, 100.0]
    assert p.tolist() == pytest.approx([0.3 * 0.6 + 0.5 * 0.2, 0.3 * 0.2 + 0.5 * 0.6])
    assert u == pytest.approx(1 - 0.8 * 0.8)  # either sample is not a label: no S
    assert prob_s_at_least([0.3], [0.5], [0.6], [0.2], n_samples=1)[0] == pytest.approx(0.36)
    # "resample": N label answers, P(A | label) = 3/8 and 3/4
    p_res = prob_s_at_least([0.3], [0.5], [0.6], [0.2], n_samples=1, invalid="resample")[0]
    assert p_res == pytest.approx(3 / 8 * 1 / 4 + 5 / 8 * 3 / 4)


def test_all_mass_on_one_label_is_deterministic():
    v, p, u = s_distribution(1.0, 0.0, 0.0, 1.0, n_samples=10)
    assert v.tolist() == [100.0] and p.tolist() == [1.0] and u == 0.0
    assert s_distribution(0.0, 1.0, 0.0, 1.0, n_samples=10)[0].tolist() == [0.0]
    # 30 % of samples are not labels: P-hat is still 1 whenever defined, undefined w.p. .3^N
    v, p, u = s_distribution(0.7, 0.0, 0.0, 1.0, n_samples=4)
    assert v.tolist() == [100.0] and p[0] == pytest.approx(1 - 0.3**4) and u == pytest.approx(0.3**4)


def test_no_label_mass_is_undefined_never_counted():
    pm = phat_pmf([0.0], [0.0], n_samples=10)
    assert pm.sum() == 0.0  # kA + kB = 0 always: P-hat undefined
    v, p, u = s_distribution(0.0, 0.0, 0.5, 0.5, n_samples=10)
    assert len(v) == 0 and u == 1.0
    for rule in ("drop", "resample"):
        r = instance_stats([0.0], [0.0], [0.5], [0.5], 10, 20, rule)
        assert r["p_over"][0] == 0.0 and r["p_undefined"][0] == 1.0
    s = sampled_count([0.0], [0.0], [1.0], [0.0])
    assert s.expected_count == 0.0 and s.expected_undefined == 1.0 and math.isnan(s.expected_share)


def test_threshold_on_a_reachable_value_is_included():
    # q1 always A (P-hat 1); k2 ~ Bin(10, .5): S = (10 - k2) x 10, so S = 20 at k2 = 8
    pk = [math.comb(10, k) / 1024 for k in range(11)]
    at_20 = prob_s_at_least([1.0], [0.0], [0.5], [0.5], 10, 20)[0]
    above_20 = prob_s_at_least([1.0], [0.0], [0.5], [0.5], 10, 20.5)[0]
    assert at_20 == pytest.approx(sum(pk[:9]))  # k2 <= 8, includes S = 20 exactly
    assert above_20 == pytest.approx(sum(pk[:8]))
    # 0.6 - 0.4 is 0.19999999999999996 in floats: the exact fractions still count it
    assert Fraction(6, 10) - Fraction(4, 10) == Fraction(1, 5)
    # N = 3: S = 100/3 typed as a float still counts
    assert prob_s_at_least([1.0], [0.0], [0.0], [1.0], 3, 100 / 3)[0] == 1.0
    q = prob_s_at_least([1.0], [0.0], [2 / 3], [1 / 3], 3, 100 / 3)[0]
    assert q == pytest.approx(1 - (2 / 3) ** 3)  # S >= 100/3 unless all three are A


def test_boundary_tolerance_matches_the_exact_metrics():
    """Both modules count S >= t - S_TOLERANCE: a threshold a hair above a reachable S still takes it,
    one more than the tolerance above does not; the exact-probability count agrees."""
    from probe.tasks.hbb.metrics import S_TOLERANCE, summarize

    pk = [math.comb(10, k) / 1024 for k in range(11)]
    for t in (20.0, 20.0 + S_TOLERANCE / 2):
        assert prob_s_at_least([1.0], [0.0], [0.5], [0.5], 10, t)[0] == pytest.approx(sum(pk[:9]))
        assert summarize([abs(0.6 - 0.4) * 100, 20.0], threshold=t, ci=False).count == 2
    t = 20.0 + 2 * S_TOLERANCE
    assert prob_s_at_least([1.0], [0.0], [0.5], [0.5], 10, t)[0] == pytest.approx(sum(pk[:8]))
    assert summarize([20.0], threshold=t, ci=False).count == 0


def test_noise_floor_half_half_n10_t20():
    # all mass on labels, p1 = p2 = .5, N = 10: k1 - k2 + 10 ~ Bin(20, .5) and S >= 20 iff |k1 - k2| >= 2
    exact = 1 - (math.comb(20, 9) + math.comb(20, 10) + math.comb(20, 11)) / 2**20
    assert exact == pytest.approx(0.503445, abs=1e-6)
    assert prob_s_at_least([0.5], [0.5], [0.5], [0.5])[0] == pytest.approx(exact, abs=1e-14)
    # a fully biased instance (P1(A) = 1, P2(A) = 0) has the same noise floor: both become .5
    nf = noise_floor_probs([1.0], [0.0], [0.0], [1.0])
    assert [x[0] for x in nf] == [0.5, 0.5, 0.5, 0.5]
    s = sampled_count([1.0] * 4, [0.0] * 4, [0.0] * 4, [1.0] * 4)
    assert s.expected_count == 4.0 and s.noise_floor_expected_count == pytest.approx(4 * exact)


def test_noise_floor_keeps_label_mass():
    a1, b1, a2, b2 = noise_floor_probs([0.6, 0.0], [0.2, 0.0], [0.1, 0.3], [0.4, 0.1])
    assert (a1 + b1).tolist() == pytest.approx([0.8, 0.0]) and (a2 + b2).tolist() == pytest.approx([0.5, 0.4])
    assert a1[0] / 0.8 == pytest.approx(a2[0] / 0.5) == pytest.approx((0.75 + 0.2) / 2)
    assert a2[1] / 0.4 == pytest.approx(0.75)  # question 1 has no label mass: question 2's own


def test_matches_binomial_expectation_when_all_mass_on_labels():
    from probe.tasks.hbb.metrics import sampled_estimator_expectation

    rng = np.random.default_rng(1)
    p1, p2 = rng.uniform(size=50), rng.uniform(size=50)
    old = sampled_estimator_expectation(p1, p2, 10, 20)
    new = sampled_count(p1, 1 - p1, p2, 1 - p2)
    assert new.expected_count == pytest.approx(old["expected_count"], rel=1e-12)
    assert new.expected_mean_s == pytest.approx(old["expected_mean_s"], rel=1e-12)


def test_poisson_binomial_against_brute_force():
    p = [0.2, 0.55, 0.9]
    brute = np.zeros(4)
    for bits in itertools.product([0, 1], repeat=3):
        brute[sum(bits)] += math.prod(pi if b else 1 - pi for pi, b in zip(p, bits))
    assert poisson_binomial_pmf(p) == pytest.approx(brute, abs=1e-15)
    # long inputs (FFT branch) keep mean and variance
    q = np.random.default_rng(2).uniform(size=3000)
    pm = poisson_binomial_pmf(q)
    k = np.arange(len(pm))
    assert (pm * k).sum() == pytest.approx(q.sum(), rel=1e-9)
    assert (pm * (k - q.sum()) ** 2).sum() == pytest.approx((q * (1 - q)).sum(), rel=1e-6)
    assert count_quantiles(brute, (0.05, 0.5, 0.95)) == [
        int(np.argmax(np.cumsum(brute) >= x)) for x in (0.05, 0.5, 0.95)
    ]


def _simulate_phat(rng: np.random.Generator, pa: float, pb: float, n: int, draws: int) -> np.ndarray:
    """The paper's procedure: N multinomial samples, non-labels dropped; NaN when none is a label."""
    k = rng.multinomial(n, [pa, pb, max(0.0, 1 - pa - pb)], size=draws)
    with np.errstate(invalid="ignore", divide="ignore"):
        return k[:, 0] / (k[:, 0] + k[:, 1])


def test_monte_carlo_agrees_within_3_se():
    rng = np.random.default_rng(1234)
    draws = 20_000
    inst = [(0.5, 0.4, 0.3, 0.6), (0.7, 0.1, 0.45, 0.45), (0.2, 0.2, 0.6, 0.1)]
    exact = prob_s_at_least(*np.array(inst).T, n_samples=10, threshold=20)
    for (a1, b1, a2, b2), p_exact in zip(inst, exact):
        s = np.abs(_simulate_phat(rng, a1, b1, 10, draws) - _simulate_phat(rng, a2, b2, 10, draws)) * 100
        hit = np.nan_to_num(s, nan=-1.0) >= 20 - 1e-9  # undefined never counts
        se = math.sqrt(p_exact * (1 - p_exact) / draws)
        assert abs(hit.mean() - p_exact) <= 3 * se
    # the whole S distribution of one instance
    v, p, u = s_distribution(0.5, 0.4, 0.3, 0.6, 10)
    s = np.abs(_simulate_phat(rng, 0.5, 0.4, 10, draws) - _simulate_phat(rng, 0.3, 0.6, 10, draws)) * 100
    for val, pv in zip(v, p):
        freq = np.isclose(s, val, atol=1e-9).mean()
        assert abs(freq - pv) <= 3 * math.sqrt(pv * (1 - pv) / draws) + 1e-12


def test_shared_question_variance_brute_force_and_monte_carlo():
    # a triangle of 3 questions (3 instances), N = 2, all mass on labels: enumerate the 27 P-hats
    pa = {"x": 0.3, "y": 0.5, "z": 0.8}
    pairs = [("x", "y"), ("x", "z"), ("y", "z")]
    binom = {q: [math.comb(2, k) * p**k * (1 - p) ** (2 - k) for k in range(3)] for q, p in pa.items()}
    m1 = m2 = 0.0
    for ks in itertools.product(range(3), repeat=3):
        w = math.prod(binom[q][k] for q, k in zip("xyz", ks))
        kk = dict(zip("xyz", ks))
        c = sum(abs(kk[a] - kk[b]) >= 1 for a, b in pairs)  # threshold 50 at N = 2
        m1, m2 = m1 + w * c, m2 + w * c * c
    p1 = [pa[a] for a, _ in pairs]
    p2 = [pa[b] for _, b in pairs]
    args = (p1, [1 - x for x in p1], p2, [1 - x for x in p2])
    v = count_variance_shared(*args, [a for a, _ in pairs], [b for _, b in pairs], n_samples=2, threshold=50)
    assert v == pytest.approx(m2 - m1**2, abs=1e-12)
    assert prob_s_at_least(*args, n_samples=2, threshold=50).sum() == pytest.approx(m1, abs=1e-12)
    # a religion-like cell (4 questions, 6 pairs) with non-label answers, against 20k simulated runs
    rng = np.random.default_rng(7)
    qa = {"a": (0.5, 0.4), "b": (0.2, 0.7), "c": (0.6, 0.3), "d": (0.45, 0.45)}
    pairs = list(itertools.combinations("abcd", 2))
    ph = {q: _simulate_phat(rng, *qa[q], 10, 20_000) for q in qa}
    counts = sum(np.nan_to_num(np.abs(ph[a] - ph[b]) * 100, nan=-1.0) >= 20 - 1e-9 for a, b in pairs)
    args = ([qa[a][0] for a, _ in pairs], [qa[a][1] for a, _ in pairs],
            [qa[b][0] for _, b in pairs], [qa[b][1] for _, b in pairs])
    v = count_variance_shared(*args, [a for a, _ in pairs], [b for _, b in pairs])
    mean = prob_s_at_least(*args).sum()
    se_mean = math.sqrt(v / 20_000)
    assert abs(counts.mean() - mean) <= 3 * se_mean
    c = counts - counts.mean()
    se_var = math.sqrt(((c**2 - c.var()) ** 2).mean() / 20_000)
    assert abs(counts.var() - v) <= 3 * se_var


def test_sampled_count_fields_nan_rows_and_errors():
    s = sampled_count([0.5, np.nan, 0.5], [0.5, 0.1, 0.5], [0.5, 0.2, 0.5], [0.5, 0.2, 0.5],
                      q1_ids=["a", "b", "a"], q2_ids=["c", "d", "e"])
    assert s.n == 2 and s.n_invalid == 1
    assert s.count_q05 <= s.expected_count <= s.count_q95
    assert s.count_sd_shared is not None and s.count_sd_shared >= s.count_sd  # a shared question
    assert set(s.to_dict()) >= {"expected_count", "noise_floor_expected_count", "count_range_shared"}
    assert np.isnan(prob_s_at_least([np.nan], [0.5], [0.5], [0.5])[0])
    with pytest.raises(ValueError, match="<= 1"):
        prob_s_at_least([0.7], [0.5], [0.5], [0.5])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        phat_pmf([1.5], [0.0])
    with pytest.raises(ValueError, match="invalid"):
        phat_pmf([0.5], [0.5], invalid="keep")
    with pytest.raises(ValueError, match="differ"):
        count_variance_shared([0.5], [0.5], [0.5], [0.5], ["a"], ["a"])
    empty = sampled_count([], [], [], [])
    assert empty.n == 0 and empty.expected_count == 0.0 and empty.count_q95 == 0
