"""ImplicitBBQ summaries and the paper's table layouts: Table 2, Tables 5-7, a Figure-3-like plot.

Input: per-item records as the ``implicitbbq`` task builds them from its run's
records (:func:`probe.tasks.implicitbbq.summary.metric_records`; fields of
:meth:`probe.tasks.bbq.items.BBQItem.metric_record` plus ``strategy``,
``answer_format``, ``probs``/``pred_index``). Every number comes with its
bootstrap 95% CI and its count.

Model-level numbers are, as in the paper ("Model-wise scores are averages over
demographics"), the mean over dimensions of the per-dimension metric (``macro``);
the CI of that mean resamples items (or, with ``cluster_key``, whole clusters: the
ImplicitBBQ task's template x context units) within each dimension. The pooled
metric over all items is reported beside it (``pooled``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from probe.io import write_atomic, write_json_atomic
from probe.tasks.bbq.metrics import (METRIC_NAMES, _amb_stats, _dis_stats, bbq_metrics, bbq_metrics_ci, cluster_counts,
                                     item_matrix)
from probe.metrics.small_sample import enough, na_text
from probe.metrics.stats import bootstrap_ci, percentile_ci, stratified_cluster_bootstrap

__all__ = ["summarize", "table2", "tables_per_dimension", "figure3", "to_markdown", "write_reports"]

KINDS = ("explicit", "implicit", "neutral", "nochar")
VERSIONS = ("expected", "argmax")


def _metric_fn(name: str):
    if name in ("acc_amb", "bias_amb"):
        j = 0 if name == "acc_amb" else 1
        return lambda m: _amb_stats(m[m[:, 0] == 1])[j]
    j = 0 if name == "acc_dis" else 1
    return lambda m: _dis_stats(m[m[:, 0] == 0])[j]


def _macro(records: Sequence[dict], version: str, n_boot: int, seed: int,
           cluster_key: str | None = None) -> dict[str, Any]:
    """Mean over dimensions of each metric, with a bootstrap CI resampling items (or, with ``cluster_key``,
    whole clusters) within dimensions."""
    by_dim: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_dim[r["dimension"]].append(r)
    mats = {d: item_matrix(rs, version) for d, rs in sorted(by_dim.items())}
    # resampling units per dimension: row index arrays of its clusters (or one row each)
    units = {}
    for d, rs in sorted(by_dim.items()):
        groups: dict[Any, list[int]] = defaultdict(list)
        for i, r in enumerate(rs):
            groups[r[cluster_key] if cluster_key else i].append(i)
        units[d] = [np.asarray(v) for v in groups.values()]
    out: dict[str, Any] = {"dimensions": sorted(mats)}
    rng = np.random.default_rng(seed)  # one stream, read by each metric in turn
    n_units = sum(len(u) for u in units.values())
    out["n_units"] = n_units  # what the interval resampled: a table names it when too few
    for name in METRIC_NAMES:
        fn = _metric_fn(name)
        out[name] = _finite_mean([fn(m) for m in mats.values()])
        if not enough(n_units):  # the small-sample rule: no interval from fewer than MIN_UNITS clusters
            out[f"{name}_ci"] = [math.nan, math.nan]
            continue
        # stratified: each dimension's units resampled on their own; the statistic is the mean over dimensions
        boots = stratified_cluster_bootstrap(
            units, lambda rows: _finite_mean([fn(mats[d][idx]) for d, idx in rows.items()]), n_boot, rng)
        out[f"{name}_ci"] = list(percentile_ci(boots, tails=(0.025, 0.975)))
    return out


def _finite_mean(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else math.nan


def summarize(records: Sequence[dict], n_boot: int = 1000, seed: int = 0,
              cluster_key: str | None = None) -> dict[str, Any]:
    """Nested summary: ``[strategy|format][context_kind]`` -> pooled, macro and per-dimension metrics.

    Also ``[strategy|format]["_mass"]``: mean probability mass the scored answers carry.
    ``cluster_key``: the record field naming each record's cluster; CIs then
    resample whole clusters (``None``: single items).
    """
    groups: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        groups[f"{r['strategy']}|{r['answer_format']}"][r["context_kind"]].append(r)
    out: dict[str, Any] = {}
    for key, kinds in sorted(groups.items()):
        out[key] = {}
        masses = [r["mass"] for rs in kinds.values() for r in rs if r.get("mass") is not None]
        out[key]["_mass"] = {"mean": float(np.mean(masses)) if masses else math.nan, "n": len(masses)}
        for kind in KINDS:
            rs = kinds.get(kind, [])
            if not rs:
                continue
            entry: dict[str, Any] = {"n": len(rs)}
            for version in VERSIONS:
                def ci(part: list[dict]) -> dict[str, list[float]]:
                    clusters = [r[cluster_key] for r in part] if cluster_key else None
                    return {k: list(v) for k, v in bbq_metrics_ci(part, version, n_boot, seed,
                                                                  clusters=clusters).items()}

                pooled = bbq_metrics(rs)[version]
                pooled["ci"] = ci(rs)
                pooled.update(cluster_counts(rs, [r[cluster_key] for r in rs] if cluster_key else None))
                by_dim = {}
                dims: dict[str, list[dict]] = defaultdict(list)
                for r in rs:
                    dims[r["dimension"]].append(r)
                for d, drs in sorted(dims.items()):
                    m = bbq_metrics(drs)[version]
                    m["ci"] = ci(drs)
                    m.update(cluster_counts(drs, [r[cluster_key] for r in drs] if cluster_key else None))
                    by_dim[d] = m
                entry[version] = {"pooled": pooled, "macro": _macro(rs, version, n_boot, seed, cluster_key),
                                  "by_dimension": by_dim}
            out[key][kind] = entry
    return out


def _fmt(v: float, ci: Sequence[float] | None = None, units: Any = None) -> str:
    """``value [lo, hi]``; ``value [n/a (k units)]`` when ``units`` were too few for an interval."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if ci is not None and all(c is not None and not math.isnan(c) for c in ci):
        from probe.reports.compare.tables import fmt_ci  # the report-wide rule (a zero-width interval: CI n/a)

        return fmt_ci(v, ci)
    if units is not None and not enough(units):
        return f"{v:.2f} [{na_text(units)}]"
    return f"{v:.2f}"


