"""iso/cmp across models (seed 003 Table 8, E.1, E.2) and the pooled variation test: hand-computed cases."""

from __future__ import annotations

import math

import pytest

from probe.tasks.cmp_iso.model_metrics import (ModelSize, eligible_models, family_of, fisher_ci, model_sizes,
                                               neutral_rank_agreement, pooled_cmp_vs_iso, pooled_variation_test,
                                               size_correlation)
from probe.tasks.cmp_iso.model_tables import correlations, size_tables

SIZES = {
    "qwen-1b": ModelSize(1, 1, "qwen"), "qwen-4b": ModelSize(4, 4, "qwen"), "qwen-9b": ModelSize(9, 9, "qwen"),
    "llama-8b": ModelSize(8, 8, "llama"),  # a family with one size: out of Table 8
    "moe-30b": ModelSize(30, 3, "moe"), "moe-60b": ModelSize(60, 6, "moe"),  # sparse: out of Table 8
}


def test_family_and_sizes():
    assert family_of("Qwen/Qwen3-4B-Instruct-2507") == "qwen3"
    assert family_of("gemma3-270m") == "gemma3" and family_of("smollm2") == "smollm2"
    s = model_sizes({"a-1b": 1.0, "a-2b": 2.0}, active_b={"a-2b": 0.5}, families={"a-1b": "x"})
    assert s["a-1b"] == ModelSize(1, 1, "x") and not s["a-2b"].dense and s["a-2b"].family == "a"


def test_eligible_models_table8_vs_e2():
    assert eligible_models(SIZES) == ["qwen-1b", "qwen-4b", "qwen-9b"]
    assert eligible_models(SIZES, dense_families=False) == sorted(SIZES)
    # two models of one family with the same size do not make two sizes
    same = {"a-1b": ModelSize(1, 1, "a"), "a-1b-it": ModelSize(1, 1, "a")}
    assert eligible_models(same) == []


def test_size_correlation_hand_computed():
    pg = {"qwen-1b": 0.1, "qwen-4b": 0.2, "qwen-9b": 0.6, "llama-8b": -1.0, "moe-30b": 0.0, "moe-60b": 0.9}
    r = size_correlation(pg, SIZES)
    # x = 1, 4, 9; y = .1, .2, .6: means 14/3, .3; Sxy = 2.1, Sxx = 98/3, Syy = .14
    assert r["r"] == pytest.approx(2.1 / math.sqrt(98 / 3 * 0.14)) and r["n"] == 3
    assert r["ci"] == (math.nan, math.nan) or all(math.isnan(x) for x in r["ci"])  # n = 3: no Fisher CI
    e2 = size_correlation(pg, SIZES, dense_families=False)
    act = size_correlation(pg, SIZES, use_active=True, dense_families=False)
    assert e2["n"] == act["n"] == 6 and e2["r"] != act["r"] and act["parameters"] == "active"
    # a NaN PG leaves the model out; < 3 models: NaN r
    two = size_correlation({"qwen-1b": 0.1, "qwen-4b": math.nan, "qwen-9b": 0.3}, SIZES)
    assert two["n"] == 2 and math.isnan(two["r"])


def test_fisher_ci():
    lo, hi = fisher_ci(0.0, 4)  # z = 0, se = 1: tanh(+-1.95996)
    assert lo == pytest.approx(-math.tanh(1.959964), abs=1e-6) and hi == pytest.approx(math.tanh(1.959964), abs=1e-6)
    assert fisher_ci(1.0, 10) == (1.0, 1.0)
    assert all(math.isnan(x) for x in fisher_ci(0.5, 3))


def test_neutral_rank_agreement():
    ns = {"a": 0.9, "b": 0.5, "c": 0.3, "d": 0.1}
    pg = {"a": 0.4, "b": 0.1, "c": -0.2, "d": 0.0}  # -|PG|: -.4, -.1, -.2, 0
    d = neutral_rank_agreement(ns, pg, k=2)
    # concordant pairs: (b,c), (b... ) -> by hand: pairs ab -, ac -, ad -, bc +, bd -, cd -: tau = (1 - 5) / 6
    assert d["tau"] == pytest.approx(-4 / 6) and d["n"] == 4
    assert d["top_k"] == 1  # top-2 by share {a, b}; by -|PG| {d, b} -> {b}
    nan = neutral_rank_agreement({"a": math.nan, "b": 0.1}, {"a": 0.1, "b": 0.2})
    assert nan["n"] == 1 and math.isnan(nan["tau"])


def test_top_k_by_hand():
    d = neutral_rank_agreement({"a": 0.9, "b": 0.5, "c": 0.3, "d": 0.1}, {"a": 0.4, "b": 0.1, "c": -0.2, "d": 0.0}, k=2)
    assert d["top_k"] == 1  # {a, b} & {d, b}


