"""`probe report`: ImplicitBBQ's Figure 4 layout and the paper-equivalent tables (ImplicitBBQ Table 2, HBB Table 1)
beside the exact ones, on hand-made summaries (no model)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from probe.tasks.implicitbbq.sections import implicitbbq_section
from probe.tasks.implicitbbq.figures import figure4, figure4_values, strategies
from probe.reports.compare.paper_layouts import insert_beside
from probe.tasks.hbb.sections import hbb_paper_table
from probe.reports.compare.runs import Run
from probe.reports.compare.tables import Figure, Table


def _kind(acc_amb: float, bias_amb: float, n: int = 4) -> dict:
    macro = {"acc_amb": acc_amb, "acc_dis": 0.9, "bias_amb": bias_amb, "bias_dis": 0.0,
             "acc_amb_ci": [acc_amb - 0.1, acc_amb + 0.1], "bias_amb_ci": [None, None], "acc_dis_ci": [0.8, 1.0],
             "bias_dis_ci": [-0.1, 0.1], "dimensions": ["age"]}
    by_dim = {"age": {"acc_amb": acc_amb, "bias_amb": bias_amb, "n_amb": n,
                      "ci": {"acc_amb": [0.0, 1.0], "bias_amb": [bias_amb - 0.1, bias_amb + 0.1]}}}
    pooled = {"n_amb": n, "n_dis": n}
    return {"n": 2 * n, "expected": {"macro": macro, "pooled": pooled, "by_dimension": by_dim},
            "argmax": {"macro": macro, "pooled": pooled, "by_dimension": by_dim}}


def _ibbq_run(label: str, keys: dict[str, float], paper: dict[str, float] | None = None) -> Run:
    """A run whose strategies (``strategy|format`` -> implicit ambiguous bias) have explicit and implicit items."""
    by = {k: {"explicit": _kind(0.8, 0.05), "implicit": _kind(0.2, b)} for k, b in keys.items()}
    summary = {"task": "implicitbbq", "model": label, "by_strategy": by}
    if paper is not None:
        summary["paper_equivalent"] = {
            "settings": {"temperature": 0.1, "top_p": 1.0, "estimator": "expected counts under the seed's sampling"},
            "by_strategy": {k: {"explicit": _kind(0.9, 0.0), "implicit": _kind(0.1, b)} for k, b in paper.items()}}
    return Run(Path(label), "implicitbbq", label, {"n_boot": 50}, summary, {}, label=label)


def test_figure4_orders_strategies_as_the_seed_and_draws_every_model(tmp_path):
    a = _ibbq_run("a", {"cot|oneword": 0.1, "zero_shot|oneword": 0.3, "safety|oneword": 0.2})
    b = _ibbq_run("b", {"few_shot|oneword": 0.05, "zero_shot|oneword": 0.4, "zero_shot|labels": 0.4})
    assert strategies([a, b], "oneword") == ["zero_shot", "safety", "few_shot", "cot"]
    assert strategies([a, b], "labels") == ["zero_shot"]
    assert figure4_values(a, "zero_shot|oneword", "implicit", "bias_amb") == (0.3, [None, None])
    assert figure4_values(a, "zero_shot|oneword", "implicit", "acc_amb") == (0.2, [pytest.approx(0.1), pytest.approx(0.3)])
    v, ci = figure4_values(b, "safety|oneword", "implicit", "bias_amb")  # b has no safety items: no bar
    assert math.isnan(v) and ci is None
    f = figure4([a, b], "oneword", tmp_path)
    assert f.png.read_bytes()[:4] == b"\x89PNG" and f.svg.stat().st_size > 1000
    assert f.name == "implicitbbq_figure4_oneword"
    for words in ("zero-shot, safety instruction, few-shot, chain of thought", "Estimator: exact expected counts",
                  "n_boot = 50",
                  "a: zero-shot 4/4/4/4, safety instruction 4/4/4/4, few-shot 0/0/0/0, chain of thought 4/4/4/4"):
        assert words in f.caption, words


def test_implicitbbq_section_has_figure4_and_the_paper_table_beside_the_exact_ones(tmp_path):
    runs = [_ibbq_run("a", {"zero_shot|oneword": 0.3, "safety|oneword": 0.2}, paper={"zero_shot|oneword": 0.5}),
            _ibbq_run("b", {"zero_shot|oneword": 0.4}, paper={"zero_shot|oneword": 0.6}),
            _ibbq_run("c", {"zero_shot|oneword": 0.1})]  # no paper estimate: left out of that table only
    items = implicitbbq_section(runs, tmp_path)
    names = [it.name for it in items]
    i = names.index("implicitbbq_table2_zero_shot_oneword_paper")
    assert names[i - 2:i] == ["implicitbbq_table2_zero_shot_oneword_expected",
                              "implicitbbq_table2_zero_shot_oneword_argmax"]
    paper = items[i]
    assert list(paper.df["Model"]) == ["a", "b"]
    assert list(paper.df["Bias Amb Imp."]) == ["**0.50**", "**0.60**"]  # the paper summary's numbers, bold > 0.15
    assert list(paper.df["Acc Amb Exp."]) == ["0.90", "0.90"]
    assert "T = 0.1, top-p = 1" in paper.title and "paper-equivalent (T = 0.1, top-p = 1" in paper.caption
    exact = items[names.index("implicitbbq_table2_zero_shot_oneword_expected")]
    assert list(exact.df["Bias Amb Imp."]) == ["**0.30**", "**0.40**", "0.10"]
    assert "Estimator: exact expected counts" in exact.caption
    assert any(isinstance(it, Figure) and it.name == "implicitbbq_figure4_oneword" for it in items)


def _hbb_run(label: str, expected: float | None) -> Run:
    summary: dict = {"task": "hbb", "model": label, "threshold": 20.0}
    if expected is not None:
        group = {"n": 12, "expected_count": expected, "count_q05": 3, "count_q95": 9, "exact_count": 2,
                 "noise_floor_expected_count": 4.25, "noise_floor_q05": 1, "noise_floor_q95": 7,
                 "expected_mean_s": float("nan")}
        summary["paper_equivalent"] = {
            "settings": {"temperature": 0.8, "top_p": 1.0, "samples": 10, "threshold": 20.0, "invalid": "drop"},
            "all": group, "by_category": {"age": {**group, "n": 5, "expected_count": 1.04}}}
    return Run(Path(label), "hbb", label, {}, summary, {}, label=label)


def test_hbb_paper_table_one_row_per_model_with_the_settings():
    t = hbb_paper_table([_hbb_run("a", 5.84), _hbb_run("b", None), _hbb_run("c", 0.0)])
    assert list(t.df["Model"]) == ["a", "c"]  # b computed no paper estimate
    row = t.df.iloc[0]
    assert row["all"] == "5.8 (3–9); exact 2" and row["age"] == "1.0 (3–9); exact 2"
    assert row["noise floor (all)"] == "4.2 (1–7)" and row["paper E[mean S] (all)"] == "–" and row["n"] == 12
    assert "T = 0.8, top-p = 1, 10 samples per question, S ≥ 20, non-label answers dropped" in t.title
    assert "Estimator: paper-equivalent" in t.caption and "n: instances" in t.caption
    assert hbb_paper_table([_hbb_run("b", None)]) is None
    # each task's layout names its paper tables: hbb's Table 1; CrowS-Pairs has none
    from probe.tasks import get

    assert get("hbb").reporting.layout().paper_tables([_hbb_run("a", 1.0)], None)[0][0] == "hbb_table1"
    assert get("crows_pairs").reporting.layout().paper_tables is None


def test_insert_beside_keeps_order_and_appends_orphans():
    import pandas as pd

    def t(name: str) -> Table:
        return Table(name, "x", name, "", pd.DataFrame())

    items = insert_beside([t("a"), t("b"), t("c")], [("b", t("b_paper")), ("a", t("a_paper")), ("zz", t("z"))])
    assert [x.name for x in items] == ["a", "a_paper", "b", "b_paper", "c", "z"]
