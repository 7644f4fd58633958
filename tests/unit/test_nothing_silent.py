"""Nothing lost, nothing silent (hostile inputs, round 5): every long stage announced and moving, plans that hold
within 2x and are revised on screen when they do not, no empty folder from an interrupted run, a representative
small ``--limit`` for ImplicitBBQ, and one word per meaning in what a reader reads (``tools/check_reports.py``)."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

import pytest

import probe
from probe.progress import stage


# --- every stage over a few seconds announces itself and moves ------------------------------------------------

def test_a_long_stage_is_announced_before_it_starts_and_ticks_while_it_runs():
    out = io.StringIO()
    with stage("bbq: plan: tokenizing", total=10, unit="request(s)", every=0.05, stream=out) as s:
        assert out.getvalue() == "bbq: plan: tokenizing (10 request(s)) ...\n"  # before any work
        s.advance(4)
        s.note("the second chunk")
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert any("4 of 10 request(s)" in x and "s so far" in x and "the second chunk" in x for x in lines[1:-1]), lines
    assert lines[-1].startswith("bbq: plan: tokenizing: done in")


def test_a_stage_of_unknown_length_speaks_only_when_it_is_slow():
    quick, slow = io.StringIO(), io.StringIO()
    with stage("bbq: reading the items", announce_after=0.2, stream=quick):
        pass
    with stage("bbq: reading the items", announce_after=0.05, every=0.05, stream=slow):
        time.sleep(0.25)
    assert quick.getvalue() == ""
    assert slow.getvalue().startswith("bbq: reading the items ...\nbbq: reading the items: ")


def test_gguf_conversion_names_its_step_at_least_every_tick(tmp_path, monkeypatch, capsys):
    """The first gemma load was 82 s silent between "converting" and the first bar."""
    import probe.models.loader as loader
    import probe.progress as progress

    monkeypatch.setenv("PROBE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(progress, "TICK", 0.05)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))

    def convert(gguf, target, sha, note=lambda s: None):
        note("reading the tokenizer from the GGUF file")
        time.sleep(0.3)

    monkeypatch.setattr(loader, "_convert_gguf", convert)
    loader.converted_gguf_dir(gguf)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("probe: converting m.gguf once (") and loader.CONVERSION_TIME in err[0]
    assert any("s so far; reading the tokenizer from the GGUF file" in x for x in err[1:]), err


def test_a_big_plan_announces_its_tokenizing_with_counts(tiny_lm, tmp_path, monkeypatch, capsys):
    """``probe run bbq`` without --limit printed nothing for 266 s: every request is tokenized for the plan."""
    import probe.runs.stages as stages

    monkeypatch.setattr(stages, "ANNOUNCE_REQUESTS", 0)
    probe.evaluate(tiny_lm, "demo", limit=4, output=tmp_path / "run", progress=False, threads=1)
    err = capsys.readouterr().err
    assert "demo: plan: tokenizing the requests to count their tokens (4 request(s)) ..." in err
    assert "demo: building the requests (4 item(s)) ..." in err
    assert err.index("tokenizing the requests") < err.index("demo: plan: 4 item(s)")


# --- plans within 2x -------------------------------------------------------------------------------------------

def test_the_plan_counts_the_tokens_the_engine_computes_not_every_sequence_in_full(tiny_lm):
    """BBQ's plan counted 3,370 tokens where the prefix tree computes 1,743: plans ran 2-7x long."""
    from probe.runs.plan import computed_tokens, scoring_tokens
    from probe.runs.runner import Runner
    from probe.scoring.requests import LabelRequest

    system = "A long shared instruction that every question of this benchmark starts with. " * 4
    reqs = [LabelRequest(f"q{i}", system + f"Question {i}: who? Answer:", ("A", "B", "C")) for i in range(6)]
    runner = Runner(tiny_lm)
    raw = scoring_tokens(runner.scorer.encode, reqs, set())
    computed = computed_tokens(runner.scorer, reqs, set(), 1024)
    assert 0 < computed < raw / 2  # the shared instruction once
    assert computed_tokens(runner.scorer, reqs, {r.id for r in reqs}, 1024) == 0
    runner.scorer.score(reqs)
    assert runner.scorer.engine.counts()["tokens_computed"] == computed  # what timing.json will say