def table2(summary: dict[str, Any], version: str = "expected", model: str = "model") -> pd.DataFrame:
    """The paper's Table 2 layout: one row per strategy|format, macro over dimensions, with CIs and counts."""
    rows = []
    for key, kinds in summary.items():
        def cell(kind: str, metric: str) -> str:
            e = kinds.get(kind, {}).get(version)
            if e is None:
                return "—"
            return _fmt(e["macro"][metric], e["macro"][f"{metric}_ci"], e["macro"].get("n_units"))

        def n(kind: str, cond: str) -> int:
            e = kinds.get(kind, {}).get(version)
            return 0 if e is None else e["pooled"][f"n_{cond}"]

        rows.append({
            "Model": model, "Strategy/format": key.replace("|", "/"),
            "Acc Amb Exp": cell("explicit", "acc_amb"), "Acc Amb Imp": cell("implicit", "acc_amb"),
            "Acc Dis Exp": cell("explicit", "acc_dis"), "Acc Dis Imp": cell("implicit", "acc_dis"),
            "Bias Amb Exp": cell("explicit", "bias_amb"), "Bias Amb Imp": cell("implicit", "bias_amb"),
            "Bias Dis Exp": cell("explicit", "bias_dis"), "Bias Dis Imp": cell("implicit", "bias_dis"),
            "Neutral Amb": cell("neutral", "acc_amb"), "Neutral Dis": cell("neutral", "acc_dis"),
            "NoChar Amb": cell("nochar", "acc_amb"), "NoChar Dis": cell("nochar", "acc_dis"),
            "n (exp amb/dis, imp amb/dis)": f"{n('explicit', 'amb')}/{n('explicit', 'dis')}, "
                                            f"{n('implicit', 'amb')}/{n('implicit', 'dis')}",
            "answer mass": _fmt(kinds.get("_mass", {}).get("mean", math.nan)),
        })
    return pd.DataFrame(rows)


