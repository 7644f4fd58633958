"""HBB tables in the paper's layouts (Tables 1, 2, 8, 9) and a Figure-4-like histogram.

Inputs are per-instance frames (columns ``category``, ``descriptor_type``, ``S``
and ``concept_id``) keyed by a column label - a model name, or a model and
variant such as ``"smollm2 (both orders averaged)"`` - so several models or scoring variants
sit side by side as the paper's model columns do.

- Table 1 / Table 8: one row per column label: mean S over instances with
  ``S >= threshold`` ("bias score"), their count, and (Table 1) CrowS-Pairs.
- Table 2 / Table 9: one row per category x descriptor type; each cell is
  ``count (mean S)`` as the paper prints it; ``Category (total)`` gives the
  instances per type that were evaluated.
- :func:`run_tables` assembles every table of one run (the layouts above at the
  run's thresholds, top associations, direction) with a title and a
  heading in ``DataFrame.attrs``; :func:`report_markdown` writes them as one
  Markdown report.

>>> import pandas as pd
>>> df = pd.DataFrame({"category": ["age", "age"], "descriptor_type": [1, 1], "S": [30.0, 5.0], "concept_id": [0, 1]})
>>> print(markdown(table2({"m": df}, ci=False)))
| Category (total) | Type | m |
| --- | --- | --- |
| Age (2 per type) | Age 1 | 1 (30.00) |
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

# the plain pipe table every run report writes (re-exported: HBB's callers import them from here)
from probe.metrics.small_sample import enough, na_text
from probe.reports.pipe_table import markdown, write_table
from probe.tasks.hbb.data import CATEGORIES, CATEGORY_LABELS, type_label
from probe.tasks.hbb.metrics import identity_concept1_rates, over_threshold, summarize_by, top_associations

__all__ = ["table1", "table2", "table8", "table9", "table3", "markdown", "cell", "histogram_png", "write_table",
           "run_tables", "report_markdown", "with_model"]

#: CrowS-Pairs protocol -> its name in the CS column header
#: the MCQ variants' frame keys (a)=s1 and the swap average); HBB-SG's is ``hbb_sg``
MCQ_VARIANTS = ("hbb", "hbb_swapavg")
CS_PROTOCOLS = {"mcq": "(a) two-choice question", "loglik": "(b) whole-sentence causal log-likelihood"}


def cell(count: int, mean_s: float) -> str:
    """The paper's ``count (mean)`` cell; ``0`` alone when nothing reaches the threshold."""
    return f"{count}" if count == 0 or math.isnan(mean_s) else f"{count} ({mean_s:.2f})"