def _plan_runner(per_token: float, tokens: int = 1000):
    from probe.runs.plan import Rates
    from probe.runs.plan_check import Planned

    scorer = SimpleNamespace(encode=lambda r: r, rows=lambda enc: [SimpleNamespace(ids=(0,) * 100) for _ in enc],
                             plan=lambda enc: [SimpleNamespace(width=100, children=[]) for _ in enc],
                             engine=SimpleNamespace(capabilities=SimpleNamespace(scoring_path="packed")))
    return SimpleNamespace(scorer=scorer, procs=SimpleNamespace(is_main=True),
                           plan_rates=Rates(per_token, per_token, 1, "a calibration pass"),
                           planned=Planned("bbq", tokens, per_token))


def test_a_plan_off_by_more_than_2x_is_revised_after_the_first_chunk(capsys):
    from probe.runs.plan_check import PlanCheck

    part = [SimpleNamespace(id=f"r{i}") for i in range(2)]  # 200 tokens of the 1000 planned
    slow = _plan_runner(per_token=0.001)  # planned 0.2 s for the chunk
    line = PlanCheck(slow, "bbq", True).check(part, 5.0)
    assert line == "bbq: plan revised: the first 2 request(s) took 5 s where the plan expected ~1 s; the rest now " \
                   "estimated ~20 s."
    assert line in capsys.readouterr().err
    assert slow.plan_rates.token == pytest.approx(5.0 / 200)  # the next task's plan starts from what was measured
    fast = _plan_runner(per_token=0.1)  # planned 20 s, took 3 s: revised too
    assert "took 3 s where the plan expected ~20 s" in PlanCheck(fast, "bbq", True).check(part, 3.0)
    close = _plan_runner(per_token=0.02)  # planned 4 s, took 5 s: the plan holds
    assert PlanCheck(close, "bbq", True).check(part, 5.0) is None
    assert PlanCheck(_plan_runner(0.001), "bbq", True).check(part, 0.5) is None  # too short to time


def test_a_run_times_its_first_chunk_against_its_plan(tiny_lm, tmp_path, monkeypatch):
    import probe.runs.plan_check as plan_check

    seen = []
    real = plan_check.PlanCheck.check
    monkeypatch.setattr(plan_check.PlanCheck, "check", lambda self, part, s: seen.append((self.planned, len(part)))
                        or real(self, part, s))
    probe.evaluate(tiny_lm, "demo", limit=4, output=tmp_path / "run", progress=False, threads=1, chunk_size=2)
    assert len(seen) == 1 and seen[0][0].task == "demo" and seen[0][0].tokens > 0 and seen[0][1] >= 1


# --- an interrupted run leaves no empty folder -----------------------------------------------------------------

def test_a_run_interrupted_before_its_first_record_leaves_no_folder(tiny_lm, tmp_path, monkeypatch):
    import probe.runs.task_run as task_run

    def interrupted(run):
        assert run.out.is_dir()  # the lock made it
        raise KeyboardInterrupt

    monkeypatch.setattr(task_run, "score", interrupted)
    out = tmp_path / "new" / "deeper" / "run"
    with pytest.raises(KeyboardInterrupt):
        probe.evaluate(tiny_lm, "demo", limit=4, output=out, progress=False, threads=1)
    assert not (tmp_path / "new").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    with pytest.raises(KeyboardInterrupt):
        probe.evaluate(tiny_lm, "demo", limit=4, output=mine / "run", progress=False, threads=1)
    assert mine.is_dir() and not (mine / "run").exists()  # a folder the user made stays


# --- --limit at small n: ImplicitBBQ ----------------------------------------------------------------------------

def test_implicitbbq_limit_4_covers_both_context_kinds_and_four_dimensions(capsys):
    from probe.runs.limit import select_coverage
    from probe.tasks import get

    task = get("implicitbbq")
    config = task.make_config({})
    pool = task.items(config)
    sel = task.selection.select(config, pool, 4)
    assert len(sel) == 4
    assert {"explicit", "implicit"} <= {it.context_kind for it in sel}  # before: one explicit unit
    assert len({it.category for it in sel}) == 4  # before: 1 of 6 dimensions
    assert len({tuple(it.id.rsplit("-", 2)[1:]) for it in sel}) == 4  # every condition x polarity
    assert {it.id for it in sel} <= {it.id for it in task.selection.select(config, pool, 8)}  # nested
    big = task.selection.select(config, pool, 200)
    units = {it.id.rsplit("-", 2)[0] for it in big}
    assert all(sum(it.id.rsplit("-", 2)[0] == u for it in big) == 4 for u in units)  # whole units again
    select_coverage(task, config, pool, sel, 4)
    line = capsys.readouterr().err
    assert "dimension: 4 of 6 covered" in line and "4 context units, 4 of them only in part" in line


# --- one word per meaning ---------------------------------------------------------------------------------------

