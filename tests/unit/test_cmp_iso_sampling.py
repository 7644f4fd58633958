"""The iso/cmp K-sample preference expectation: hand-computed cases, limits and a seeded Monte Carlo check."""

from __future__ import annotations

import numpy as np
import pytest

from probe.tasks.cmp_iso.sampling import expected_cmp_preference, expected_iso_preference


def test_k1_by_hand():
    # one generation per prompt: a_t = 1 w.p. 0.5 (else 0), a_t' = 1 w.p. 0.25
    # p_t: (1,1) -> .5, (1,0) -> 1, (0,1) -> 0, (0,0) -> .5 (fallback)
    want = 0.5 * 0.25 * 0.5 + 0.5 * 0.75 * 1 + 0.5 * 0.25 * 0 + 0.5 * 0.75 * 0.5
    assert expected_iso_preference(0.5, 1.0, 0.25, 1.0, k=1) == pytest.approx(want)
    # cmp, k = 1: t w.p. .6, t' w.p. .3, neither .1 -> 0.6 * 1 + 0.3 * 0 + 0.1 * 0.5
    assert expected_cmp_preference(0.6, 0.3, k=1) == pytest.approx(0.65)


def test_limits_and_symmetry():
    assert expected_iso_preference(0.0, 1.0, 0.0, 1.0) == pytest.approx(0.5)  # never Yes: the fallback
    assert expected_iso_preference(0.0, 0.0, 0.0, 0.0) == pytest.approx(0.5)  # never valid
    assert expected_iso_preference(1.0, 1.0, 0.0, 1.0) == pytest.approx(1.0)
    a = expected_iso_preference(0.3, 0.9, 0.1, 0.8)
    assert a + expected_iso_preference(0.1, 0.8, 0.3, 0.9) == pytest.approx(1.0)
    assert expected_cmp_preference(0.2, 0.2) == pytest.approx(0.5)
    assert expected_cmp_preference(0.7, 0.1) + expected_cmp_preference(0.1, 0.7) == pytest.approx(1.0)


def test_finite_k_differs_from_the_plug_in():
    gap = 2 * expected_iso_preference(0.02, 1.0, 0.01, 1.0, k=25) - 1
    assert gap == pytest.approx(0.178, abs=5e-4)
    assert gap < 0.02 / 0.03 * 2 - 1  # the plug-in 0.333
    # many samples approach the plug-in ratio
    assert 2 * expected_iso_preference(0.4, 1.0, 0.2, 1.0, k=400) - 1 == pytest.approx(1 / 3, abs=0.01)


@pytest.mark.parametrize("args", [(0.3, 0.8, 0.1, 0.9), (0.05, 0.5, 0.02, 0.3)])
def test_monte_carlo(args):
    rng = np.random.default_rng(7)
    n, k = 100_000, 25

    def share(py, pv):
        u = rng.random((n, k))
        yes, val = (u < py).sum(1), (u < pv).sum(1)
        return np.where(val > 0, yes / np.maximum(val, 1), 0.0)

    a, b = share(*args[:2]), share(*args[2:])
    t = a + b
    mc = np.where(t > 0, a / np.where(t > 0, t, 1), 0.5)
    assert expected_iso_preference(*args, k=k) == pytest.approx(mc.mean(), abs=4 * mc.std() / np.sqrt(n))


def test_bad_input():
    with pytest.raises(ValueError):
        expected_iso_preference(0.5, 0.4, 0.1, 0.2)  # P(Yes) above P(valid)
    with pytest.raises(ValueError):
        expected_cmp_preference(0.7, 0.6)
    with pytest.raises(ValueError):
        expected_cmp_preference(0.1, 0.1, k=0)
    with pytest.raises(ValueError):
        expected_iso_preference(float("nan"), 1.0, 0.1, 1.0)


@pytest.mark.parametrize("k", [1, 2, 7, 25])
def test_share_distribution_equals_the_loop_over_valid_counts(k):
    """The one-call form of the (V, Y) distribution gives bit for bit what a pmf call per V gives."""
    from scipy.stats import binom

    from probe.tasks.cmp_iso.sampling import _iso_share

    for p_yes, p_valid in [(0.0, 0.0), (0.0, 1.0), (1.0, 1.0), (0.2, 0.5), (0.3, 0.3), (1e-9, 0.9), (0.41, 0.77)]:
        pv = binom.pmf(np.arange(k + 1), k, p_valid)
        q = p_yes / p_valid if p_valid > 0 else 0.0
        values, probs = [0.0], [pv[0]]
        for n in range(1, k + 1):
            values.extend((np.arange(n + 1) / n).tolist())
            probs.extend((pv[n] * binom.pmf(np.arange(n + 1), n, q)).tolist())
        values_a, probs_a = np.asarray(values), np.asarray(probs)
        keep = probs_a > 1e-18
        want_v, inv = np.unique(np.round(values_a[keep], 12), return_inverse=True)
        got_v, got_p = _iso_share(p_yes, p_valid, k)
        assert np.array_equal(got_v, want_v)
        assert np.array_equal(got_p, np.bincount(inv, weights=probs_a[keep]))
        assert got_p.sum() == pytest.approx(1.0)