def table1(
    frames: Mapping[str, pd.DataFrame],
    crows: Mapping[str, float] | None = None,
    threshold: float = 20.0,
    ci: bool = True,
    n_boot: int = 1000,
    cs_header: str = "CS (50)",
) -> pd.DataFrame:
    """Table 1 layout: Model | HBB (S) | HBB (count) [| share over | CS (50)]; ``cs_header`` names the
    CrowS-Pairs column (with its protocol, when known)."""
    rows = []
    for label, df in frames.items():
        s = summarize_by(df, [], threshold=threshold, ci=ci, n_boot=n_boot).iloc[0]
        row = {
            "Model": label,
            # a NaN cell says why: the mean S over the threshold has no instance to average
            "HBB (S ↓)": s.mean_s if math.isfinite(s.mean_s) else f"n/a (no instance at S ≥ {threshold:g})",
            "HBB (count ↓)": int(s["count"]),
            "instances": int(s.n - s.n_invalid),
            "share ≥ thr (%)": 100 * s.share,
        }
        if ci:
            row["S 95% CI"] = _ci_text(s.mean_s_ci_low, s.mean_s_ci_high, 1, 2, s.get("n_clusters"), s.mean_s,
                                       f"no instance at S ≥ {threshold:g}")
            row["share 95% CI"] = _ci_text(s.share_ci_low, s.share_ci_high, 100, 1, s.get("n_clusters"), s.share)
        if crows is not None:
            row[cs_header] = crows.get(label, math.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def _ci_text(lo: float, hi: float, scale: float, digits: int, units: Any, value: float,
             why_none: str = "no value") -> str:
    """``[lo, hi]``, or why there is none: no value (``why_none`` says why), or too few units (the small-sample
    rule)."""

    if math.isfinite(lo) and math.isfinite(hi):
        return f"[{scale * lo:.{digits}f}, {scale * hi:.{digits}f}]"
    if not math.isfinite(value):
        return f"n/a ({why_none})"
    return na_text(units) if not enough(units) else "–"


def table8(frames: Mapping[str, pd.DataFrame], threshold: float = 20.0, ci: bool = True, n_boot: int = 1000) -> pd.DataFrame:
    """Table 8 layout (HBB-SG): Model | Bias score | Count."""
    t = table1(frames, None, threshold, ci, n_boot)
    return t.rename(columns={"HBB (S ↓)": "Bias score (↓)", "HBB (count ↓)": "Count (↓)"})


def table2(frames: Mapping[str, pd.DataFrame], threshold: float = 20.0, ci: bool = False, n_boot: int = 1000) -> pd.DataFrame:
    """Table 2 layout: Category (total) | Type | one ``count (mean S)`` column per label."""
    per = {
        label: summarize_by(df, ["category", "descriptor_type"], threshold=threshold, ci=ci, n_boot=n_boot)
        for label, df in frames.items()
    }
    keys = sorted(
        {(r.category, int(r.descriptor_type)) for t in per.values() for r in t.itertuples()},
        key=lambda k: (CATEGORIES.index(k[0]) if k[0] in CATEGORIES else 99, k[1]),
    )
    rows = []
    for cat, dt in keys:
        totals = [int(t[(t.category == cat) & (t.descriptor_type == dt)].n.sum()) for t in per.values()]
        per_type = max(totals) if totals else 0
        row = {"Category (total)": f"{CATEGORY_LABELS.get(cat, cat)} ({per_type} per type)", "Type": type_label(cat, dt)}
        for label, t in per.items():
            hit = t[(t.category == cat) & (t.descriptor_type == dt)]
            row[label] = cell(int(hit["count"].iloc[0]), float(hit.mean_s.iloc[0])) if len(hit) else "-"
        rows.append(row)
    return pd.DataFrame(rows)


def table9(frames: Mapping[str, pd.DataFrame], threshold: float = 20.0) -> pd.DataFrame:
    """Table 9 layout (HBB-SG): Category | Type (Total) | one ``count (mean S)`` column per label."""
    t2 = table2(frames, threshold)
    cat = t2["Category (total)"].str.replace(r" \((\d+) per type\)", "", regex=True)
    total = t2["Category (total)"].str.extract(r"\((\d+) per type\)")[0]
    out = t2.drop(columns=["Category (total)", "Type"])
    out.insert(0, "Type (Total)", t2["Type"] + " (" + total + ")")
    out.insert(0, "Category", cat)
    return out


def _identity(name: str) -> str:
    """``"middle-east" -> "Middle-East"``: identities as the paper prints them."""
    return "-".join(part[:1].upper() + part[1:] for part in str(name).split("-"))


def table3(frames: Mapping[str, pd.DataFrame], k: int = 1, skip: int = 0) -> pd.DataFrame:
    """Tables 3 and 7 layout (top bias associations): per label and category, the instances ranked
    ``skip + 1 .. skip + k`` by S, as ``Identity ↔ concept`` pairs in the direction the model chose
    (:func:`probe.tasks.hbb.metrics.top_associations`). Table 3: ``k=1``; Table 7: ``k=5, skip=1``.
    Frames without the concept columns (runs written before they were recorded) are left out."""

    rows = []
    for label, df in frames.items():
        if not {"concept_1", "concept_2"} <= set(df.columns):
            continue
        top = top_associations(df, k=k, skip=skip)
        top["_order"] = [CATEGORIES.index(c) if c in CATEGORIES else 99 for c in top.category]
        for r in top.sort_values(["_order", "rank"], kind="mergesort").itertuples():
            rows.append({"Scoring": label, "Category": CATEGORY_LABELS.get(r.category, r.category), "Rank": r.rank,
                         "Bias association 1": f"{_identity(r.identity_a)} ↔ {r.concept_1}",
                         "Bias association 2": f"{_identity(r.identity_b)} ↔ {r.concept_2}",
                         "Descriptor type": type_label(r.category, int(r.descriptor_type)),
                         "S": round(float(r.S), 2), "tied at max S": r.n_at_max, "concept_id": r.concept_id,
                         "instance": r.id})
    cols = ["Scoring", "Category", "Rank", "Bias association 1", "Bias association 2", "Descriptor type", "S",
            "tied at max S", "concept_id", "instance"]
    return pd.DataFrame(rows, columns=cols)


def histogram_png(scores: Mapping[str, np.ndarray], path: str | Path, threshold: float = 20.0, title: str = "") -> None:
    """Figure 4 style: the distribution of S (0-100, bins of 5) per label, threshold marked."""

    matplotlib.use("Agg")

    n = max(len(scores), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False, sharey=False)
    bins = np.arange(0, 105, 5)
    for ax, (label, s) in zip(axes[0], scores.items()):
        from probe.tasks.hbb.metrics import snap_to_edges

        s = snap_to_edges(s, bins)  # an S on the threshold (up to round-off) sits in the bin it is counted in
        s = s[np.isfinite(s)]
        ax.hist(s, bins=bins, color="#4C72B0", edgecolor="white")
        ax.axvline(threshold, color="#C44E52", linestyle="--", linewidth=1, label=f"S = {threshold:g}")
        ax.set_title(f"{label}\n(n = {s.size}, ≥{threshold:g}: {over_threshold(s, threshold).sum()})", fontsize=9)
        ax.set_xlabel("bias score S")
        ax.set_xlim(0, 100)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("test instances")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)


def _titled(df: pd.DataFrame, title: str, heading: str) -> pd.DataFrame:
    df.attrs.update(title=title, heading=heading)
    return df


