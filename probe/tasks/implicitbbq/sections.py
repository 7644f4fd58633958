"""ImplicitBBQ's section of ``probe report``: Table 2 (exact and paper-equivalent), Tables 5-7 and Figures 3
and 4 with several models.

Input: the runs' ``summary.json``, ``by_strategy["strategy|format"][context_kind]``
as :func:`probe.tasks.implicitbbq.tables.summarize` builds it (macro over dimensions,
pooled, per dimension; CIs).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd

from probe.reports.compare.common import bars, boots, ci_unit, model_labels
from probe.reports.compare.runs import Run
from probe.reports.compare.tables import Figure, Table, fmt, save_figure
from probe.reports.headline import phrase
from probe.tasks.bbq.sections import ESTIMATOR
from probe.tasks.implicitbbq.figures import figure4
from probe.tasks.implicitbbq.tables import table2, tables_per_dimension
from probe.tasks.implicitbbq.terms import TERMS

__all__ = ["implicitbbq_section", "table2_paper"]


def _words(key: str) -> str:
    """A strategy|format key as the paper names it: ``zero_shot|oneword`` -> ``zero-shot, one-word answer``."""

    return phrase(key, TERMS)


def _macro(summary: dict, key: str, kind: str, version: str, metric: str) -> float:
    e = summary.get(key, {}).get(kind, {}).get(version)
    v = e["macro"][metric] if e else None
    return math.nan if v is None else float(v)


def _delta(exp: float, imp: float, bold_drop: float | None = None) -> str:
    """The paper's change cell: direction arrow and size at two decimals, blank when unchanged."""
    if not (math.isfinite(exp) and math.isfinite(imp)):
        return "–"
    d = round(imp, 2) - round(exp, 2)
    if abs(d) < 0.005:
        return ""
    s = f"{'↑' if d > 0 else '↓'}{abs(d):.2f}"
    return f"**{s}**" if bold_drop is not None and -d > bold_drop else s


def _bias(x: float) -> str:
    return f"**{fmt(x)}**" if math.isfinite(x) and x > 0.15 else fmt(x)


def table2_paper(summaries: Sequence[tuple[str, dict]], key: str, version: str) -> pd.DataFrame:
    """The paper's Table 2 (models as rows): Exp., Imp. and the explicit -> implicit change for ambiguous and
    disambiguated accuracy and bias (macro over dimensions), then the control accuracies; bold: accuracy
    drop > 0.30, bias > 0.15."""
    rows = []
    for label, s in summaries:
        if key not in s:
            continue
        row: dict[str, Any] = {"Model": label}
        for metric, name in (("acc_amb", "Acc Amb"), ("acc_dis", "Acc Dis"), ("bias_amb", "Bias Amb"),
                             ("bias_dis", "Bias Dis")):
            e, i = _macro(s, key, "explicit", version, metric), _macro(s, key, "implicit", version, metric)
            acc = metric.startswith("acc")
            row[f"{name} Exp."] = fmt(e) if acc else _bias(e)
            row[f"{name} Imp."] = fmt(i) if acc else _bias(i)
            row[f"{name} Δ"] = _delta(e, i, 0.30 if acc else None)
        for kind, name in (("neutral", "Neutral"), ("nochar", "NoChar")):
            row[f"{name} Amb."] = fmt(_macro(s, key, kind, version, "acc_amb"))
            row[f"{name} Dis."] = fmt(_macro(s, key, kind, version, "acc_dis"))
        n = {k: s.get(key, {}).get(k, {}).get(version, {}).get("pooled", {}) for k in ("explicit", "implicit")}
        row["n (exp amb/dis, imp amb/dis)"] = "/".join(str(n[k].get(f"n_{c}", 0)) for k in n for c in ("amb", "dis"))
        rows.append(row)
    return pd.DataFrame(rows)


