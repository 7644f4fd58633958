"""`probe report` building blocks without a model: paired statistics, units vs the task metrics, labels,
the ImplicitBBQ Table 2 rules, the self-contained HTML."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from probe.errors import ProbeError
from probe.tasks.bbq.metrics import bbq_metrics
from probe.tasks.implicitbbq.sections import table2_paper
from probe.reports.compare.html import render
from probe.reports.compare.paired import compare, holm, mcnemar, paired_bootstrap
from probe.reports.compare.runs import Run, label_runs, load_run
from probe.reports.compare.tables import Section, Table, plain, save_figure
from probe.tasks.bbq.paired_units import BBQ_SPEC, bbq_units


def test_holm_steps_down_and_keeps_nan():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    adj = holm([0.2, math.nan, 0.001])
    assert adj[0] == pytest.approx(0.2) and math.isnan(adj[1]) and adj[2] == pytest.approx(0.002)
    assert holm([]) == []


def test_mcnemar_counts_discordant_units_exactly():
    n10, n01, p = mcnemar(np.array([1, 1, 1, 0, 1, np.nan]), np.array([0, 0, 0, 0, 1, 1]))
    assert (n10, n01) == (3, 0) and p == pytest.approx(0.25)  # binomial(3, 0.5), two-sided
    assert mcnemar(np.ones(4), np.ones(4)) == (0, 0, 1.0)


def test_paired_bootstrap_zero_for_identical_models_and_detects_a_shift():
    rng = np.random.default_rng(0)
    c = np.column_stack([np.ones(60), rng.integers(0, 2, 60)]).astype(float)
    mean = {"m": lambda s: s[..., 1] / s[..., 0]}
    obs, lo, hi, p = paired_bootstrap(c, c, mean, 300, 0)["m"]
    assert (obs, lo, hi, p) == (0.0, 0.0, 0.0, 1.0)
    shifted = c.copy()
    shifted[:, 1] = 0.0
    obs, lo, hi, p = paired_bootstrap(c, shifted, mean, 300, 0)["m"]
    assert obs == pytest.approx(c[:, 1].mean()) and 0 < lo <= obs <= hi and p < 0.01
    assert math.isnan(paired_bootstrap(c[:1], c[:1], mean, 50, 0)["m"][1])  # one cluster: no interval


def _bbq_records(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        amb = i % 2 == 0
        t, u = int(rng.integers(0, 3)), None
        u = (t + 1 + int(rng.integers(0, 2))) % 3
        other = 3 - t - u
        out.append({"id": f"i{i}", "block": "b", "category": "c0" if i < n // 2 else "c1", "cluster": f"k{i // 4}",
                    "context_condition": "ambig" if amb else "disambig",
                    "question_polarity": "neg" if i % 4 < 2 else "nonneg",
                    "label": u if amb else (t if i % 3 else other), "target_index": t, "unknown_index": u,
                    "probs": list(rng.dirichlet([1, 1, 1]))})
    return out


def test_bbq_units_give_the_task_metrics():
    recs = _bbq_records(40, 1)
    units = bbq_units(recs)
    sums = units[list(BBQ_SPEC.columns)].to_numpy().sum(0)
    expected = bbq_metrics(recs)["expected"]
    keys = {"accuracy, ambiguous": "acc_amb", "accuracy, disambiguated": "acc_dis", "bias score, ambiguous": "bias_amb",
            "bias score, disambiguated": "bias_dis"}  # the paired tables' headers name the task's metrics in words
    assert set(BBQ_SPEC.metrics) == set(keys)
    for name, f in BBQ_SPEC.metrics.items():
        assert float(f(sums)) == pytest.approx(expected[keys[name]], abs=1e-12), name
    # all ambiguous answers Unknown: the scaled bias is 0 (probe.tasks.bbq.metrics's rule), not NaN
    unk = [{**r, "probs": [1.0 if j == r["unknown_index"] else 0.0 for j in range(3)]} for r in recs]
    sums = bbq_units(unk)[list(BBQ_SPEC.columns)].to_numpy().sum(0)
    assert float(BBQ_SPEC.metrics["bias score, ambiguous"](sums)) == 0.0 == bbq_metrics(unk)["expected"]["bias_amb"]


def test_compare_pairs_units_by_id_and_corrects_across_categories():
    a = bbq_units(_bbq_records(120, 1))
    b = bbq_units(_bbq_records(120, 2)).iloc[:-4]  # B lacks 4 units: they leave the comparison
    t = compare(a, b, BBQ_SPEC, n_boot=200)["b"]
    assert list(t["Category"]) == ["c0", "c1", "all"] and t.attrs["dropped"] == 4
    assert t.loc[2, "n questions"] == 116 and t.loc[2, "clusters"] == 29
    ma = bbq_metrics([r for r in _bbq_records(120, 1)][:116])["expected"]["acc_amb"]
    mb = bbq_metrics([r for r in _bbq_records(120, 2)][:116])["expected"]["acc_amb"]
    assert t.loc[2, "Δ accuracy, ambiguous [95% CI]"].startswith(f"{ma - mb:+.2f}")
    assert " / " in plain(t.loc[0, "p accuracy, ambiguous (raw / Holm)"])  # categories: raw / Holm
    assert " / " not in plain(t.loc[2, "p accuracy, ambiguous (raw / Holm)"])  # all: raw only


def test_labels_name_what_differs(tmp_path):
    def run(name, model, cfg):
        return Run(tmp_path / name, "bbq", model, cfg, {}, {})

    runs = label_runs([run("a", "m", {"seed": 0, "limit": 8}), run("b", "m", {"seed": 1, "limit": 8}),
                       run("c", "x", {"seed": 0})])
    assert [r.label for r in runs] == ["m [seed=0]", "m [seed=1]", "x"]
    same = label_runs([run("d1", "m", {"seed": 0}), run("d2", "m", {"seed": 0})])
    assert [r.label for r in same] == ["m [d1]", "m [d2]"]


def test_load_run_names_the_missing_file(tmp_path):
    with pytest.raises(ProbeError, match="not a directory"):
        load_run(tmp_path / "nope")
    with pytest.raises(ProbeError, match="summary.json: not found"):
        load_run(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"task": "crows_pairs", "model": "m"}))
    r = load_run(tmp_path)
    assert (r.task, r.model, r.label, math.isnan(r.params_b)) == ("crows_pairs", "m", "", True)


def _macro(values: dict) -> dict:
    return {"n": 4, "expected": {"macro": values, "pooled": {"n_amb": 2, "n_dis": 2}}}


def test_table2_has_the_seed_arrows_and_bold_rules():
    s = {"zero_shot|oneword": {
        "explicit": _macro({"acc_amb": 0.83, "acc_dis": 0.95, "bias_amb": 0.04, "bias_dis": 0.06}),
        "implicit": _macro({"acc_amb": 0.22, "acc_dis": 0.95, "bias_amb": 0.26, "bias_dis": 0.02}),
        "neutral": _macro({"acc_amb": 0.97, "acc_dis": 0.97, "bias_amb": 0.0, "bias_dis": 0.0})}}
    row = table2_paper([("m", s)], "zero_shot|oneword", "expected").iloc[0]
    assert row["Acc Amb Δ"] == "**↓0.61**"  # accuracy drop > 0.30: bold
    assert row["Acc Dis Δ"] == ""  # unchanged at two decimals: no arrow
    assert row["Bias Amb Imp."] == "**0.26**" and row["Bias Amb Exp."] == "0.04"  # bias > 0.15: bold
    assert row["Bias Amb Δ"] == "↑0.22" and row["Bias Dis Δ"] == "↓0.04"
    assert row["Neutral Amb."] == "0.97" and row["NoChar Amb."] == "–"


def test_html_is_self_contained(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    f = save_figure(fig, tmp_path, "fig1", "t", "A figure", "Cap.")
    assert f.png.read_bytes()[:4] == b"\x89PNG" and f.svg.read_text().lstrip().startswith("<?xml")
    t = Table("tab1", "t", "A <table>", "Estimator x, n = 3, CI none.", pd.DataFrame({"a": ["**1**", "x<y"]}))
    page = render("Title", "intro", [Section("t", "Task", "lead", [t, f])])
    assert page.count("<img") == 1 and "data:image/png;base64," in page
    assert "<strong>1</strong>" in page and "x&lt;y" in page and "A &lt;table&gt;" in page
    assert 'href="#tab1"' in page and 'href="#fig1"' in page and "@media print" in page
    for bad in ("<script", "http://", "https://", "<link rel=\"stylesheet\""):
        assert bad not in page


def test_report_command_refuses_bad_input(tmp_path, capsys):
    from probe.cli import main

    assert main(["report", str(tmp_path / "missing"), "--output", str(tmp_path / "out")]) == 1
    assert "not a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["report", str(tmp_path)])  # --output is required