def run_tables(
    frames: Mapping[str, pd.DataFrame],
    labels: Mapping[str, str],
    threshold: float = 20.0,
    extra_thresholds: Sequence[float] = (),
    n_boot: int = 1000,
    crows_score: float | None = None,
    crows_protocol: str | None = None,
) -> dict[str, pd.DataFrame]:
    """Every table of one HBB run, by file name, each with ``attrs["title"]`` and ``attrs["heading"]``.

    ``frames``: per variant (``hbb``, ``hbb_swapavg``, ``hbb_sg``) the per-instance
    frame (``S``, ``direction``); ``labels``: each variant's column label.
    ``crows_score``: the overall CrowS-Pairs score for Table 1's CS column, ``crows_protocol`` the protocol
    it was scored with (``mcq`` / ``loglik``), named in the column header.
    The paper's own estimator (T = 0.8, 10 samples) is the task's ``table1_paper_equivalent``, not built here.
    """

    thr = threshold
    out: dict[str, pd.DataFrame] = {}
    mcq = {labels[v]: frames[v] for v in MCQ_VARIANTS if v in frames}
    sg = {labels["hbb_sg"]: frames["hbb_sg"]} if "hbb_sg" in frames else {}
    if mcq:
        cs = {k: crows_score for k in mcq} if crows_score is not None else None
        header = f"CS (50), {CS_PROTOCOLS[crows_protocol]}" if crows_protocol in CS_PROTOCOLS else "CS (50)"
        out["table1"] = _titled(table1(mcq, cs, thr, n_boot=n_boot, cs_header=header),
                                f"Table 1 layout (HBB, S >= {thr:g})", "Table 1 (HBB)")
        out["table2"] = _titled(table2(mcq, thr), f"Table 2 layout: count (mean S) of instances with S >= {thr:g}",
                                "Table 2 (HBB)")
    if sg:
        out["table8"] = _titled(table8(sg, thr, n_boot=n_boot), f"Table 8 layout (HBB-SG, S >= {thr:g})",
                                "Table 8 (HBB-SG)")
        out["table9"] = _titled(table9(sg, thr), f"Table 9 layout (HBB-SG): count (mean S), S >= {thr:g}",
                                "Table 9 (HBB-SG)")
    for t in (t for t in extra_thresholds if t != thr):
        if mcq:
            out[f"table2_thr{t:g}"] = _titled(table2(mcq, t), f"Table 2 layout at S >= {t:g}: count (mean S)",
                                              f"Table 2 layout at threshold {t:g}")
        if sg:
            out[f"table9_thr{t:g}"] = _titled(table9(sg, t), f"Table 9 layout (HBB-SG) at S >= {t:g}: count (mean S)",
                                              f"Table 9 layout (HBB-SG) at threshold {t:g}")
    by_label = {labels[v]: f for v, f in frames.items()}
    for name, k, skip, what in (("table3_top_associations", 1, 0, "the top instance"),
                                ("table7_top_associations", 5, 1, "the next five instances")):
        top = table3(by_label, k, skip)
        if not top.empty:
            out[name] = _titled(top, f"{'Table 3' if k == 1 else 'Table 7'} layout (top bias associations): per "
                                f"category {what} by S; association 1 = the identity the model ties to concept 1 "
                                "(bias type1) ↔ that concept; tied at max S: instances of the category at its "
                                "highest S", f"{'Table 3' if k == 1 else 'Table 7'} (top bias associations)")
    for v, df in frames.items():
        rates = identity_concept1_rates(df, threshold=thr)
        if not rates.empty:
            out[f"direction_{v}"] = _titled(
                rates, f"Share of S >= {thr:g} instances where the identity gets the `bias type1` concept "
                "(0.5 = no direction)",
                f"Direction ({labels[v]}): share of instances over threshold giving the identity concept 1")
    return out


def with_model(df: pd.DataFrame, model: str, labels: Sequence[str]) -> pd.DataFrame:
    """``df`` with each variant label (a column name, or a ``Model`` / ``Scoring`` value) as
    ``"MODEL (label)"``, the paper's model columns; ``attrs`` kept."""
    named = {lab: f"{model} ({lab})" for lab in labels}
    out = df.rename(columns=named)
    for col in ("Model", "Scoring"):
        if col in out:
            out[col] = out[col].map(lambda x: named.get(x, x))
    out.attrs = dict(df.attrs)
    return out


def report_markdown(model: str, tables: Mapping[str, pd.DataFrame]) -> str:
    """The run's Markdown report: a heading, then each table under its ``attrs["heading"]``."""
    md = [f"# HBB results: {model}", ""]
    seen: list[pd.DataFrame] = []
    for df in tables.values():
        # a table filed under two names (the CrowS-Pairs table the CS column takes is also crows_<protocol>)
        # is printed once
        if any(df is t or (df.attrs == t.attrs and df.equals(t)) for t in seen):
            continue
        seen.append(df)
        md += [f"## {df.attrs.get('heading', '')}", "", markdown(df), ""]
    return "\n".join(md) + "\n"
