"""HBB metrics on hand-computed cases, including NaN, empty groups and the threshold edge."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from probe.tasks.hbb.metrics import (
                                     S_TOLERANCE,
                                     bias_scores,
                                     direction,
                                     direction_by_pair,
                                     identity_concept1_rates,
                                     normalize_pair,
                                     over_threshold,
                                     sampled_estimator_expectation,
                                     sg_prob_a,
                                     sg_prob_a_of_means,
                                     summarize,
                                     summarize_by,
                                     swap_average,
                                     )


def test_bias_scores_hand_computed():
    s = bias_scores([0.9, 0.2, 0.5, 1.0], [0.6, 0.7, 0.5, 0.0])
    assert s.tolist() == pytest.approx([30.0, 50.0, 0.0, 100.0])


def test_bias_scores_nan_and_errors():
    s = bias_scores([np.nan, 0.3], [0.1, np.nan])
    assert np.isnan(s).all()
    with pytest.raises(ValueError, match="shapes"):
        bias_scores([0.1, 0.2], [0.1])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        bias_scores([1.5], [0.2])


def test_normalize_pair_zero_sum_is_nan_not_half():
    p = normalize_pair([0.2, 0.0, 0.3], [0.6, 0.0, np.inf])
    assert p[0] == pytest.approx(0.25)
    assert np.isnan(p[1]) and np.isnan(p[2])


def test_swap_average_uses_s1_in_both_orders():
    assert swap_average([0.9, 0.2], [0.5, 0.4]).tolist() == pytest.approx([0.7, 0.3])


def test_sg_prob_a_equation_2():
    assert sg_prob_a([4.0], [4.0]) == pytest.approx(0.5)
    # 1/PPL: A = 1/2, B = 1/6 -> P(A) = 0.5 / (0.5 + 1/6) = 0.75
    assert sg_prob_a([2.0], [6.0]) == pytest.approx(0.75)
    # normalized within each variation pair, then averaged: (1/2)/(1/2 + 1/8) = 0.8, (1/4)/(1/4 + 1/4) = 0.5
    assert sg_prob_a([2.0, 4.0], [8.0, 4.0]) == pytest.approx(0.65)
    assert math.isnan(sg_prob_a([np.inf, 2.0], [2.0, 2.0])) and math.isnan(sg_prob_a([0.0], [2.0]))
    with pytest.raises(ValueError):
        sg_prob_a([], [2.0])
    with pytest.raises(ValueError, match="pair"):  # variation j of A goes with variation j of B
        sg_prob_a([2.0, 4.0], [8.0])


def test_sg_normalization_order_matters_hand_example():
    """The paper normalizes "after each reciprocal operation" (within each variation), not the means.

    Question 1: A = [1, 10], B = [2, 4]. Within: (1/1)/(1/1 + 1/2) = 2/3 and (1/10)/(1/10 + 1/4) = 2/7,
    mean 10/21 = 0.4762 (B more likely). Means: 1/PPL(A) = 0.55, 1/PPL(B) = 0.375 -> 0.55/0.925 = 0.5946
    (A more likely): the two orders disagree on the direction. Question 2: A = B = [2, 2], P(A) = 0.5.
    """
    a1, b1 = [1.0, 10.0], [2.0, 4.0]
    assert sg_prob_a(a1, b1) == pytest.approx(10 / 21)
    assert sg_prob_a_of_means(a1, b1) == pytest.approx(0.55 / 0.925)
    p2 = sg_prob_a([2.0, 2.0], [2.0, 2.0])
    within = bias_scores([sg_prob_a(a1, b1)], [p2])[0]
    means = bias_scores([sg_prob_a_of_means(a1, b1)], [p2])[0]
    assert within == pytest.approx(100 * (0.5 - 10 / 21)) and means == pytest.approx(100 * (0.55 / 0.925 - 0.5))
    assert direction([sg_prob_a(a1, b1)], [p2])[0] == -1.0 and direction([sg_prob_a_of_means(a1, b1)], [p2])[0] == 1.0


def test_direction_sign_tie_and_nan():
    d = direction([0.8, 0.2, 0.5, np.nan], [0.3, 0.6, 0.5, 0.1])
    assert d[:3].tolist() == [1.0, -1.0, 0.0] and np.isnan(d[3])


def test_threshold_exactly_at_the_boundary():
    """S on the threshold counts even when float arithmetic puts it a hair below (0.6 - 0.4 = 0.19999...)."""
    s = bias_scores([0.6, 0.7, 0.3], [0.4, 0.5, 0.1])  # every one is 20 on paper
    assert s[0] < 20.0 and s[1] < 20.0  # 19.999999999999996 in floats
    assert over_threshold(s, 20).all()
    assert summarize(s, threshold=20, ci=False).count == 3
    assert not over_threshold([20.0 - 2 * S_TOLERANCE, 19.99], 20).any()  # below the tolerance stays out
    assert over_threshold([20.0 - S_TOLERANCE / 2], 20)[0] and not over_threshold([np.nan], 20)[0]
    df = pd.DataFrame({"S": s, "direction": [1.0, -1.0, 1.0], "category": "age", "descriptor_type": 1,
                       "identity_1": "young", "identity_2": "old", "concept_id": [0, 1, 2]})
    assert direction_by_pair(df, threshold=20)["count"].tolist() == [3]
    assert identity_concept1_rates(df, threshold=20).n.tolist() == [3, 3]
    assert summarize_by(df, [], threshold=20, ci=False)["count"].tolist() == [3]
    # 10-sample P-hats at p = 0.5: a plain float >= drops 28 % of the count (0.142 of 0.503)
    k = np.arange(11)
    pk = np.array([math.comb(10, int(x)) for x in k]) / 1024
    s10 = np.abs(k[:, None] / 10 - k[None, :] / 10) * 100
    joint = pk[:, None] * pk[None, :]
    assert (joint * over_threshold(s10, 20)).sum() == pytest.approx(131975 / 262144)
    assert (joint * (s10 >= 20)).sum() == pytest.approx(131975 / 262144 - 0.1418781, abs=1e-6)
    # the 10-sample expectation counts the same boundary: q1 always A, q2 ~ Bin(10, .5), S = 20 at k2 = 8
    r = sampled_estimator_expectation([1.0], [0.5], 10, 20)
    assert r["expected_count"] == pytest.approx(sum(math.comb(10, k) for k in range(9)) / 1024)


def test_summarize_threshold_is_inclusive_and_counts_nan():
    s = summarize([10.0, 20.0, 40.0, np.nan], threshold=20, ci=False)
    assert (s.n, s.n_invalid, s.count) == (4, 1, 2)
    assert s.mean_s == pytest.approx(30.0)
    assert s.share == pytest.approx(2 / 3)
    assert s.mean_s_all == pytest.approx(70 / 3)


def test_summarize_empty_and_all_below():
    s = summarize([5.0, 1.0], threshold=20)
    assert s.count == 0 and math.isnan(s.mean_s) and s.share == 0.0
    assert all(math.isnan(x) for x in s.mean_s_ci)
    e = summarize([], threshold=20)
    assert e.n == 0 and math.isnan(e.share) and math.isnan(e.mean_s_all)
    allnan = summarize([np.nan, np.nan])
    assert allnan.n_invalid == 2 and math.isnan(allnan.share)


def test_summarize_cis_bracket_the_estimate():
    rng = np.random.default_rng(0)
    s = rng.uniform(0, 60, 300)
    plain = summarize(s, 20, n_boot=300)
    assert plain.share_ci[0] < plain.share < plain.share_ci[1]
    assert plain.mean_s_ci[0] < plain.mean_s < plain.mean_s_ci[1]
    clustered = summarize(s, 20, clusters=np.repeat(np.arange(30), 10), n_boot=300)
    assert clustered.share_ci[0] < clustered.share < clustered.share_ci[1]
    assert clustered.mean_s_ci[0] < clustered.mean_s < clustered.mean_s_ci[1]


def test_summarize_share_at_a_boundary_gets_wilson_not_a_zero_width_bootstrap():
    """0 of 20 over the threshold: every cluster resample is 0, so the bootstrap says [0, 0]; Wilson's 95 %
    interval for 0 / 20 is [0, 0.161] (hand: z^2 / (n + z^2) = 3.8415 / 23.8415)."""
    clusters = np.repeat(np.arange(10), 2)
    none = summarize(np.full(20, 5.0), 20, clusters=clusters, n_boot=200)
    assert none.share == 0.0 and none.share_ci[0] == 0.0
    assert none.share_ci[1] == pytest.approx(3.8415 / 23.8415, abs=1e-4)
    assert none.n_clusters == 10
    every = summarize(np.full(20, 30.0) + np.arange(20), 20, clusters=clusters, n_boot=200)
    assert every.share == 1.0 and every.share_ci[1] == 1.0 and every.share_ci[0] == pytest.approx(1 - 3.8415 / 23.8415,
                                                                                                   abs=1e-4)
    # the mean S still gets its cluster bootstrap (it varies even when every instance is over)
    assert every.mean_s_ci[0] < every.mean_s < every.mean_s_ci[1]


@pytest.fixture
def frame():
    return pd.DataFrame({
        "concept_id": [0, 0, 1, 1, 2],
        "category": ["race", "race", "race", "age", "age"],
        "descriptor_type": [1, 1, 2, 1, 1],
        "identity_1": ["asian", "asian", "black", "young", "young"],
        "identity_2": ["black", "white", "white", "old", "old"],
        "S": [25.0, 5.0, 50.0, np.nan, 30.0],
        "direction": [1.0, -1.0, -1.0, np.nan, 1.0],
    })


def test_summarize_by_groups(frame):
    t = summarize_by(frame, ["category"], ci=False).set_index("category")
    assert t.loc["race", "count"] == 2 and t.loc["race", "mean_s"] == pytest.approx(37.5)
    assert t.loc["age", "n_invalid"] == 1 and t.loc["age", "count"] == 1
    overall = summarize_by(frame, [], ci=False).iloc[0]
    assert overall["count"] == 3 and overall.n == 5


def test_direction_by_pair_and_identity_rates(frame):
    d = direction_by_pair(frame).set_index(["identity_1", "identity_2"])
    assert d.loc[("asian", "black"), "concept1_to_identity_1"] == 1
    assert d.loc[("black", "white"), "concept1_to_identity_2"] == 1
    assert ("asian", "white") not in d.index  # S = 5 < 20
    r = identity_concept1_rates(frame).set_index("identity")
    # over threshold: asian>black (asian gets concept 1), black<white (white gets it), young>old
    assert r.loc["asian", "concept1_rate"] == 1.0 and r.loc["black", "concept1_rate"] == 0.0
    assert r.loc["white", "concept1_rate"] == 1.0 and r.loc["old", "concept1_rate"] == 0.0
    assert r.loc["black", "n"] == 2


def test_direction_tables_empty_when_nothing_over_threshold(frame):
    assert direction_by_pair(frame, threshold=99).empty
    assert identity_concept1_rates(frame, threshold=99).empty


def test_sampled_estimator_expectation_hand_computed():
    from probe.tasks.hbb.metrics import sampled_estimator_expectation as sx

    r = sx([1.0], [0.0], n_samples=1)
    assert r["expected_count"] == pytest.approx(1.0) and r["expected_mean_s"] == pytest.approx(100.0)
    r = sx([0.5], [0.5], n_samples=1)
    assert r["expected_share"] == pytest.approx(0.5) and r["expected_mean_s"] == pytest.approx(100.0)
    # n = 2, p = 0.5: |k1 - k2| = 0, 1, 2 with probability .375, .5, .125 -> S = 0, 50, 100
    r = sx([0.5, np.nan], [0.5, 0.2], n_samples=2)
    assert r["n"] == 1 and r["n_invalid"] == 1
    assert r["expected_share"] == pytest.approx(0.625) and r["expected_mean_s"] == pytest.approx(60.0)
    r = sx([0.5], [0.5], n_samples=2, threshold=100)
    assert r["expected_count"] == pytest.approx(0.125)
    assert math.isnan(sx([0.3], [0.3], n_samples=2, threshold=101)["expected_mean_s"])