def test_a_zero_width_interval_is_said_in_words():
    from probe.reports.compare.tables import ci_cell

    assert ci_cell(0.0, 0.0, 0.0, 96, clusters=24) == "0.000 [no variation across 24 clusters] (n = 96)"
    assert ci_cell(0.5, 0.5, 0.5, 24, clusters=1) == "0.500 [n/a (1 unit)] (n = 24)"
    assert ci_cell(0.0, 0.0, 0.138, 24) == "0.000 [0.000, 0.138] (n = 24)"


def test_the_paired_table_counts_in_the_tasks_word_and_says_no_variation():
    import pandas as pd

    from probe.reports.compare.paired import compare
    from probe.tasks.hbb.sections import hbb_spec

    spec = hbb_spec(20.0)
    rows = [{"unit": i, "block": "b", "category": "c", "cluster": i // 4, "n": 1.0, "over": 0.0, "s_over": 0.0,
             "s": 1.0, "binary": 0} for i in range(96)]
    t = compare(pd.DataFrame(rows), pd.DataFrame(rows), spec, n_boot=50)["b"]
    assert "n test instances" in t.columns and "n units" not in t.columns
    cell = t.loc[t.Category == "all", [c for c in t.columns if c.startswith("Δ mean S [")][0]].iloc[0]
    assert cell == "+0.00 [no variation across 24 clusters]"
    few = compare(pd.DataFrame(rows[:4]), pd.DataFrame(rows[:4]), spec, n_boot=50)["b"]
    assert few.loc[0, [c for c in few.columns if c.startswith("Δ mean S [")][0]] == "+0.00 [n/a (1 cluster)]"


def test_hbb_descriptors_are_named_and_the_coverage_warning_agrees_with_the_line():
    from probe.reports.headline import report_warnings
    from probe.tasks import get
    from probe.tasks.stratify import coverage_line

    terms = dict(get("hbb").reporting.terms)
    assert terms["Age 1"] == "age by life stage" and terms["Religion 3"] == "religion stated"
    cov = {"n_items": 24, "n_available": 103649, "limit": 24, "n_left_out": 103625,
           "strata": {"descriptor": {"covered": {"Age 1": 2}, "n_covered": 16, "n_total": 16, "left_out": []}},
           "cells": {"by": "bias_type x descriptor", "n_covered": 24, "n_total": 160}}
    line = coverage_line("hbb", cov, terms=terms)
    assert "(age by life stage 2)" in line and "24 of 160 combinations covered" in line
    warning = [w for w in report_warnings({"coverage": cov}, [], terms=terms) if w.startswith("limited run")][0]
    assert "every stratum covered, but only 24 of the 160 combinations (bias type x descriptor)" in warning


def test_every_headline_metric_says_its_direction():
    from probe.tasks import get

    for task, metric in (("crows_pairs", "score"), ("bbq", "bias_amb"), ("bbq", "acc_amb"), ("hbb", "share"),
                         ("stereoset", "ss"), ("implicitbbq", "bias_dis")):
        note = get(task).reporting.metric_notes.get(metric, "")
        assert "no bias" in note or "higher" in note or "= " in note, (task, metric)
    from probe.runs.results import _noted

    assert _noted("pg_iso", get("cmp_iso").reporting.metric_notes) == "pg"


def test_check_reports_finds_zero_width_and_two_meanings_and_passes_a_tiny_run(tiny_lm, tmp_path):
    from tests.unit.test_report_runs import _check_reports

    check = _check_reports()
    run = tmp_path / "run"
    probe.evaluate(tiny_lm, "crows_pairs", limit=4, output=run, progress=False, threads=1)
    assert check.main([str(run)]) == 0
    (run / "tables" / "paired.md").write_text(
        "| Category | n units | clusters | Δ share S≥20 [95% CI] |\n|---|---|---|---|\n"
        "| all | 4 | 1 | +0.00 [n/a (1 unit)] |\n"
        "| race | 96 | 24 | +0.00 [+0.00, +0.00] |\n")
    problems, _ = check.check(run)
    assert any("zero-width interval" in p and "+0.00 [+0.00, +0.00]" in p for p in problems), problems
    assert any("the word 'unit' with two meanings" in p for p in problems), problems
    assert check.main([str(run)]) == 1
    (run / "tables" / "paired.md").write_text(
        "| Category | n test instances | clusters | Δ share S≥20 [95% CI] |\n|---|---|---|---|\n"
        "| all | 4 | 1 | +0.00 [n/a (1 cluster)] |\n| race | 96 | 24 | +0.00 [no variation across 24 clusters] |\n")
    assert check.main([str(run)]) == 0
