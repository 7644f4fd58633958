"""The one small-sample rule (probe.metrics.small_sample): no resampled interval from fewer than MIN_UNITS
units, in any bootstrap and in every task's results, tables and report; exact intervals at any n."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import probe
from probe.metrics.small_sample import MIN_UNITS, enough, guard, na_text
from probe.metrics.stats import bootstrap_ci, cluster_bootstrap_ci
from probe.reports.compare.paired import Spec, compare
from probe.tasks import available, get


def test_the_rule_at_its_boundary():
    assert MIN_UNITS == 10
    assert not enough(MIN_UNITS - 1) and enough(MIN_UNITS) and not enough(None) and not enough(math.nan)
    assert not enough(True)  # a flag is not a count
    assert all(math.isnan(x) for x in guard((0.1, 0.2), 9)) and guard((0.1, 0.2), 10) == (0.1, 0.2)
    assert (na_text(0), na_text(1), na_text(9.0), na_text(None)) == ("n/a (0 units)", "n/a (1 unit)",
                                                                     "n/a (9 units)", "n/a")


@pytest.mark.parametrize("n", [2, 5, 9])
def test_no_bootstrap_from_fewer_than_ten_units(n):
    data = np.arange(n, dtype=float)
    assert all(math.isnan(x) for x in bootstrap_ci(data, np.mean, n_boot=50))
    ci = cluster_bootstrap_ci(np.repeat(data, 3), np.repeat(np.arange(n), 3).tolist(), {"m": np.mean}, n_boot=50)
    assert all(math.isnan(x) for x in ci["m"])


def test_ten_units_give_an_interval():
    lo, hi = bootstrap_ci(np.arange(10, dtype=float), np.mean, n_boot=200)
    assert lo < 4.5 < hi
    lo, hi = cluster_bootstrap_ci(np.arange(20.0), [i // 2 for i in range(20)], {"m": np.mean}, n_boot=200)["m"]
    assert lo < 9.5 < hi


def test_paired_tables_follow_the_same_rule():
    import pandas as pd

    spec = Spec("t", ("n", "x"), {"mean": lambda s: s[..., 1] / s[..., 0]}, "x", "mean", "unit")

    def frame(units: int, ones: int) -> pd.DataFrame:
        return pd.DataFrame({"unit": range(units), "block": "b", "category": "c", "cluster": range(units),
                             "n": 1.0, "x": [1.0] * ones + [0.0] * (units - ones),
                             "binary": [1] * ones + [0] * (units - ones)})

    few = compare(frame(9, 8), frame(9, 1), spec, n_boot=200)["b"]
    assert few.loc[0, "Δ mean [95% CI]"] == "+0.78 [n/a (9 clusters)]"  # the table's own word for them
    ok = compare(frame(10, 9), frame(10, 1), spec, n_boot=200)["b"]
    assert re.fullmatch(r"\+0\.80 \[[+-]\d\.\d\d, [+-]\d\.\d\d\]", ok.loc[0, "Δ mean [95% CI]"])


_INTERVAL = re.compile(r"\[\s*[-+]?\d+(?:\.\d+)?,\s*[-+]?\d+(?:\.\d+)?\s*\]")


@pytest.mark.parametrize("name", list(available()))
def test_no_task_prints_an_interval_from_fewer_than_ten_units(name, tiny_lm, tmp_path):
    """Every registered task at its contract-test size (a handful of items, so fewer than ten units): no
    results row holds a resampled interval from fewer than ten units, and no line of its report's headline
    shows one next to a count under ten."""
    case = get(name).check_case()
    out = tmp_path / "run"
    e = probe.evaluate(tiny_lm, name, limit=case.limit, output=out, progress=False, **dict(case.values))
    ci = e.results.dropna(subset=["ci_low", "ci_high"])
    for _, r in ci[~(ci.n_clusters >= MIN_UNITS)].iterrows():
        assert _exact(name, r.metric, r.estimator), \
            f"{name}: {r.metric} ({r.subgroup}) has an interval from {r.n_clusters} unit(s)"
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "Headline" in report
    for line in report.splitlines():
        if line.startswith("|") and _INTERVAL.search(line) and not _exact(name, line, line):
            assert not re.search(rf"\(n = [0-{MIN_UNITS - 1}]\)", line), line


# Enough items that a bootstrap over 2 to 9 units is possible (the contract-test size above gives one unit,
# where no bootstrap ever ran): BBQ 3 template clusters, iso/cmp 3 context pairs, ImplicitBBQ 2 per cell, HBB 6
# test instances with the paper's procedure enumerated and its tail sampled (the hybrid count's Monte Carlo interval).
_FEW_UNITS = {"bbq": (12, {}), "cmp_iso": (3, {}), "implicitbbq": (24, {"per_cell": {"zero_shot": 6}}),
              "crows_pairs": (8, {}),
              "hbb": (6, {"parse_exact": True, "parse_max_new_tokens": 2, "parse_max_nodes": 8,
                          "parse_tail_max_new_tokens": 4})}


@pytest.mark.parametrize("name", sorted(_FEW_UNITS))
def test_no_task_prints_an_interval_from_two_to_nine_units(name, tiny_lm, tmp_path):
    """The sizes the first-hour walk saw (iso/cmp ``-0.148 [-0.205, -0.090] (n = 2)``, ImplicitBBQ ``(n = 4)``,
    CrowS-Pairs per type at n = 2, BBQ at 3 clusters): every results row with an interval from 2 to 9 units is
    an exact one."""
    limit, extra = _FEW_UNITS[name]
    case = get(name).check_case()
    out = tmp_path / "run"
    e = probe.evaluate(tiny_lm, name, limit=limit, output=out, progress=False, **{**dict(case.values), **extra})
    # a row that names no resampling units is judged by its n: an interval it shows must still be exact
    units = e.results.n_clusters.fillna(e.results.n)
    few = (units >= 2) & (units < MIN_UNITS)
    assert few.any(), f"{name}: no row with 2 to 9 units, so this test checks nothing"
    for i, r in e.results[few].dropna(subset=["ci_low", "ci_high"]).iterrows():
        assert _exact(name, r.metric, r.estimator), \
            f"{name}: {r.metric} ({r.subgroup}, {r.estimator}) has an interval from {units[i]:g} unit(s)"
    for line in (out / "report.md").read_text(encoding="utf-8").splitlines():  # the headline and every table
        if line.startswith("|") and _INTERVAL.search(line) and not _exact(name, line, line):
            assert not re.search(rf"\(n = [0-{MIN_UNITS - 1}]\)", line), line
    if name == "hbb":  # the hybrid count's column of the parsed Table 1: its interval resamples no units (valid
        # at any n: each question's own tail draws and the 10-sample noise), or why there is no count
        hybrid = e.tables["table1_paper_parsed"]["parsed hybrid"]
        assert len(hybrid) and all(re.fullmatch(r"\d+\.\d \[\d+\.\d, \d+\.\d\]|n/a: nothing parsed, .*", x)
                                   for x in hybrid), list(hybrid)


def _exact(task: str, metric: str, estimator: str) -> bool:
    """Metrics whose interval is exact (Wilson's, for a share), allowed at any n: CrowS-Pairs' log-likelihood
    score (the share of pairs preferring the stereotype) and argmax score, HBB's share over the threshold."""
    return (task == "crows_pairs" and ("log-likelihood" in estimator or "argmax" in metric)
            or task == "hbb" and "share" in metric
            # a certified interval is a bound, not a resample; HBB's parsed count's 5-95 % range is the
            # exact Poisson-binomial range of its distribution: both valid at any n
            or "certified [" in estimator
            # the hybrid's interval resamples no units: each prompt's own tail draws (and the K-sample noise)
            or "hybrid" in estimator)
