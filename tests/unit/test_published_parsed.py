"""The published sampled-and-parsed numbers: the hybrid as the headline, its interval around its point, the
certified interval in its own columns, and no number from nothing (HBB's count where nothing parsed)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest


def _hbb(parsed_of):
    """Four instances (8 questions) of one category, each question's parse record from ``parsed_of(i)``."""
    qs = [f"q{i}" for i in range(8)]
    records = pd.DataFrame({"question_id": qs, "meta.kind": ["mcq"] * 8, "parsed": [parsed_of(i) for i in range(8)]})
    inst = pd.DataFrame({"q1": qs[0::2], "q2": qs[1::2], "category": ["ses"] * 4})
    config = SimpleNamespace(paper_samples=10, threshold=20.0, sample_seed=0)
    return config, records, inst


def _nothing(i):
    return {"probs": {}, "rejected": 0.02, "residual": 0.98, "hybrid": {"n_tail": 10, "tail": {"none": 10}}}


def test_hbb_count_from_nothing_is_undefined_with_its_reason():
    from probe.tasks.hbb.hybrid import published_counts

    out = published_counts(*_hbb(_nothing))
    a = out["all"]
    assert math.isnan(a["expected_count"]) and all(math.isnan(x) for x in a["ci"])
    assert a["n"] == 0 and a["n_undefined"] == 4 and a["undefined"] == "n/a: nothing parsed, 8 of 8 questions"
    assert out["by_category"]["ses"]["undefined"] == "n/a: nothing parsed, 8 of 8 questions"


def test_hbb_count_interval_holds_tail_and_ten_sample_noise_around_its_point():
    from probe.tasks.hbb.hybrid import published_counts

    def parsed(i):  # a) twice as often in q1 as in q2: S well above 20 in expectation, not certain
        a = 0.5 if i % 2 == 0 else 0.2
        return {"probs": {"0": a, "1": 0.7 - a}, "rejected": 0.1, "residual": 0.2,
                "hybrid": {"n_tail": 2, "tail": {"0": 1, "none": 1}}}

    out = published_counts(*_hbb(parsed))
    a = out["all"]
    lo, hi = a["ci"]
    assert 0 < a["expected_count"] < 4 and lo < a["expected_count"] < hi and a["n"] == 4
    assert "hybrid" in out["estimator"] and "undefined" not in a


def test_nothing_parsed_reads_na_with_its_reason_in_results_headline_and_terminal():
    from probe.reports.headline import headline_table
    from probe.reports.terminal import terminal_text
    from probe.runs.results import COLUMNS, results_frame
    from probe.tasks.hbb.hybrid import published_counts
    from probe.tasks.hbb.reporting import _parsed_rows

    pub = published_counts(*_hbb(_nothing))
    for g in [pub["all"], *pub["by_category"].values()]:
        g["certified"] = [0.0, 4.0]
    parsed = {"settings": {"samples": 10, "threshold": 20.0}, "published": pub,
              "all": {"expected_count": 0.0, "n": 4}}
    rows = [{"task": "hbb", "model": "m", **r} for r in _parsed_rows(parsed)]
    head = [r for r in rows if r["headline"]]
    assert len(head) == 1 and "hybrid" in head[0]["estimator"]
    frame = results_frame(rows)
    assert {"certified_low", "certified_high", "undefined"} <= set(COLUMNS)
    first = frame.iloc[0]
    # the CI columns hold statistical intervals only; the certified interval has its own
    assert math.isnan(first.value) and math.isnan(first.ci_low) and math.isnan(first.ci_high)
    assert (first.certified_low, first.certified_high) == (0.0, 4.0)
    assert first.undefined == "n/a: nothing parsed, 8 of 8 questions"
    sens = frame[frame.estimator.str.contains("sensitivity")]
    assert len(sens) == 1 and math.isnan(sens.iloc[0].ci_low)  # the rule: a sensitivity, no interval
    cell = headline_table(rows)["Value [95% CI] (n)"].iloc[0]
    assert cell == "n/a: nothing parsed, 8 of 8 questions (n = 0)"
    assert "n/a: nothing parsed, 8 of 8 questions" in terminal_text(headline_table(rows), [])


