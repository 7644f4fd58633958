"""``--limit N`` is a stratified sample in every task, whole units kept, and says what it covered."""

from __future__ import annotations

import pytest

from probe.tasks import get
from probe.tasks.stratify import coverage, coverage_line, stratified_limit


def _strata(items):
    return [(s, t) for s, t, _ in items]


ITEMS = [(s, t, f"{s}{t}{k}") for s in "abc" for t in "xy" for k in range(3)]


def test_round_robin_covers_every_outer_stratum_first():
    got = stratified_limit(ITEMS, 3, _strata(ITEMS))
    assert sorted(s for s, _, _ in got) == ["a", "b", "c"]
    six = stratified_limit(ITEMS, 6, _strata(ITEMS))
    assert {(s, t) for s, t, _ in six} == {(s, t) for s in "abc" for t in "xy"}  # inner strata spread too
    assert six[:3] == got  # a smaller limit is a prefix of a larger one


def test_units_are_kept_whole_and_no_limit_keeps_everything():
    units = [f"{s}{t}" for s, t, _ in ITEMS]  # 3 items a unit
    got = stratified_limit(ITEMS, 7, _strata(ITEMS), units)
    assert len(got) == 6 and all(units.count(u) == 3 for u in {f"{s}{t}" for s, t, _ in got})
    assert len(stratified_limit(ITEMS, 2, _strata(ITEMS), units)) == 2  # a limit under one unit: never exceeded
    assert stratified_limit(ITEMS, None, _strata(ITEMS), units) == ITEMS


def test_seeded_order_within_strata_is_stable():
    a = stratified_limit(ITEMS, 6, _strata(ITEMS), seed=1)
    assert a == stratified_limit(ITEMS, 6, _strata(ITEMS), seed=1)
    assert {(s, t) for s, t, _ in a} == {(s, t) for s in "abc" for t in "xy"}


def test_coverage_names_what_is_covered_and_left_out():
    got = stratified_limit(ITEMS, 2, _strata(ITEMS))
    cov = coverage(ITEMS, got, ("letter", "side"), _strata, limit=2, unit="item")
    assert cov["n_items"] == 2 and cov["n_available"] == 18 and cov["n_left_out"] == 16
    assert cov["strata"]["letter"]["n_covered"] == 2 and cov["strata"]["letter"]["left_out"] == ["c"]
    assert cov["cells"]["n_total"] == 6
    line = coverage_line("t", cov)
    assert line.startswith("t --limit 2: 2 of 18 items") and "left out: c" in line
    worded = coverage_line("t", cov, terms={"letter": "first letter", "c": "the letter c"})
    assert "first letter: 2 of 3 covered" in worded and "left out: the letter c" in worded


def test_coverage_line_names_strata_with_underscores_in_words():
    cov = {"n_items": 1, "n_available": 9, "limit": 1, "strata": {
        "context_kind": {"covered": {"de_gen": 1}, "n_covered": 1, "n_total": 2, "left_out": ["dt_tox"]}},
        "cells": {"by": "context_kind x bias_type", "n_covered": 1, "n_total": 4}}
    line = coverage_line("t", cov, terms={"de_gen": "DE-Gen", "dt_tox": "DT-Tox"})
    assert "context kind: 1 of 2 covered (DE-Gen 1); left out: DT-Tox" in line
    assert "context kind x bias type: 1 of 4 combinations covered" in line and "_" not in line.split(":", 1)[1]


@pytest.mark.parametrize("task, options, limit, stratum, least", [
    ("bbq", {}, 24, "category", 6),
    ("hbb", {"hbb_sg": False}, 20, "bias_type", 8),
    ("crows_pairs", {}, 18, "bias_type", 6),
    ("implicitbbq", {"strategies": ["zero_shot"]}, 24, "dimension", 6),
    ("cmp_iso", {}, 8, "benchmark", 8),
])
def test_small_limits_cover_the_strata(shared_data, task, options, limit, stratum, least):
    t = get(task)
    cfg = t.make_config(options)
    pool = t.items(cfg)
    chosen = t.selection.select(cfg, pool, limit)
    cov = t.selection.coverage(cfg, t.selection.select(cfg, pool, None), chosen, limit)
    assert len(chosen) <= limit and cov["n_items"] == len(chosen)
    assert cov["strata"][stratum]["n_covered"] >= least, cov["strata"][stratum]


def test_run_records_and_prints_the_coverage(tiny_lm, tmp_path, capsys):
    import json

    import probe

    e = probe.evaluate(tiny_lm, "demo", limit=8, output=tmp_path / "run", progress=False)
    cov = e.summary["coverage"]
    assert cov["n_items"] == 8 and cov["strata"]["dimension"]["n_covered"] == 2
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["coverage"] == json.loads(json.dumps(cov))
    assert "demo --limit 8: 8 of 64 items" in capsys.readouterr().err