def test_pooled_variation_test_blocks_and_drops():
    rows = [{"pair": p, "variant": v, "cmp": 0.5, "iso": 0.0} for p in range(6) for v in range(3)]
    rows.append({"pair": 9, "variant": 0, "cmp": 0.5, "iso": None})
    r = pooled_variation_test(rows, n_iter=500)
    assert r["diff"] == pytest.approx(0.5) and r["n_blocks"] == 6 and r["n_rows"] == 18 and r["n_dropped"] == 1
    # 6 blocks, all positive: only the 2 all-same swaps of 2^6 reach |0.5|: p ~ 2/64
    assert r["p"] < 0.1
    # identical paradigms: diff 0, p = 1
    same = pooled_variation_test([{"pair": p, "variant": 0, "cmp": 0.2, "iso": 0.2} for p in range(4)], n_iter=50)
    assert same["diff"] == 0 and same["p"] == 1.0
    empty = pooled_variation_test([], n_iter=10)
    assert empty["n_rows"] == 0 and math.isnan(empty["p"])


def test_pooled_blocks_make_p_larger_than_unblocked():
    # 2 pairs x 20 variations: with one block per pair only 4 swap patterns exist, p >= 2/4-ish
    rows = [{"pair": p, "variant": v, "cmp": 0.3, "iso": 0.0} for p in range(2) for v in range(20)]
    blocked = pooled_variation_test(rows, n_iter=400)
    assert blocked["p"] > 0.3


def test_pooled_cmp_vs_iso_from_gaps():
    g = {("d", v, "bbq", "expected", "cmp"): {0: 0.4, 1: 0.2} for v in range(2)}
    g.update({("d", v, "bbq", "expected", "iso"): {0: 0.0, 1: 0.0} for v in range(2)})
    (r,) = pooled_cmp_vs_iso(g, n_iter=50)
    assert (r["setting"], r["benchmark"], r["n_variants"], r["n_rows"]) == ("d", "bbq", 2, 4)
    assert r["pg_cmp"] == pytest.approx(0.3) and r["pg_iso"] == 0


def _res(model, bench, pg_cmp, pg_iso, ns=math.nan):
    return {"model": model, "setting": "direct", "benchmark": bench, "mode": "expected",
            "cmp": {"pg": pg_cmp, "n_pairs": 5, "neutral_share": ns}, "iso": {"pg": pg_iso, "n_pairs": 5,
                                                                              "neutral_share": ns}}


def test_correlations_and_tables():
    models = ["qwen-1b", "qwen-4b", "qwen-9b", "llama-8b"]
    res = [_res(m, "bbq", pg, 0.0, ns) for m, pg, ns in zip(models, (0.1, 0.2, 0.6, 0.3), (0.5, 0.4, 0.1, 0.2))]
    rows = correlations(res, models, ["bbq"], SIZES)
    cmp_ = next(c for c in rows if c["paradigm"] == "cmp")
    assert cmp_["table8"]["n"] == 3 and cmp_["e2_total"]["n"] == 4 and cmp_["e1"]["n"] == 4
    assert cmp_["pearson_pg_params"][0] == pytest.approx(cmp_["e2_total"]["r"])
    iso = next(c for c in rows if c["paradigm"] == "iso")
    assert math.isnan(iso["table8"]["r"])  # constant PG
    t = size_tables(rows, ["bbq"])
    assert list(t["table8"].columns) == ["setting", "paradigm", "category", "BBQ"]  # the paper's names
    assert t["table8"].iloc[0]["paradigm"] == "cmp" and t["table8"].iloc[0]["BBQ"].endswith("(n=3)")
    assert set(t["tableE1"]["metric"]) == {"Kendall τ", "Top-5 intersection"}


