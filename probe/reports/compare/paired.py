"""Paired comparisons of two models on the same items: cluster bootstrap of metric differences, McNemar, Holm.

Input per model: a *units* frame, one row per scored unit (a BBQ item, an HBB
test instance, a CrowS-Pairs pair, an iso/cmp context pair) with

- ``unit`` (matched across models), ``block`` (one A-vs-B table per block: an
  answer format, a strategy, an HBB variant, an iso/cmp setting), ``category``
  (a row of that table) and ``cluster`` (the resampling unit: a template
  instance, a concept pair, a context pair);
- the task's numeric columns (:class:`Spec` ``columns``): every metric is a
  function of their sums, so a bootstrap replicate is a weighted cluster sum;
- ``binary``: the argmax outcome McNemar compares (correct answer, answer flips
  with the identity, ...), NaN when there is none.

Only units present in both runs with finite values in both enter (the rest are
counted in ``n dropped``). For each category (and ``all``):

- the difference A − B of each metric, its 95% percentile CI from ``n_boot``
  paired replicates (the same resampled clusters for both models) and the
  bootstrap p-value ``min(1, 2 min(P*(Δ ≤ 0), P*(Δ ≥ 0)))`` (each share
  counted as ``(k + 1) / (B + 1)``); neither with fewer than
  :data:`MIN_CLUSTERS` clusters;
- exact McNemar (:func:`scipy.stats.binomtest` on the discordant units);
- Holm's correction of each p-value column across the categories of the table
  (``all`` is not a category: its p-values stay raw). Bold: Holm p < 0.05.

>>> import numpy as np, pandas as pd
>>> spec = Spec("t", ("n", "x"), {"mean": lambda s: s[..., 1] / s[..., 0]}, "x", "mean", "unit")
>>> a = pd.DataFrame({"unit": range(40), "block": "b", "category": "c", "cluster": range(40), "n": 1.0,
...                   "x": [1.0] * 30 + [0.0] * 10, "binary": [1] * 30 + [0] * 10})
>>> b = a.assign(x=[1.0] * 10 + [0.0] * 30, binary=[1] * 10 + [0] * 30)
>>> t = compare(a, b, spec, n_boot=500)["b"]
>>> t.loc[0, "Δ mean [95% CI]"].split(" [")[0], t.loc[0, "McNemar A+B− / A−B+"]
('+0.50', '20 / 0')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import binomtest

from probe.metrics.small_sample import MIN_UNITS, enough
from probe.metrics.stats import bootstrap_p, cluster_weights, percentile_ci

__all__ = ["Spec", "compare", "holm", "mcnemar", "paired_bootstrap", "ratio", "MIN_CLUSTERS"]

#: fewer clusters than this: no CI and no bootstrap p (the one small-sample rule, probe.metrics.small_sample)
MIN_CLUSTERS = MIN_UNITS


@dataclass(frozen=True)
class Spec:
    """How one task's units are compared."""

    task: str
    columns: tuple[str, ...]  # per-unit numbers summed within clusters
    metrics: Mapping[str, Callable[[np.ndarray], np.ndarray]]  # column sums (..., len(columns)) -> metric
    binary: str  # what the McNemar outcome is (caption)
    estimator: str  # what the metrics are computed from (caption)
    cluster: str  # what a cluster is (caption)
    unit: str = "units"  # what one row of the units frame is, plural ("questions", "pairs"): the count column's word


def ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a / b`` element-wise, NaN where ``b`` is (about) zero: a :class:`Spec` metric over column sums.

    >>> ratio(np.array([1.0, 1.0]), np.array([2.0, 0.0])).tolist()
    [0.5, nan]
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b > 1e-12, a / np.where(b > 1e-12, b, 1.0), np.nan)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (NaN kept as NaN, not counted).

    >>> [round(p, 3) for p in holm([0.01, 0.04, 0.03])]
    [0.03, 0.06, 0.06]
    """
    p = np.asarray(pvalues, dtype=float)
    ok = np.flatnonzero(np.isfinite(p))
    out = np.full(p.shape, np.nan)
    m = len(ok)
    running = 0.0
    for rank, i in enumerate(ok[np.argsort(p[ok], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def mcnemar(a: np.ndarray, b: np.ndarray) -> tuple[int, int, float]:
    """(A yes & B no, A no & B yes, exact two-sided p) over units where both outcomes are known."""

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ok = np.isfinite(a) & np.isfinite(b)
    n10 = int(((a == 1) & (b == 0) & ok).sum())
    n01 = int(((a == 0) & (b == 1) & ok).sum())
    p = float(binomtest(n10, n10 + n01, 0.5).pvalue) if n10 + n01 else 1.0
    return n10, n01, p


def paired_bootstrap(ca: np.ndarray, cb: np.ndarray, metrics: Mapping[str, Callable], n_boot: int,
                     seed: int) -> dict[str, tuple[float, float, float, float]]:
    """metric -> (observed A − B, CI low, CI high, p) from per-cluster column sums ``ca``, ``cb`` (k x p): each
    replicate weighs the clusters by one multinomial draw (:func:`probe.metrics.stats.cluster_weights`)."""

    k = ca.shape[0]
    w = cluster_weights(np.random.default_rng(seed), k, n_boot).astype(float)
    sa, sb = w @ ca, w @ cb
    out = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for name, f in metrics.items():
            obs = float(f(ca.sum(0)) - f(cb.sum(0))) if k else math.nan
            d = np.asarray(f(sa) - f(sb), dtype=float)
            # too little to resample: fewer than MIN_CLUSTERS clusters, or fewer than half the replicates finite
            lo, hi = percentile_ci(d, tails=(0.025, 0.975), min_finite=math.ceil(n_boot / 2))
            if k < MIN_CLUSTERS or not math.isfinite(lo) or not math.isfinite(obs):
                out[name] = (obs, math.nan, math.nan, math.nan)
                continue
            out[name] = (obs, lo, hi, bootstrap_p(d))
    return out


def _p(p: float, adj: float | None) -> str:
    if not math.isfinite(p):
        return "–"
    s = f"{p:.3f}" if adj is None else f"{p:.3f} / {adj:.3f}" if math.isfinite(adj) else f"{p:.3f}"
    return f"**{s}**" if (adj if adj is not None and math.isfinite(adj) else p) < 0.05 else s


def _paired(a: pd.DataFrame, b: pd.DataFrame, spec: Spec) -> tuple[pd.DataFrame, int]:
    """Units in both frames with finite numbers in both (A columns suffixed _a, B _b), and how many dropped."""
    keep = ["unit", "category", "cluster", "binary", *spec.columns]
    m = a[keep].merge(b[["unit", "binary", *spec.columns]], on="unit", suffixes=("_a", "_b"), how="outer",
                      indicator=True)
    both = m[m["_merge"] == "both"]
    cols = [f"{c}_{s}" for c in spec.columns for s in "ab"]
    ok = np.isfinite(both[cols].to_numpy(dtype=float)).all(axis=1)
    return both[ok], int(len(m) - ok.sum())


def n_column(spec: Spec) -> str:
    """The paired table's count column, in the task's word for what a row of its units frame is."""
    return f"n {spec.unit}"


def _interval(lo: float, hi: float, clusters: int) -> str:
    """`` [lo, hi]``; a zero-width one and one from too few clusters said in words (the table's "clusters"
    column counts the resampling units, so its cells name them so too)."""
    if math.isfinite(lo) and f"{lo:+.2f}" != f"{hi:+.2f}":  # a width that shows at two decimals
        return f" [{lo:+.2f}, {hi:+.2f}]"
    if math.isfinite(lo):
        return f" [no variation across {clusters} clusters]"
    return "" if enough(clusters) else f" [n/a ({clusters} cluster{'' if clusters == 1 else 's'})]"


def compare(a: pd.DataFrame, b: pd.DataFrame, spec: Spec, n_boot: int = 2000, seed: int = 0) -> dict[str, pd.DataFrame]:
    """block -> the A-vs-B table: per category and ``all``, each metric's Δ with CI and p, and McNemar."""
    out = {}
    for block in list(dict.fromkeys(a["block"])):
        pa, pb = a[a["block"] == block], b[b["block"] == block]
        units, dropped = _paired(pa, pb, spec)
        cats = sorted(units["category"].astype(str).unique())
        rows = []
        for cat in cats + ["all"]:
            sub = units if cat == "all" else units[units["category"].astype(str) == cat]
            g = sub.groupby("cluster", sort=True)
            ca = g[[f"{c}_a" for c in spec.columns]].sum().to_numpy(dtype=float)
            cb = g[[f"{c}_b" for c in spec.columns]].sum().to_numpy(dtype=float)
            boot = paired_bootstrap(ca, cb, spec.metrics, n_boot, seed)
            n10, n01, p_mc = mcnemar(sub["binary_a"].to_numpy(dtype=float), sub["binary_b"].to_numpy(dtype=float))
            rows.append({"category": cat, "n": len(sub), "clusters": len(ca), "boot": boot, "mc": (n10, n01, p_mc)})
        adj = {name: holm([r["boot"][name][3] if r["category"] != "all" else math.nan for r in rows])
               for name in spec.metrics}
        adj_mc = holm([r["mc"][2] if r["category"] != "all" else math.nan for r in rows])
        table = []
        for i, r in enumerate(rows):
            row = {"Category": r["category"], n_column(spec): r["n"], "clusters": r["clusters"]}
            last = r["category"] == "all"
            for name in spec.metrics:
                obs, lo, hi, p = r["boot"][name]
                row[f"Δ {name} [95% CI]"] = "–" if not math.isfinite(obs) else f"{obs:+.2f}" + _interval(
                    lo, hi, r["clusters"])
                row[f"p {name} (raw / Holm)"] = _p(p, None if last else adj[name][i])
            n10, n01, p_mc = r["mc"]
            row["McNemar A+B− / A−B+"] = f"{n10} / {n01}"
            row["McNemar p (raw / Holm)"] = _p(p_mc, None if last else adj_mc[i])
            table.append(row)
        df = pd.DataFrame(table)
        df.attrs["dropped"] = dropped
        out[str(block)] = df
    return out
