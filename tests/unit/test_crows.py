"""CrowS-Pairs loader and metric (original metric.py semantics) on hand-made cases."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from probe.data.crows_pairs import load_crows_pairs
from probe.errors import InputError
from probe.metrics.crows import crows_by_type, crows_score

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
