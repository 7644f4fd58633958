"""CrowS-Pairs loader and metric (original metric.py semantics) on hand-made cases."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from probe.tasks.crows_pairs.data import load_crows_pairs
from probe.errors import InputError
from probe.tasks.crows_pairs.metrics import crows_by_type, crows_score

HEADER = ",sent_more,sent_less,stereo_antistereo,bias_type,annotations,anon_writer,anon_annotators\n"


def test_loader_reads_index_column_and_checks_fields(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text(HEADER + '7,"A, x.",B x.,stereo,age,[],a0,[]\n9,C y.,D y.,antistereo,gender,[],a1,[]\n', encoding="utf-8")
    pairs = load_crows_pairs(p)
    assert [x.id for x in pairs] == ["crows:7", "crows:9"]
    assert pairs[0].sent_more == "A, x." and pairs[1].direction == "antistereo"
    p.write_text(HEADER + "0,A,B,sideways,age,[],a0,[]\n", encoding="utf-8")
    with pytest.raises(InputError, match="line 2, field 'stereo_antistereo'"):
        load_crows_pairs(p)
    p.write_text(HEADER + "0,,B,stereo,age,[],a0,[]\n", encoding="utf-8")
    with pytest.raises(InputError, match="field 'sent_more'"):
        load_crows_pairs(p)


def test_real_file_has_1508_pairs(shared_data):
    pairs = load_crows_pairs(shared_data / "crows_pairs" / "crows_pairs_anonymized.csv")
    assert len(pairs) == 1508
    assert sum(p.direction == "antistereo" for p in pairs) == 218


def test_sent_more_higher_counts_for_both_directions():
    # stereo: more > less counts; antistereo: the original puts sent_less first and counts
    # sent2 (= sent_more) > sent1, i.e. the same event.
    r = crows_score([-1.0, -1.0, -3.0, -3.0], [-2.0, -2.0, -2.0, -2.0], ["stereo", "antistereo", "stereo", "antistereo"])
    assert (r.n, r.n_more, r.score) == (4, 2, 50.0)
    assert r.stereo_score == 50.0 and r.antistereo_score == 50.0
    assert r.ci_low < 50.0 < r.ci_high


def test_ties_are_neutral_in_the_denominator_and_nan_is_invalid():
    r = crows_score([-1.0, -2.0, float("nan")], [-1.0, -3.0, -1.0], ["stereo", "stereo", "antistereo"])
    assert (r.n, r.n_invalid, r.n_neutral, r.n_more) == (2, 1, 1, 1)
    assert r.score == 50.0
    assert r.antistereo_n == 0 and math.isnan(r.antistereo_score)


def test_empty_is_nan_and_bad_direction_raises():
    r = crows_score([], [], [])
    assert r.n == 0 and math.isnan(r.score) and math.isnan(r.ci_low)
    with pytest.raises(ValueError, match="unknown directions"):
        crows_score([1.0], [0.0], ["up"])


def test_by_type_rows():
    df = pd.DataFrame({"ll_more": [-1.0, -5.0, -1.0], "ll_less": [-2.0, -1.0, -3.0],
                       "direction": ["stereo", "stereo", "antistereo"], "bias_type": ["age", "age", "gender"]})
    t = crows_by_type(df).set_index("bias_type")
    assert t.loc["all", "score"] == pytest.approx(200 / 3)
    assert t.loc["age", "score"] == 50.0 and t.loc["gender", "score"] == 100.0


# -- protocol (a): the HBB paper's two-choice question ------------------------------------------------------


def test_mcq_probability_score_argmax_and_ties_by_hand():
    from probe.tasks.crows_pairs.metrics import crows_mcq_score

    # P(sent_more) 0.9, 0.5 (a tie: neutral, in the denominator), 0.2 -> mean 0.5333; argmax 1 of 3
    r = crows_mcq_score([0.9, 0.5, 0.2], ["stereo", "stereo", "antistereo"], n_boot=200)
    assert r.n == 3 and r.n_neutral == 1 and r.n_invalid == 0
    assert r.score == pytest.approx(160 / 3) and r.score_argmax == pytest.approx(100 / 3)
    assert r.stereo_score == pytest.approx(70.0) and r.antistereo_score == pytest.approx(20.0)
    # three pairs: no bootstrap interval (the small-sample rule); Wilson's exact interval at any n
    assert math.isnan(r.ci_low) and math.isnan(r.ci_high) and r.argmax_ci_low < r.score_argmax < r.argmax_ci_high
    big = crows_mcq_score([0.9, 0.5, 0.2] * 4, ["stereo", "stereo", "antistereo"] * 4, n_boot=200)
    assert big.ci_low <= big.score <= big.ci_high
    # no masses given: no refusal numbers, every pair "answers"
    assert r.n_questions == 0 and math.isnan(r.share_refused) and r.n_answering == 3


def test_mcq_refusals_on_the_floor_and_answering_only_score():
    from probe.tasks.crows_pairs.metrics import crows_mcq_score

    # masses per pair (two orders); exactly on the floor answers, below it is a refusal
    r = crows_mcq_score([0.8, 0.4, float("nan")], ["stereo", "antistereo", "stereo"], p_more_a=[0.9, 0.1, 0.7],
                        masses=[[0.1, 0.5], [0.0999, 0.3], [0.2, float("nan")]], floor=0.1, n_boot=0)
    assert (r.n, r.n_invalid) == (2, 1) and r.score == pytest.approx(60.0)
    assert r.score_a_more == pytest.approx(100 * (0.9 + 0.1 + 0.7) / 3)  # the a) = sent_more order alone
    assert r.n_questions == 6 and r.n_refused == 2 and r.share_refused == pytest.approx(100 * 2 / 6)  # NaN mass too
    assert r.mean_mass == pytest.approx((0.1 + 0.5 + 0.0999 + 0.3 + 0.2) / 5)
    assert r.n_answering == 1 and r.score_answering == pytest.approx(80.0)
    assert math.isnan(r.ci_low)  # n_boot = 0: no CI


def test_mcq_empty_and_bad_input():
    from probe.tasks.crows_pairs.metrics import crows_mcq_by_type, crows_mcq_score

    r = crows_mcq_score([], [], n_boot=10)
    assert r.n == 0 and math.isnan(r.score) and math.isnan(r.score_argmax) and math.isnan(r.ci_low)
    with pytest.raises(ValueError, match="unknown directions"):
        crows_mcq_score([0.5], ["up"])
    with pytest.raises(ValueError, match="same length"):
        crows_mcq_score([0.5, 0.6], ["stereo"])
    df = pd.DataFrame({"p_more": [1.0, 0.0, 0.75], "p_more_a": [1.0, 0.0, 0.5], "masses": [[1.0], [1.0], [0.01]],
                       "direction": ["stereo"] * 3, "bias_type": ["age", "age", "race"]})
    t = crows_mcq_by_type(df, n_boot=0).set_index("bias_type")
    assert t.loc["all", "score"] == pytest.approx(175 / 3) and t.loc["age", "score"] == 50.0
    assert t.loc["race", "n_refused"] == 1 and math.isnan(t.loc["race", "score_answering"])


def test_paper_equivalent_score_by_hand():
    """The HBB paper's sampled CS score (one answer per question at T = 0.8, non-labels dropped), in expectation."""
    import math

    from probe.tasks.crows_pairs.task import paper_equivalent_score

    # sum s_more / sum (s_more + s_less): (0.6 + 0.2) / (0.8 + 0.4)
    assert paper_equivalent_score([0.6, 0.2], [0.2, 0.2]) == pytest.approx(100 * 0.8 / 1.2)
    # a question with no label mass adds nothing; a NaN row (not sampled) is left out
    assert paper_equivalent_score([0.5, 0.0, math.nan], [0.5, 0.0, 0.3]) == pytest.approx(50.0)
    assert math.isnan(paper_equivalent_score([0.0], [0.0])) and math.isnan(paper_equivalent_score([], []))
    with pytest.raises(ValueError, match="same length"):
        paper_equivalent_score([0.1], [0.1, 0.2])