def test_report_tables_group_runs_by_category(tmp_path):
    from probe.tasks.cmp_iso.sections import _cmp_iso_across_models
    from probe.reports.compare.runs import Run

    def run(model, cat, pg, active=None):
        res = [{k: v for k, v in _res(model, "bbq", pg, 0.0, 0.2).items() if k != "model"}]
        summary = {"task": "cmp_iso", "benchmarks": ["bbq"], "settings": ["direct"], "alpha": 0.05, "results": res,
                   "pooled_cmp_vs_iso": [{"setting": "direct", "benchmark": "bbq", "mode": "expected", "diff": 0.1,
                                          "p": 0.5, "pg_cmp": 0.1, "pg_iso": 0.0, "n_variants": 2, "n_blocks": 3}]}
        cfg = {"category": cat, "active_params_b": active} if active else {"category": cat}
        return Run(tmp_path, "cmp_iso", model, cfg, summary, {}, label=model)

    runs = [run("qwen-1b", "gender", 0.1), run("qwen-4b", "gender", 0.2), run("qwen-9b", "gender", 0.6, {"qwen-9b": 3}),
            run("qwen-1b", "race", 0.3), run("qwen-4b", "race", 0.2)]
    sizes = {"qwen-1b": 1.0, "qwen-4b": 4.0, "qwen-9b": 9.0}
    from probe.tasks.cmp_iso.model_tables import combine_summaries

    main = combine_summaries([{**r.summary, "model": r.label} for r in runs[:3]], sizes)
    items = _cmp_iso_across_models(runs, sizes, main, "qwen-1b, qwen-4b, qwen-9b")
    by = {t.name: t for t in items}
    assert {"cmp_iso_table8", "cmp_iso_tableE2_total", "cmp_iso_tableE2_active", "cmp_iso_tableE1",
            "cmp_iso_pooled_variations"} <= set(by)
    t8 = by["cmp_iso_table8"].df
    assert set(t8["category"]) == {"gender", "race"}
    # qwen-9b is sparse (3B active of 9B): out of Table 8, so gender has 2 dense sizes and no r
    gender_cmp = t8[(t8["category"] == "gender") & (t8["paradigm"] == "cmp")]["BBQ"].iloc[0]
    assert gender_cmp == "– (n=2)"
    e2 = by["cmp_iso_tableE2_total"].df
    assert e2[(e2["category"] == "gender") & (e2["paradigm"] == "cmp")]["BBQ"].iloc[0].endswith("(n=3)")


def test_table2_without_rows_for_a_mode_is_empty_not_an_error():
    # gemma3-270m on CrowS-Pairs race: the paper-equivalent mode had rows for one setting only
    from probe.tasks.cmp_iso.tables import table2

    s = {"benchmarks": ["bbq"], "models": ["m"], "results": [], "alpha": 0.05}
    assert table2(s, "direct", "paper").shape == (1, 0)


def test_size_correlations_use_the_papers_orientation():
    """Issue #23: seed 003 reports StereoSet, RedditBias (and CrowS-Pairs, which mirrors it) and DE-Gen with the
    preferred group re-oriented (-PG here); Table 8 / E.2 correlate that PG with size, so r flips sign there."""
    from probe.tasks.cmp_iso.data import PAPER_ORIENTATION, paper_sign

    assert PAPER_ORIENTATION == {"stereoset": -1, "redditbias": -1, "crows_pairs": -1, "de_gen": -1}
    assert [paper_sign(b) for b in ("bbq", "dt_tox", "winobias", "mmlu")] == [1, 1, 1, 1]
    models = ["qwen-1b", "qwen-4b", "qwen-9b"]
    # PG here falls with size on every benchmark: -0.1, -0.2, -0.6 (cmp), iso constant
    benches = ["stereoset", "redditbias", "crows_pairs", "de_gen", "bbq", "dt_tox"]
    res = [_res(m, b, pg, 0.0) for b in benches for m, pg in zip(models, (-0.1, -0.2, -0.6))]
    rows = {c["benchmark"]: c for c in correlations(res, models, benches, SIZES) if c["paradigm"] == "cmp"}
    # hand-computed: Pearson r of sizes (1, 4, 9) with (0.1, 0.2, 0.6) = 0.9939...; with the raw PG -0.9939...
    x, y = [1.0, 4.0, 9.0], [0.1, 0.2, 0.6]
    mx, my = sum(x) / 3, sum(y) / 3
    r = sum((a - mx) * (b - my) for a, b in zip(x, y)) / math.sqrt(
        sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))
    for b in ("stereoset", "redditbias", "crows_pairs", "de_gen"):
        assert rows[b]["orientation"] == -1
        assert rows[b]["table8"]["r"] == pytest.approx(r) and rows[b]["e2_total"]["r"] == pytest.approx(r)
        assert rows[b]["e2_active"]["r"] == pytest.approx(r) and rows[b]["pearson_pg_params"][0] == pytest.approx(r)
    for b in ("bbq", "dt_tox"):
        assert rows[b]["orientation"] == 1 and rows[b]["table8"]["r"] == pytest.approx(-r)
    t = size_tables(list(rows.values()), benches)
    assert list(t["table8"].columns)[3:] == ["StereoSet (−PG)", "RedditBias (−PG)", "CrowS-Pairs (−PG)",
                                             "DE-Gen (−PG)", "BBQ", "DT-Tox"]
    assert t["tableE2_total"].iloc[0]["DE-Gen (−PG)"].startswith(f"{r:.3f}")
    assert t["tableE2_active"].iloc[0]["BBQ"].startswith(f"{-r:.3f}")
