"""`probe report` and the two CrowS-Pairs protocols: each gets its own table; HBB Table 1's CS prefers (a)."""

from __future__ import annotations

import json

from probe.tasks.crows_pairs import layout as ol
from probe.reports.compare.runs import load_run
from probe.reports.compare.tables import Table


def _row(score: float) -> dict:
    return {"bias_type": "all", "score": score, "ci_low": score - 1, "ci_high": score + 1, "n": 10}


def _run(tmp_path, name: str, summary: dict):
    d = tmp_path / name
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({"task": "crows_pairs", "model": name, **summary}))
    r = load_run(d)
    r.label = name
    return r


def test_protocol_selection(tmp_path):
    both = _run(tmp_path, "both", {"protocol": "both", "by_bias_type": [_row(55.0)],
                                   "by_protocol": {"loglik": {"by_bias_type": [_row(55.0)]},
                                                   "mcq": {"by_bias_type": [_row(49.0)]}}})
    old = _run(tmp_path, "old", {"by_bias_type": [_row(60.0)]})  # a run from before the two protocols
    mcq = _run(tmp_path, "mcq", {"protocol": "mcq", "by_bias_type": [_row(48.0)],
                                 "by_protocol": {"mcq": {"by_bias_type": [_row(48.0)]}}})
    runs = [both, old, mcq]
    assert {k: v["all"]["score"] for k, v in ol.crows_scores(runs).items()} == {"both": 49.0, "old": 60.0, "mcq": 48.0}
    assert {k: v["all"]["score"] for k, v in ol.crows_scores(runs, "loglik").items()} == {"both": 55.0, "old": 60.0}
    assert [ol.protocol_of(r.summary) for r in runs] == ["mcq", "loglik", "mcq"]
    # an hbb run's embedded CrowS-Pairs summary is read the same way, once HBB's section hands it over
    hbb = {"task": "hbb", "crows_pairs": {"by_bias_type": [_row(1.0)]}}
    assert ol.protocol_of(hbb["crows_pairs"]) == "loglik"
    assert ol.scores_by_type(hbb["crows_pairs"])["all"]["score"] == 1.0
    assert ol.protocol_of(hbb) is None and ol.scores_by_type(hbb) is None  # the section reads its own part only


def test_one_table_per_protocol_named_in_its_caption(tmp_path):
    runs = [_run(tmp_path, "a", {"protocol": "both", "by_bias_type": [_row(55.0)],
                                 "by_protocol": {"loglik": {"by_bias_type": [_row(55.0)]},
                                                 "mcq": {"by_bias_type": [_row(49.0)]}}})]
    items = ol.crows_section(runs, tmp_path / "out")
    tables = {t.name: t for t in items if isinstance(t, Table)}
    assert set(tables) == {"crows_pairs", "crows_pairs_mcq"}
    assert "(a) two-choice" in tables["crows_pairs_mcq"].title and "(b) whole-sentence causal log-likelihood" in tables["crows_pairs"].title


def test_mcq_table_shows_the_paper_equivalent_beside_the_exact_score(tmp_path):
    runs = [_run(tmp_path, "a", {"protocol": "mcq", "by_bias_type": [{**_row(49.0), "paper_score": 51.25}],
                                 "by_protocol": {"mcq": {"by_bias_type": [{**_row(49.0), "paper_score": 51.25}]}}})]
    t = {x.name: x for x in ol.crows_section(runs, tmp_path / "out") if isinstance(x, Table)}["crows_pairs_mcq"]
    assert t.df.loc[0, "a"].endswith("(n=10); paper-equivalent 51.2") and "T = 0.8" in t.caption