def implicitbbq_section(runs: Sequence[Run], out: Path) -> list[Any]:
    """Table 2 (paper layout, per zero-shot format and estimator) with its CI companion, Tables 5-7 (per
    dimension, model columns, every strategy|format), and the explicit-vs-implicit bias figure."""
    summaries = [(r.label, r.summary.get("by_strategy", {})) for r in runs]
    keys = list(dict.fromkeys(k for _, s in summaries for k in s))
    items: list[Any] = []
    paper = [(r.label, (r.summary.get("paper_equivalent") or {}).get("by_strategy") or {}) for r in runs]
    for key in (k for k in keys if k.startswith("zero_shot")):
        items += _table2_tables(runs, summaries, paper, key)
    items += _table2_ci_tables(runs, summaries)
    for key in keys:
        table = _per_dimension_table(runs, summaries, key)
        if table is not None:
            items.append(table)
    for key in (k for k in keys if k.startswith("zero_shot")):
        items.append(_implicit_figure(runs, key, out))
    for fmt_name in dict.fromkeys(k.split("|")[1] for k in keys if "|" in k):
        items.append(figure4(runs, fmt_name, out))
    return items


def _table2_tables(runs: Sequence[Run], summaries: list[tuple[str, dict]], paper: list[tuple[str, dict]],
                   key: str) -> list[Table]:
    """Table 2 in the paper's layout for one zero-shot strategy|format: per exact estimator, and the
    paper-equivalent one beside them when a run has it."""
    items = []
    for version in ("expected", "argmax"):
        items.append(Table(
            f"implicitbbq_table2_{key.replace('|', '_')}_{version}", "implicitbbq",
            f"ImplicitBBQ Table 2 layout ({_words(key)}, {version})",
            f"Task implicitbbq, models {model_labels(runs)}. Estimator: {ESTIMATOR[version]}; model-wise scores are "
            f"the mean over dimensions (the paper's rule). n: items pooled over dimensions (last column). {T2_RULES}"
            f" No CIs in this layout; they are in implicitbbq_table2_ci_{version}.",
            table2_paper(summaries, key, version)))
    if any(key in s for _, s in paper):  # the paper's own estimator beside the exact one
        items.append(Table(
            f"implicitbbq_table2_{key.replace('|', '_')}_paper", "implicitbbq",
            f"ImplicitBBQ Table 2 layout ({_words(key)}, paper-equivalent: {_paper_settings(runs)})",
            f"Task implicitbbq, models {model_labels([r for r, (_, s) in zip(runs, paper) if key in s])}. Estimator: "
            f"paper-equivalent ({_paper_settings(runs)}, the paper's answer sampling): expected counts if each "
            "answer were sampled at that setting, computed exactly from the same scores and conditional on the "
            "sample being one of the scored answers; mean over dimensions. n: items pooled over dimensions (last "
            f"column; items none of whose answers can be sampled are left out). {T2_RULES} No CIs in this layout; "
            "each run's summary.json paper_equivalent holds them.", table2_paper(paper, key, "expected")))
    return items


def _table2_ci_tables(runs: Sequence[Run], summaries: list[tuple[str, dict]]) -> list[Table]:
    """Table 2's values with their CIs, per estimator: every strategy and answer format, models stacked."""

    ci_text = (f"CI: 95% percentile cluster bootstrap: whole clusters ({ci_unit(runs)}) resampled, within each "
               f"dimension for the macro mean; n_boot = {boots(runs)}")
    items = []
    for version in ("expected", "argmax"):
        frames = [table2({k: v for k, v in s.items()}, version, label) for label, s in summaries]
        df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        if "Strategy/format" in df:
            df["Strategy/format"] = [_words(str(k).replace("/", "|")) for k in df["Strategy/format"]]
        items.append(Table(f"implicitbbq_table2_ci_{version}", "implicitbbq",
                           f"ImplicitBBQ Table 2 values with CIs ({version}), every strategy and answer format",
                           f"Task implicitbbq, models {model_labels(runs)}. Estimator: {ESTIMATOR[version]}; mean over "
                           f"dimensions. n: last-but-one column. {ci_text}.", df))
    return items