def test_cmp_iso_cell_rests_on_nothing():
    from probe.tasks.cmp_iso.parsed import _cell, parsed_table

    rows = [{"gap": 0.0, "gap_certified": [-1.0, 1.0]}] * 3
    c = _cell("direct", "bbq", "iso", rows, (math.nan, [math.nan, math.nan], 0))
    assert math.isnan(c["pg"]) and c["undefined"] == "n/a: nothing parsed, 3 of 3 context pairs"
    assert c["n_pairs_undefined"] == 3 and c["pg_rule"] == 0.0
    table = parsed_table({"by_cell": [c]}, "m")
    assert table["PG iso hybrid"].iloc[0] == "n/a: nothing parsed, 3 of 3 context pairs"
    ok = _cell("direct", "bbq", "iso", rows, (0.1, [0.02, 0.18], 3))
    assert ok["pg"] == 0.1 and ok["pg_ci"] == [0.02, 0.18] and "undefined" not in ok
    assert parsed_table({"by_cell": [ok]}, "m")["PG iso hybrid"].iloc[0] == "0.1000 [0.0200, 0.1800]"


@pytest.mark.parametrize("residual, k, want", [(0.0, 25, 0), (0.01, 25, 0), (0.04, 25, 1), (0.3, 25, 8),
                                               (0.999, 10, 10)])
def test_tail_size_grows_with_the_residual(residual, k, want):
    from probe.scoring.parse.hybrid import tail_budget

    assert tail_budget(residual, 0.01, k) == want


def _ibbq_records(n=40):
    """ImplicitBBQ-like parse records: half ambiguous, each with an open head and a few tail draws."""
    out = []
    for i in range(n):
        amb = i % 2 == 0
        parsed = {"probs": {"0": 0.3, "1": 0.2}, "rejected": 0.1, "residual": 0.4, "nodes": 50,
                  "hybrid": {"n_tail": 8, "tail": {"0": 3, "2": 2, "none": 3}}}
        out.append({"id": f"r{i}", "item_id": f"i{i}", "strategy": "zero_shot", "answer_format": "oneword",
                    "dimension": "age" if i < n // 2 else "gender", "category": "x", "setting": "s",
                    "context_kind": "implicit", "context_condition": "ambig" if amb else "disambig",
                    "question_polarity": "neg", "label": 2 if amb else 0, "target_index": 0, "unknown_index": 2,
                    "template_id": f"t{i}", "cue1": "", "cue2": "", "target_group": "", "parsed": parsed})
    return out


def test_implicitbbq_parsed_records_use_the_hybrid_and_its_tail_widens_the_interval():
    from probe.tasks.implicitbbq.summary import parsed_metric_records, with_tail_uncertainty
    from probe.tasks.implicitbbq.tables import summarize

    recs = _ibbq_records()
    empty = {**recs[0], "id": "none", "parsed": {"probs": {}, "rejected": 0.1, "residual": 0.9, "nodes": 50,
                                                 "hybrid": {"n_tail": 9, "tail": {"none": 9}}}}
    out, cert, stats = parsed_metric_records(recs + [empty], 0.05)
    # the hybrid: head 0.3 / 0.2 / 0 plus 0.4 x (3 / 8, 0, 2 / 8), given a parse
    assert out[0]["probs"] == pytest.approx([0.45 / 0.75, 0.2 / 0.75, 0.1 / 0.75])
    assert stats["n_no_parsed_answer"] == 1 and len(out) == 40 and len(cert) == 41  # nothing parsed: left out
    for i, r in enumerate(out):
        r["cluster"] = f"c{i}"
    by = summarize(out, n_boot=50, seed=0, cluster_key="cluster")
    before = {k: list(v) for k, v in by["zero_shot|oneword"]["implicit"]["expected"]["pooled"]["ci"].items()}
    with_tail_uncertainty(by, out, seed=0)
    e = by["zero_shot|oneword"]["implicit"]["expected"]
    checked = 0
    for k in ("acc_amb", "bias_amb", "acc_dis", "bias_dis"):
        lo, hi = e["pooled"]["ci"][k]
        if all(math.isfinite(x) for x in before[k]):
            assert lo < before[k][0] and hi > before[k][1] and lo < e["pooled"][k] < hi
            checked += 1
    assert checked >= 2 and "tail_se" not in e["pooled"]
