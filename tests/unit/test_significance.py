"""Randomization test with known answers, and the scipy-backed correlations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from probe.metrics.significance import kendall_tau, pearson, randomization_test, top_k_intersection


def test_exact_answer_five_units():
    # d = +1 for all 5 units: only "no swap" and "swap all" reach |mean| = 1 -> exact p = 2/32
    r = randomization_test(np.ones(5), np.zeros(5), n_iter=40000, seed=1)
    assert r.observed == 1.0
    assert r.p_value == pytest.approx(2 / 32, abs=0.005)


def test_blocks_swap_together():
    # 6 units in 3 blocks of 2: 8 equally likely patterns, 2 reach |mean| = 1 -> p = 1/4
    # (unblocked the exact answer would be 2/64)
    x, y = np.ones(6), np.zeros(6)
    blocked = randomization_test(x, y, n_iter=40000, seed=2, blocks=[0, 0, 1, 1, 2, 2])
    assert blocked.n_blocks == 3
    assert blocked.p_value == pytest.approx(0.25, abs=0.01)
    unblocked = randomization_test(x, y, n_iter=40000, seed=2)
    assert unblocked.p_value == pytest.approx(2 / 64, abs=0.005)


def test_identical_settings_give_p_one():
    x = np.array([0.1, -0.3, 0.7])
    r = randomization_test(x, x.copy(), n_iter=1000)
    assert r.observed == 0.0 and r.p_value == 1.0


def test_large_shift_is_significant_at_the_resolution_limit():
    rng = np.random.default_rng(0)
    y = rng.normal(size=40)
    r = randomization_test(y + 5, y, n_iter=999)
    assert r.p_value == pytest.approx(1 / 1000) and r.significant()


def test_agrees_with_scipy_paired_permutation_test():
    rng = np.random.default_rng(3)
    x = rng.normal(0.2, 1.0, size=25)
    y = rng.normal(0.0, 1.0, size=25)
    ours = randomization_test(x, y, n_iter=20000, seed=0)
    ref = stats.permutation_test((x, y), lambda a, b, axis: np.mean(a, axis=axis) - np.mean(b, axis=axis),
                                 permutation_type="samples", n_resamples=20000, vectorized=True,
                                 alternative="two-sided", random_state=0)
    assert ours.observed == pytest.approx(ref.statistic)
    assert ours.p_value == pytest.approx(ref.pvalue, abs=0.02)


def test_custom_statistic_matches_mean_fast_path():
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=12), rng.normal(size=12)
    fast = randomization_test(x, y, n_iter=2000, seed=5)
    slow = randomization_test(x, y, statistic=np.mean, n_iter=2000, seed=5)
    assert fast.p_value == pytest.approx(slow.p_value)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="same shape"):
        randomization_test([1, 2], [1])
    with pytest.raises(ValueError, match="NaN"):
        randomization_test([1, math.nan], [1, 2])
    with pytest.raises(ValueError, match="at least one"):
        randomization_test([], [])
    with pytest.raises(ValueError, match="one id per row"):
        randomization_test([1, 2], [1, 2], blocks=[0])


def test_kendall_tau_uses_scipy_and_handles_degenerate_input():
    tau, p = kendall_tau([1, 2, 3, 4, 5], [5, 4, 3, 2, 1])
    assert tau == pytest.approx(-1.0) and p < 0.05
    assert all(math.isnan(v) for v in kendall_tau([1], [2]))
    ref = stats.kendalltau([1, 3, 2, 5, 4], [2, 1, 4, 3, 5])
    assert kendall_tau([1, 3, 2, 5, 4], [2, 1, 4, 3, 5]) == pytest.approx((ref.statistic, ref.pvalue))


def test_pearson_needs_three_points():
    assert all(math.isnan(v) for v in pearson([0.1, 0.2], [1, 2]))
    assert all(math.isnan(v) for v in pearson([1, 1, 1], [1, 2, 3]))
    r, p = pearson([1, 2, 3, 4], [2, 4, 6, 8.5])
    assert r == pytest.approx(stats.pearsonr([1, 2, 3, 4], [2, 4, 6, 8.5]).statistic)


def test_top_k_intersection():
    names = ["a", "b", "c", "d"]
    assert top_k_intersection(names, [4, 3, 2, 1], [4, 3, 2, 1], k=2) == 2
    assert top_k_intersection(names, [4, 3, 2, 1], [1, 2, 3, 4], k=2) == 0