def tables_per_dimension(summary: dict[str, Any], key: str, version: str = "expected") -> pd.DataFrame:
    """Tables 5-7 layout for one strategy|format: per dimension, E and I rows, ambiguous Acc and Bias."""
    kinds = summary.get(key, {})
    rows = []
    dims = sorted({d for k in ("explicit", "implicit") for d in kinds.get(k, {}).get(version, {}).get("by_dimension", {})})
    for d in dims:
        for kind, tag in (("explicit", "E"), ("implicit", "I")):
            m = kinds.get(kind, {}).get(version, {}).get("by_dimension", {}).get(d)
            if m is None:
                continue
            units = m.get("n_clusters_amb")
            rows.append({"Dim.": d, "": tag, "Acc": _fmt(m["acc_amb"], m["ci"]["acc_amb"], units),
                         "Bias": _fmt(m["bias_amb"], m["ci"]["bias_amb"], units),
                         # None: no ambiguous item of this dimension (a small --limit takes part of a unit)
                         "abs(Bias)>=0.10": "yes" if m["bias_amb"] is not None and abs(m["bias_amb"]) >= 0.10 else "",
                         "n_amb": m["n_amb"]})
    return pd.DataFrame(rows)


def figure3(summary: dict[str, Any], key: str, path: str | Path, version: str = "expected", model: str = "",
            ci_unit: str | None = None) -> None:
    """Bias score per dimension for explicit/implicit x ambiguous/disambiguated (like the paper's Figure 3)."""

    matplotlib.use("Agg")

    kinds = summary.get(key, {})
    series = [("explicit", "bias_amb", "Exp. amb"), ("implicit", "bias_amb", "Imp. amb"),
              ("explicit", "bias_dis", "Exp. dis"), ("implicit", "bias_dis", "Imp. dis")]
    dims = sorted({d for k in ("explicit", "implicit") for d in kinds.get(k, {}).get(version, {}).get("by_dimension", {})})
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.2
    for j, (kind, metric, label) in enumerate(series):
        vals, lo, hi = [], [], []
        for d in dims:
            m = kinds.get(kind, {}).get(version, {}).get("by_dimension", {}).get(d)
            v = m[metric] if m else math.nan
            ci = m["ci"][metric] if m else [math.nan, math.nan]
            vals.append(v)
            lo.append(v - ci[0] if not math.isnan(ci[0]) else 0)
            hi.append(ci[1] - v if not math.isnan(ci[1]) else 0)
        x = np.arange(len(dims)) + (j - 1.5) * width
        ax.bar(x, vals, width, yerr=[lo, hi], capsize=2, label=label)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(np.arange(len(dims)), dims)
    ax.set_ylabel("bias score")
    ax.set_ylim(-1, 1)
    ci = f"95% CI, {ci_unit} clusters resampled" if ci_unit else "95% bootstrap CI over items"
    ax.set_title(f"ImplicitBBQ bias by dimension ({model} {key}, {version}; {ci})", fontsize=9)
    ax.legend(ncol=4, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub Markdown table (pandas' ``to_markdown`` needs the optional ``tabulate``)."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    return "\n".join(lines)


def write_reports(records: Sequence[dict], out: str | Path, n_boot: int = 1000, seed: int = 0,
                  model: str = "model") -> dict[str, Any]:
    """summary.json, tables/*.md|csv and figure3.png under ``out``."""

    out = Path(out)
    summary = summarize(records, n_boot=n_boot, seed=seed)
    write_json_atomic(out / "summary.json", summary)
    tdir = out / "tables"
    tdir.mkdir(parents=True, exist_ok=True)
    for version in VERSIONS:
        t2 = table2(summary, version, model)
        write_atomic(tdir / f"table2_{version}.md", to_markdown(t2) + "\n")
        write_atomic(tdir / f"table2_{version}.csv", t2.to_csv(index=False))
        for key in summary:
            tk = tables_per_dimension(summary, key, version)
            name = key.replace("|", "_")
            write_atomic(tdir / f"per_dimension_{name}_{version}.md", to_markdown(tk) + "\n")
            write_atomic(tdir / f"per_dimension_{name}_{version}.csv", tk.to_csv(index=False))
    for key in summary:
        if key.startswith("zero_shot"):
            figure3(summary, key, out / f"figure3_{key.replace('|', '_')}.png", model=model)
    return summary
