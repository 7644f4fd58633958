"""Multi-model layouts of CrowS-Pairs, HBB (Tables 1, 2, 8, 9; Figure 4), iso/cmp (Tables 2-7, E.1) and any task.

HBB tables are :mod:`probe.reports.hbb_tables` fed one per-instance frame per
model and variant (read back from each run's ``instances.jsonl``); iso/cmp
tables are :mod:`probe.reports.cmp_iso_tables` over
:func:`probe.reports.cmp_iso_models.combine_summaries` of the runs (parameter
counts from the provenance). A task without a layout here gets each run's own
``tables/*.csv``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from probe.reports.compare.bbq_layouts import _bars, _boots, _models
from probe.reports.compare.runs import Run
from probe.reports.compare.tables import Figure, Table, flatten, fmt, fmt_ci, save_figure

__all__ = ["crows_section", "hbb_section", "cmp_iso_section", "generic_section", "hbb_frames", "crows_scores"]


# -- CrowS-Pairs ---------------------------------------------------------------------------------------------
def crows_scores(runs: Sequence[Run]) -> dict[str, dict[str, dict]]:
    """label -> bias type -> the CrowS-Pairs row (a ``crows_pairs`` run, or an ``hbb`` run that scored it)."""
    out = {}
    for r in runs:
        rows = r.summary.get("by_bias_type") or (r.summary.get("crows_pairs") or {}).get("by_bias_type") or []
        out[r.label] = {row["bias_type"]: row for row in rows}
    return out


def crows_section(runs: Sequence[Run], out: Path) -> list[Any]:
    scores = crows_scores(runs)
    types = list(dict.fromkeys(t for s in scores.values() for t in s))
    types = [t for t in types if t != "all"] + (["all"] if "all" in types else [])
    rows = []
    for t in types:
        row: dict[str, Any] = {"Bias type": t}
        for label, s in scores.items():
            x = s.get(t)
            row[label] = "–" if x is None else f"{fmt_ci(x['score'], [x['ci_low'], x['ci_high']], 1)} (n={x['n']})"
        rows.append(row)
    items: list[Any] = [Table("crows_pairs", "crows_pairs", "CrowS-Pairs: % of pairs where the more stereotypical "
                              "sentence is more likely (50 = no bias)",
                              f"Task crows_pairs, models {_models(runs)} (columns). Estimator: exact sentence "
                              "log-likelihoods (sum over tokens), each pair counted for the sentence with the higher "
                              "one; ties count as not stereotypical. n: valid pairs per cell. CI: Wilson 95%.",
                              pd.DataFrame(rows))]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(7, 0.9 * len(types)), 3.8))
    series = [(label, [s[t]["score"] if t in s else math.nan for t in types],
               [[s[t]["ci_low"], s[t]["ci_high"]] if t in s else None for t in types]) for label, s in scores.items()]
    _bars(ax, types, series)
    ax.axhline(50, color="#C44E52", ls="--", lw=1)
    ax.set_ylim(0, 100)
    ax.set_ylabel("CrowS-Pairs score (50 = no bias)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    items.append(save_figure(fig, out, "crows_pairs_by_type", "crows_pairs", "CrowS-Pairs by bias type",
                             f"Task crows_pairs, models {_models(runs)}. Exact log-likelihood comparison; whiskers: "
                             "Wilson 95% CI; n per cell in table crows_pairs."))
    return items


# -- HBB -----------------------------------------------------------------------------------------------------
VARIANTS = {"hbb": "a)=s1", "hbb_swapavg": "swap-avg", "hbb_sg": "HBB-SG"}


def hbb_frames(run: Run) -> dict[str, pd.DataFrame]:
    """variant -> the per-instance frame (``S``, ``direction``, p1/p2, concept_id) from ``instances.jsonl``;
    HBB-SG keeps the instances of its subset only (``in_sg``), as the task does."""
    path = run.path / "instances.jsonl"
    if not path.is_file():
        return {}
    from probe.io import iter_jsonl

    inst = pd.DataFrame([obj for _, obj in iter_jsonl(path)])
    frames = {}
    for v in VARIANTS:
        if f"{v}_S" not in inst:
            continue
        df = inst.rename(columns={f"{v}_S": "S", f"{v}_direction": "direction", f"{v}_p1": "p1", f"{v}_p2": "p2"})
        df["S"] = pd.to_numeric(df["S"], errors="coerce")  # JSON null (a non-finite record) is NaN
        if v == "hbb_sg" and "in_sg" in df:
            df = df[df.in_sg.astype(bool)]
        frames[v] = df
    return frames


def hbb_section(runs: Sequence[Run], out: Path, crows_runs: Sequence[Run] = ()) -> list[Any]:
    """Tables 1 and 2 (MCQ: both variants per model), 8 and 9 (HBB-SG), exact vs 10 samples, Figure 4."""
    from probe.reports.hbb_tables import table1, table2, table8, table9

    thr = float(runs[0].summary.get("threshold", 20.0))
    if any(float(r.summary.get("threshold", thr)) != thr for r in runs):
        thr_note = " (runs differ in threshold; all tables use the first run's)"
    else:
        thr_note = ""
    frames = {r.label: hbb_frames(r) for r in runs}
    cs_by_model = {r.model: s.get("all", {}).get("score")
                   for r, s in zip(crows_runs, crows_scores(crows_runs).values())}
    cs_own = {r.label: (crows_scores([r])[r.label].get("all") or {}).get("score") for r in runs}
    nb, models = _boots(runs), _models(runs)
    mcq = {f"{label} ({VARIANTS[v]})": f for label, fr in frames.items() for v, f in fr.items() if v != "hbb_sg"}
    sg = {f"{label} (HBB-SG)": fr["hbb_sg"] for label, fr in frames.items() if "hbb_sg" in fr}
    crows = {f"{r.label} ({VARIANTS[v]})": _num(cs_own.get(r.label), cs_by_model.get(r.model))
             for r in runs for v in frames[r.label] if v != "hbb_sg"}
    est = ("exact S = |P1(A) − P2(A)| × 100 from next-token label probabilities; a)=s1: one option order, "
           "swap-avg: P(s1) averaged over both orders")
    items: list[Any] = []
    if mcq:
        t1 = table1(mcq, crows if any(math.isfinite(v) for v in crows.values()) else None, thr,
                    n_boot=max(runs[0].n_boot or 1000, 1))
        items.append(Table("hbb_table1", "hbb", f"HBB Table 1 layout (S ≥ {thr:g}){thr_note}", (
            f"Task hbb, models {models}. Estimator: {est}. HBB (S): mean S over instances with S ≥ {thr:g}; count: "
            "their number; n: the instances column. CI: 95% percentile bootstrap over concept pairs (clusters), "
            f"n_boot = {runs[0].n_boot}. CS (50): the CrowS-Pairs score of the same model (a crows_pairs run or the "
            "hbb run's own), Wilson CI in the CrowS-Pairs section."), flatten(t1).replace("[nan, nan]", "–")))
        items.append(Table("hbb_table2", "hbb", f"HBB Table 2 layout: count (mean S) of instances with S ≥ {thr:g}", (
            f"Task hbb, models {models} (columns). Estimator: {est}. n: instances per type in the first column. "
            "CI: none in this layout (see Table 1)."), flatten(table2(mcq, thr))))
    if sg:
        items.append(Table("hbb_table8", "hbb", f"HBB-SG Table 8 layout (S ≥ {thr:g})", (
            f"Task hbb, models {models}. Estimator: exact HBB-SG, P(A) ∝ 1/PPL of each option sentence (one "
            f"variation per option). n: the instances column. CI: 95% percentile bootstrap over concept pairs, "
            f"n_boot = {runs[0].n_boot}."),
            flatten(table8(sg, thr, n_boot=max(runs[0].n_boot or 1000, 1))).replace("[nan, nan]", "–")))
        items.append(Table("hbb_table9", "hbb", f"HBB-SG Table 9 layout: count (mean S), S ≥ {thr:g}", (
            f"Task hbb, models {models} (columns). Estimator: exact HBB-SG (perplexity). n: per type in the Type "
            "column. CI: none in this layout."), flatten(table9(sg, thr))))
    rows = []
    for r in runs:
        for v, s in r.summary.get("variants", {}).items():
            e = s.get("sampled_10_expected") or {}
            o = s.get("overall") or {}
            rows.append({"Model": r.label, "Variant": VARIANTS.get(v, v), "n": o.get("n"),
                         "exact count": o.get("count"), "exact mean S": fmt(o.get("mean_s")),
                         "10 samples: expected count": fmt(e.get("expected_count"), 1),
                         "10 samples: expected mean S": fmt(e.get("expected_mean_s"))})
    if rows:
        items.append(Table("hbb_sampling", "hbb", "HBB: exact scoring vs the paper's 10-sample estimator", (
            f"Task hbb, models {models}. Estimators: exact (counts of instances with S ≥ {thr:g}) and "
            "paper-equivalent (the expected count and mean S if each question were answered by 10 samples at T = 1 "
            "from the same probabilities, computed exactly). n: instances. CI: none (expectations)."),
            pd.DataFrame(rows)))
    if frames:
        items.append(_hbb_hist(frames, thr, out, models))
    return items


def _hbb_hist(frames: Mapping[str, Mapping[str, pd.DataFrame]], thr: float, out: Path, models: str) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = [v for v in VARIANTS if any(v in fr for fr in frames.values())]
    fig, axes = plt.subplots(len(variants), 1, figsize=(7, 2.4 * len(variants)), squeeze=False)
    bins = np.arange(0, 105, 5)
    for ax, v in zip(axes[:, 0], variants):
        data = [(label, fr[v]["S"].to_numpy(dtype=float)) for label, fr in frames.items() if v in fr]
        ax.hist([d[np.isfinite(d)] for _, d in data], bins=bins,
                label=[f"{lab} (n={np.isfinite(d).sum()}, ≥{thr:g}: {(d >= thr).sum()})" for lab, d in data])
        ax.axvline(thr, color="#C44E52", ls="--", lw=1)
        ax.set_xlim(0, 100)
        ax.set_ylabel(f"{VARIANTS[v]}\ninstances", fontsize=8)
        ax.legend(fontsize=7)
    axes[-1, 0].set_xlabel("bias score S")
    fig.suptitle("Hidden bias score distributions (Figure 4 layout)", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out, "hbb_hist", "hbb", "HBB: distribution of S per model and variant",
                       f"Task hbb, models {models}. Exact S per test instance (bins of 5); dashed: threshold "
                       f"{thr:g}; n per model in the legend. No CI (a distribution).")


# -- iso / cmp -----------------------------------------------------------------------------------------------
def cmp_iso_section(runs: Sequence[Run], out: Path, params_b: Mapping[str, float] | None = None) -> list[Any]:
    """Seed 003 Tables 2-7 (rows = models) for both estimators, the cross-model correlations, the PG plot."""
    from probe.reports.cmp_iso_models import combine_summaries
    from probe.reports.cmp_iso_tables import build_tables, plot_pg

    sizes = {r.label: r.params_b for r in runs if math.isfinite(r.params_b)}
    sizes.update(params_b or {})
    summary = combine_summaries([{**r.summary, "model": r.label, "params_b": {}} for r in runs], sizes)
    pairs = "; ".join(f"{r.label}: " + ", ".join(f"{b} {n}" for b, n in (r.summary.get("n_pairs") or {}).items())
                      for r in runs)
    models = _models(runs)
    items: list[Any] = []
    for mode, suffix in (("expected", ""), ("argmax", "_argmax")):
        for name, (title, df) in build_tables(summary, mode).items():
            if mode == "argmax" and name.startswith(("label_mass", "variants")):
                continue
            est = ("exact expected counts (label probabilities, T = 1)" if mode == "expected"
                   else "argmax answers")
            sign = f" {df.attrs['caption']}" if df.attrs.get("caption") else ""  # what PG > 0 means per benchmark
            items.append(Table(f"cmp_iso_{name}{suffix}", "cmp_iso", title, (
                f"Task cmp_iso, models {models} (rows). Estimator: {est}. n: context pairs per benchmark ({pairs}). "
                f"CI: 95% percentile bootstrap over context pairs (n_boot = {summary.get('n_boot')}) in the PG figure; "
                f"∗: approximate randomization test p < {summary.get('alpha')} "
                f"(n_iter = {summary.get('n_iter')}).{sign}"),
                flatten(df)))
    corr = [{"setting": c["setting"], "benchmark": c["benchmark"], "paradigm": c["paradigm"], "n models": c["n_models"],
             "Pearson r (PG, params)": fmt(_first(c.get("pearson_pg_params"))),
             "p": fmt(_second(c.get("pearson_pg_params")), 3),
             "Kendall τ (neutral share, −|PG|)": fmt(_first(c.get("kendall_neutral_vs_abs_pg"))),
             "p (τ)": fmt(_second(c.get("kendall_neutral_vs_abs_pg")), 3)} for c in summary["correlations"]]
    if corr:
        items.append(Table("cmp_iso_correlations", "cmp_iso", "iso/cmp across models: PG vs size, Table E.1 ranks", (
            f"Models {models}; parameter counts (billions) "
            + ", ".join(f"{k} {v:.3g}" for k, v in sizes.items())
            + ". Estimator: expected-count PG. n: models with pairs. CI: none; tests: Pearson r and Kendall τ with "
            "their p-values (needs ≥ 3 models; – otherwise)."), pd.DataFrame(corr)))
    for s in (s for s in summary["settings"] if "+v" not in s):
        d = out / "figures"
        d.mkdir(parents=True, exist_ok=True)
        png, svg = d / f"cmp_iso_pg_{s.replace('+', '_')}.png", d / f"cmp_iso_pg_{s.replace('+', '_')}.svg"
        plot_pg(summary, s, png)
        plot_pg(summary, s, svg)
        items.append(Figure(png.stem, "cmp_iso", f"iso vs cmp Parity Gap ({s})", (
            f"Task cmp_iso, models {models}. Expected-count PG per benchmark; whiskers: 95% percentile bootstrap "
            f"CI over context pairs; filled: cmp vs iso p < {summary.get('alpha')}. n: {pairs}."), png, svg))
    return items


def _num(*xs: Any) -> float:
    """The first value that is a finite number, else NaN."""
    for x in xs:
        if isinstance(x, (int, float)) and math.isfinite(x):
            return float(x)
    return math.nan


def _first(x: Any) -> Any:
    return x[0] if isinstance(x, (list, tuple)) and x else None


def _second(x: Any) -> Any:
    return x[1] if isinstance(x, (list, tuple)) and len(x) > 1 else None


# -- anything else -------------------------------------------------------------------------------------------
def generic_section(runs: Sequence[Run], out: Path) -> list[Any]:
    """Each run's own ``tables/*.csv``, one table per file and run (no multi-model layout for this task)."""
    items: list[Any] = []
    for r in runs:
        for csv in sorted((r.path / "tables").glob("*.csv")):
            try:
                df = pd.read_csv(csv)
            except (OSError, ValueError, pd.errors.ParserError):
                continue
            items.append(Table(f"{r.task}_{_slug(r.label)}_{csv.stem}", r.task, f"{r.task}: {csv.stem} ({r.label})",
                               f"Task {r.task}, model {r.label}: the run's own table {csv.name}, as written (its "
                               "estimator, n and CI are those of the task; see the task's docs).", df))
    return items


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")