def _per_dimension_table(runs: Sequence[Run], summaries: list[tuple[str, dict]], key: str) -> Table | None:
    """Tables 5-7's layout for one strategy|format: per dimension, ambiguous contexts, one column group per
    model (None when no run has it)."""

    merged = None
    for label, s in summaries:
        if key not in s:
            continue
        t = tables_per_dimension(s, key, "expected")
        if t.empty:
            continue
        t = t.rename(columns={"": "E/I"}).drop(columns=["abs(Bias)>=0.10"])
        t = t.rename(columns={c: f"{label} {c}" for c in ("Acc", "Bias", "n_amb")})
        bias = f"{label} Bias"
        t[bias] = [f"**{c}**" if _abs_ge(c, 0.10) else c for c in t[bias]]
        merged = t if merged is None else merged.merge(t, on=["Dim.", "E/I"], how="outer")
    if merged is None:
        return None
    return Table(f"implicitbbq_per_dimension_{key.replace('|', '_')}", "implicitbbq",
                 "ImplicitBBQ Tables 5-7 layout: per dimension, ambiguous contexts "
                 f"({_words(key)})",
                 f"Task implicitbbq, models {model_labels(runs)} (columns). E explicit, I implicit. Estimator: "
                 f"{ESTIMATOR['expected']}. n: the n_amb columns (items). CI: 95% percentile cluster "
                 f"bootstrap over {ci_unit(runs)} clusters (n_boot = {boots(runs)}). Bold: |Bias| ≥ 0.10 (the paper's "
                 "rule).",
                 merged)


T2_RULES = ("Δ: explicit → implicit change, ↑ up, ↓ down, blank unchanged at two decimals. Bold: accuracy drop > "
            "0.30; bias > 0.15.")

def _paper_settings(runs: Sequence[Run]) -> str:
    """The runs' paper-equivalent sampling settings, e.g. ``T = 0.1, top-p = 1`` (per run when they differ)."""
    per = {}
    for r in runs:
        st = (r.summary.get("paper_equivalent") or {}).get("settings") or {}
        if st:
            per[r.label] = f"T = {st.get('temperature', math.nan):g}, top-p = {st.get('top_p', math.nan):g}"
    vals = sorted(set(per.values()))
    return vals[0] if len(vals) == 1 else "; ".join(f"{k}: {v}" for k, v in per.items()) or "not computed"


def _abs_ge(cell: Any, thr: float) -> bool:
    try:
        return abs(float(str(cell).split(" ")[0])) >= thr
    except ValueError:
        return False


def _implicit_figure(runs: Sequence[Run], key: str, out: Path) -> Figure:
    matplotlib.use("Agg")

    dims = sorted({d for r in runs for k in ("explicit", "implicit")
                   for d in r.summary.get("by_strategy", {}).get(key, {}).get(k, {}).get("expected", {})
                   .get("by_dimension", {})})
    fig, ax = plt.subplots(figsize=(max(7, 1.6 * len(dims)), 3.8))
    series = []
    for r in runs:
        s = r.summary.get("by_strategy", {}).get(key, {})
        for kind, tag in (("explicit", "exp."), ("implicit", "imp.")):
            bd = s.get(kind, {}).get("expected", {}).get("by_dimension", {})
            series.append((f"{r.label} {tag}", [bd[d]["bias_amb"] if d in bd else math.nan for d in dims],
                           [bd[d]["ci"]["bias_amb"] if d in bd else None for d in dims]))
    bars(ax, dims, series)
    ax.set_ylim(-1, 1)
    ax.set_ylabel("bias, ambiguous (→0)")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(f"ImplicitBBQ ({_words(key)}): explicit vs implicit bias by dimension (Figure 3 layout)",
                 fontsize=9)
    fig.tight_layout()
    return save_figure(fig, out, f"implicitbbq_bias_{key.replace('|', '_')}", "implicitbbq",
                       f"ImplicitBBQ explicit vs implicit bias ({_words(key)})",
                       f"Task implicitbbq, models {model_labels(runs)}. Expected counts; whiskers: 95% percentile cluster "
                       f"bootstrap CI over {ci_unit(runs)} clusters (n_boot = {boots(runs)}); n per dimension in "
                       "the per-dimension table.")