def test_paper_equivalent_columns_from_records():
    """Tempered label probabilities x mass per order -> paper_score (both orders pooled), paper_score_a_more."""
    from probe.runs.record import records_to_frame
    from probe.tasks.crows_pairs.task import crows_summary

    spec = {"temperature": 0.8, "top_p": 1.0}
    # (pair, kind, exact probs, tempered probs, tempered mass)
    rows = [("crows:0", "crows_mcq", (0.8, 0.2), (0.9, 0.1), 0.5),       # a) = more: s_more .45, s_less .05
            ("crows:0", "crows_mcq_swap", (0.6, 0.4), (0.7, 0.3), 1.0),  # a) = less: s_more .3, s_less .7
            ("crows:1", "crows_mcq", (0.3, 0.7), (0.2, 0.8), 0.5)]       # s_more .1, s_less .4
    recs = records_to_frame([{"id": f"{p}|{k}", "kind": "label", "probs": pr, "mass": 0.5, "finite": True,
                              "sampling": [{**spec, "probs": list(tp), "mass": tm}],
                              "meta": {"kind": k, "pair_id": p, "bias_type": "age", "direction": "stereo"}}
                             for p, k, pr, tp, tm in rows])
    summary, table = crows_summary(recs, "mcq", n_boot=0, paper=spec)
    a = summary["by_bias_type"][0]
    assert a["paper_score_a_more"] == pytest.approx(100 * (0.45 + 0.1) / (0.5 + 0.5))
    assert a["paper_score"] == pytest.approx(100 * (0.45 + 0.1 + 0.3) / (0.5 + 0.5 + 1.0))
    assert summary["paper_equivalent"]["temperature"] == 0.8 and "paper_score" in table.columns
    # without the spec: no paper-equivalent columns (runs scored without the paper's sampling)
    plain, t2 = crows_summary(recs, "mcq", n_boot=0)
    assert "paper_score" not in plain["by_bias_type"][0] and "paper_equivalent" not in plain
