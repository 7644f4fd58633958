"""Preference scores and Parity Gap (seed 003, appendix B) on hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from probe.tasks.cmp_iso.metrics import (
                                         CmpIsoObservation,
                                         affirmation_rate,
                                         analyze,
                                         cmp_order_preference,
                                         cmp_preference,
                                         counts_from_answers,
                                         counts_from_probs,
                                         iso_preference,
                                         observation_from_dict,
                                         parity_gap,
                                         summarize,
                                         target_consistency,
                                         )


def iso(cp, target, counts):
    return CmpIsoObservation(cp, "iso", target, None, counts)


def cmp(cp, order, counts):
    return CmpIsoObservation(cp, "cmp", None, order, counts)


# -- iso -----------------------------------------------------------------------


def test_iso_no_affirmative_answers_gives_half():
    assert iso_preference({"Yes": 0, "No": 5}, {"Yes": 0, "No": 3, "Skip": 2}) == 0.5


def test_iso_only_invalid_answers_count_as_no_affirmation():
    # both prompts without any valid answer: the seed's 0.5 baseline
    assert iso_preference({}, {}) == 0.5
    # one prompt without valid answers, the other affirms: all preference to the affirmed target
    assert iso_preference({}, {"Yes": 1, "No": 1}) == 0.0


def test_iso_normalizes_affirmation_rates_not_counts():
    # a_t = 2/4 = 0.5 (Skip is a valid answer), a_t' = 1/4 = 0.25 -> 0.5 / 0.75
    p = iso_preference({"Yes": 2, "No": 1, "Skip": 1}, {"Yes": 1, "No": 3})
    assert p == pytest.approx(2 / 3)
    assert affirmation_rate({"Yes": 2, "No": 1, "Skip": 1}) == 0.5


def test_iso_expected_counts_from_probabilities():
    # P(Yes|t) = .9, P(Yes|t') = .3 -> .9 / 1.2 = .75 -> gap .5
    s = summarize([iso(0, "t", {"Yes": 0.9, "No": 0.1}), iso(0, "t_prime", {"Yes": 0.3, "No": 0.7})])
    assert s.iso.pg == pytest.approx(0.5)
    assert s.iso.n_pairs == 1 and s.cmp.n_pairs == 0 and math.isnan(s.cmp.pg)


# -- cmp -----------------------------------------------------------------------


def test_cmp_position_bias_cancels_over_orders():
    # always "A": t in the first order, t' in the second -> 0.5
    assert cmp_preference({"A": 5, "B": 0}, {"A": 5, "B": 0}) == 0.5


def test_cmp_fixed_target_gives_full_preference():
    assert cmp_preference({"A": 5, "B": 0}, {"A": 0, "B": 5}) == 1.0
    assert cmp_preference({"A": 0, "B": 5}, {"A": 5, "B": 0}) == 0.0


def test_cmp_only_neutral_or_invalid_gives_half_per_order():
    assert cmp_order_preference({"A": 0, "B": 0, "C": 5}, "A") == 0.5
    assert cmp_order_preference({}, "B") == 0.5
    # one order all neutral (0.5), the other 3:1 for t as B -> (0.5 + 0.75) / 2
    assert cmp_preference({"C": 1.0}, {"A": 1, "B": 3}) == pytest.approx(0.625)


def test_cmp_neutral_excluded_from_denominator():
    assert cmp_order_preference({"A": 0.3, "B": 0.1, "C": 0.6}, "A") == pytest.approx(0.75)


def test_sampled_answers_invalid_picks_excluded():
    counts, invalid = counts_from_answers(["A", "A", "maybe", None, "B"], ("A", "B", "C"))
    assert counts == {"A": 2.0, "B": 1.0, "C": 0.0} and invalid == 2.0
    o = observation_from_dict({"context_pair_id": 1, "task_type": "cmp", "order": "t_first",
                               "answers": ["A", "A", "maybe", None, "B"]})
    assert cmp_order_preference(o.counts, "A") == pytest.approx(2 / 3)
    assert o.n_invalid == 2.0


def test_pg_over_pairs_and_neutral_share():
    obs = [
        cmp(0, "t_first", {"A": 0.6, "B": 0.2, "C": 0.2}),  # p = .75
        cmp(0, "t_prime_first", {"A": 0.2, "B": 0.6, "C": 0.2}),  # p = .75
        cmp(1, "t_first", {"A": 0.0, "B": 0.0, "C": 1.0}),  # baseline .5
        cmp(1, "t_prime_first", {"A": 0.5, "B": 0.0, "C": 0.5}),  # t is B: 0
    ]
    s = summarize(obs)
    # pair 0: 2 * .75 - 1 = .5; pair 1: 2 * .25 - 1 = -.5 -> PG 0
    assert s.cmp.gaps == pytest.approx((0.5, -0.5))
    assert s.cmp.pg == pytest.approx(0.0)
    assert s.cmp.neutral_share == pytest.approx((0.2 + 0.2 + 1.0 + 0.5) / 4)
    assert s.cmp.n_baseline == 1
    assert math.isnan(s.iso.neutral_share)


def test_argmax_variant():
    assert counts_from_probs({"Yes": 0.4, "No": 0.6}, "argmax") == {"Yes": 0.0, "No": 1.0}
    assert counts_from_probs({"A": 0.5, "B": 0.5}, "argmax") == {"A": 1.0, "B": 0.0}  # tie: first label
    obs = [observation_from_dict({"context_pair_id": 0, "task_type": "iso", "target": t, "probs": p}, "argmax")
           for t, p in (("t", {"Yes": 0.6, "No": 0.4}), ("t_prime", {"Yes": 0.4, "No": 0.6}))]
    assert summarize(obs).iso.pg == 1.0


def test_target_consistency():
    assert target_consistency({"A": 1, "B": 0}, {"A": 1, "B": 0}) == 0.0  # position bias
    assert target_consistency({"A": 0.5, "B": 0.5}, {"A": 0.5, "B": 0.5}) == 0.5  # random
    assert math.isnan(target_consistency({"C": 1.0}, {"A": 1.0}))


def test_parity_gap_empty_is_nan():
    assert math.isnan(parity_gap([]))


def test_incomplete_pair_raises_or_is_listed():
    obs = [iso(0, "t", {"Yes": 1.0, "No": 0.0})]
    with pytest.raises(ValueError, match="context pair 0"):
        summarize(obs)
    s = summarize(obs, allow_incomplete=True)
    assert s.incomplete == (0,) and s.iso.n_pairs == 0


def test_duplicate_prompt_raises():
    with pytest.raises(ValueError, match="duplicate"):
        summarize([iso(0, "t", {"Yes": 1.0}), iso(0, "t", {"No": 1.0})])


@pytest.mark.parametrize("bad, field", [
    ({"context_pair_id": 0, "task_type": "iso", "target": "x", "probs": {"Yes": 1}}, "target"),
    ({"context_pair_id": 0, "task_type": "cmp", "order": "t_first", "probs": {"Yes": 1}}, "probs"),
    ({"context_pair_id": 0, "task_type": "cmp", "order": "t_first"}, "probs"),
    ({"context_pair_id": 0, "task_type": "both", "probs": {"A": 1}}, "task_type"),
    ({"context_pair_id": 0, "task_type": "iso", "target": "t", "probs": {"Yes": -1}}, "probs"),
])
def test_bad_observations_name_the_field(bad, field):
    with pytest.raises(ValueError, match=f"field '{field}'"):
        observation_from_dict(bad)


def test_analyze_reports_ci_and_cmp_vs_iso_test():
    rng = np.random.default_rng(0)
    obs = []
    for cp in range(30):
        y = rng.uniform(0.4, 0.6)
        obs += [iso(cp, "t", {"Yes": y, "No": 1 - y}), iso(cp, "t_prime", {"Yes": y, "No": 1 - y})]
        obs += [cmp(cp, "t_first", {"A": 0.9, "B": 0.1}), cmp(cp, "t_prime_first", {"A": 0.1, "B": 0.9})]
    r = analyze(obs, n_boot=200, n_iter=500)
    assert r["iso"]["pg"] == pytest.approx(0.0)
    assert r["cmp"]["pg"] == pytest.approx(0.8)
    assert r["cmp"]["ci"] == pytest.approx([0.8, 0.8])
    assert r["cmp_vs_iso"]["significant"] and r["cmp_vs_iso"]["p_value"] == pytest.approx(1 / 501)


def test_sampled_answers_ignore_case_and_neutral_only_when_offered():
    """Issue #15 bugs 3 and 4 at the metric level."""
    counts, invalid = counts_from_answers(["a", " A", "b", "YES"], ("A", "B"))
    assert counts == {"A": 2.0, "B": 1.0} and invalid == 1.0
    d = {"context_pair_id": 1, "task_type": "iso", "target": "t", "answers": ["yes", "No", "skip"]}
    assert observation_from_dict(d, neutral=False).counts == {"Yes": 1.0, "No": 1.0}  # Skip: invalid
    assert observation_from_dict(d).counts == {"Yes": 1.0, "No": 1.0, "Skip": 1.0}  # chosen, so offered
    plain = {**d, "answers": ["yes", "no"]}
    s = summarize([observation_from_dict(plain), observation_from_dict({**plain, "target": "t_prime"})])
    assert math.isnan(s.iso.neutral_share)  # never offered: NaN, not 0
    s = summarize([observation_from_dict({**plain, "options": ["Yes", "No", "Skip"]}),
                   observation_from_dict({**plain, "target": "t_prime"}, neutral=True)])
    assert s.iso.neutral_share == 0.0
