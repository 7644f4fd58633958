"""HBB metrics on hand-computed cases, including NaN, empty groups and the threshold edge."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from probe.metrics.hbb import (
    bias_scores,
    direction,
    direction_by_pair,
    identity_concept1_rates,
    normalize_pair,
    sg_prob_a,
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
    # mean over variations: A = (1/2 + 1/4)/2 = 0.375, B = 1/8 -> 0.375 / 0.5
    assert sg_prob_a([2.0, 4.0], [8.0]) == pytest.approx(0.75)
    assert math.isnan(sg_prob_a([np.inf], [2.0])) and math.isnan(sg_prob_a([0.0], [2.0]))
    with pytest.raises(ValueError):
        sg_prob_a([], [2.0])


def test_direction_sign_tie_and_nan():
    d = direction([0.8, 0.2, 0.5, np.nan], [0.3, 0.6, 0.5, 0.1])
    assert d[:3].tolist() == [1.0, -1.0, 0.0] and np.isnan(d[3])


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
    from probe.metrics.hbb import sampled_estimator_expectation as sx

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
