"""Multi-model layouts of CrowS-Pairs, HBB (Tables 1, 2, 3, 8, 9; Figures 3, 4, 8, 9), iso/cmp (Tables 2-7, E.1) and any task.

HBB tables are :mod:`probe.tasks.hbb.tables` fed one per-instance frame per
model and variant (read back from each run's ``instances.jsonl``); iso/cmp
tables are :mod:`probe.tasks.cmp_iso.tables` over
:func:`probe.tasks.cmp_iso.model_tables.combine_summaries` of the runs (parameter
counts from the provenance). A task without a layout here gets each run's own
``tables/*.csv``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from probe.io import slug
from probe.reports.compare.common import bars, boots, model_labels
from probe.reports.compare.runs import Run
from probe.reports.compare.tables import Figure, Table, flatten, fmt, fmt_ci, save_figure

__all__ = ["crows_section", "hbb_section", "cmp_iso_section", "generic_section", "hbb_frames", "crows_scores"]


# -- CrowS-Pairs ---------------------------------------------------------------------------------------------
#: the two protocols: (a) the HBB paper's prompted two-choice question, (b) lm-evaluation-harness's
CROWS_PROTOCOLS = {"mcq": "(a) two-choice question (HBB paper, Table 11 instruction)",
                   "loglik": "(b) whole-sentence causal log-likelihood (lm-evaluation-harness)"}
CROWS_ESTIMATORS = {
    "mcq": ("exact next-token probability of the stereotypical sentence's label in the prompted two-choice "
            "question, averaged over both option orders; 50 = no bias. CI: 95% bootstrap over pairs"),
    "loglik": ("exact whole-sentence causal log-likelihoods (sum of log P(token | preceding tokens) over every "
               "token, as lm-evaluation-harness computes it; not Nangia et al.'s masked-LM pseudo-log-likelihood), "
               "each pair counted for the sentence with the higher one; ties count as not stereotypical. "
               "CI: Wilson 95%"),
}


def _crows_summary(summary: dict) -> dict:
    """The CrowS-Pairs part of a run summary: a ``crows_pairs`` run's own, or an ``hbb`` run's embedded one."""
    return summary if "by_bias_type" in summary or "by_protocol" in summary else (summary.get("crows_pairs") or {})


def crows_scores(runs: Sequence[Run], protocol: str | None = None) -> dict[str, dict[str, dict]]:
    """label -> bias type -> the CrowS-Pairs row of ``protocol`` (``None``: (a) where the run scored it, as the
    HBB paper's Table 1 compares against, else (b)). Runs without that protocol are left out."""
    out = {}
    for r in runs:
        rows = _crows_rows(_crows_summary(r.summary), protocol)
        if rows is not None:
            out[r.label] = {row["bias_type"]: row for row in rows}
    return out


def _crows_rows(cs: dict, protocol: str | None) -> list | None:
    by = {k: v.get("by_bias_type") for k, v in (cs.get("by_protocol") or {}).items()}
    if not by and cs.get("by_bias_type"):  # runs from before the two protocols: (b) only
        by = {cs.get("protocol", "loglik") if cs.get("protocol") in CROWS_PROTOCOLS else "loglik": cs["by_bias_type"]}
    if protocol is None:
        protocol = "mcq" if by.get("mcq") else "loglik"
    return by.get(protocol) or None


def crows_protocol_of(summary: dict) -> str | None:
    """Which protocol :func:`crows_scores` (protocol None) reads from this run: ``mcq``, ``loglik`` or None."""
    cs = _crows_summary(summary)
    return "mcq" if _crows_rows(cs, "mcq") else "loglik" if _crows_rows(cs, "loglik") else None


def crows_section(runs: Sequence[Run], out: Path) -> list[Any]:
    items: list[Any] = []
    for protocol, name in CROWS_PROTOCOLS.items():
        scores = crows_scores(runs, protocol)
        if scores:
            items += _crows_protocol_items(runs, out, scores, protocol, name)
    return items


def _crows_protocol_items(runs: Sequence[Run], out: Path, scores: dict, protocol: str, name: str) -> list[Any]:
    types = list(dict.fromkeys(t for s in scores.values() for t in s))
    types = [t for t in types if t != "all"] + (["all"] if "all" in types else [])
    rows = []
    for t in types:
        row: dict[str, Any] = {"Bias type": t}
        for label, s in scores.items():
            x = s.get(t)
            row[label] = "–" if x is None else f"{fmt_ci(x['score'], [x['ci_low'], x['ci_high']], 1)} (n={x['n']})"
            pe = None if x is None else x.get("paper_score")
            if isinstance(pe, (int, float)) and math.isfinite(pe):  # (a): the HBB paper's sampled score beside it
                row[label] += f"; paper-equivalent {pe:.1f}"
        rows.append(row)
    suffix = "" if protocol == "loglik" else "_mcq"  # (b) keeps its historical table name
    items: list[Any] = [Table(f"crows_pairs{suffix}", "crows_pairs", f"CrowS-Pairs, protocol {name}: % of pairs "
                              "where the more stereotypical sentence is preferred (50 = no bias)",
                              f"Task crows_pairs, models {model_labels(runs)} (columns). Estimator: "
                              f"{CROWS_ESTIMATORS[protocol]}. n: valid pairs per cell."
                              + (" Paper-equivalent (where the run scored it): the score the HBB paper's procedure "
                                 "(one answer sampled per question at T = 0.8, top-p 1, non-label answers dropped) "
                                 "would report in expectation, both orders pooled; no CI." if protocol == "mcq" else ""),
                              pd.DataFrame(rows))]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(7, 0.9 * len(types)), 3.8))
    series = [(label, [s[t]["score"] if t in s else math.nan for t in types],
               [[s[t]["ci_low"], s[t]["ci_high"]] if t in s else None for t in types]) for label, s in scores.items()]
    bars(ax, types, series)
    ax.axhline(50, color="#C44E52", ls="--", lw=1)
    ax.set_ylim(0, 100)
    ax.set_ylabel("CrowS-Pairs score (50 = no bias)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    items.append(save_figure(fig, out, f"crows_pairs_by_type{suffix}", "crows_pairs",
                             f"CrowS-Pairs by bias type, protocol {name}",
                             f"Task crows_pairs, models {model_labels(runs)}. Estimator: {CROWS_ESTIMATORS[protocol]}; "
                             f"n per cell in table crows_pairs{suffix}."))
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
    """Tables 1 and 2 (MCQ: both variants per model), 8 and 9 (HBB-SG), exact vs 10 samples, Table 3 (top
    associations), Figures 3 and 4 (MCQ), 8 and 9 (HBB-SG)."""
    from probe.tasks.hbb.tables import table1, table2, table8, table9

    thr = float(runs[0].summary.get("threshold", 20.0))
    if any(float(r.summary.get("threshold", thr)) != thr for r in runs):
        thr_note = " (runs differ in threshold; all tables use the first run's)"
    else:
        thr_note = ""
    frames = {r.label: hbb_frames(r) for r in runs}
    cs_by_model = {r.model: ((crows_scores([r]).get(r.label) or {}).get("all") or {}).get("score")
                   for r in crows_runs}
    cs_own = {r.label: ((crows_scores([r]).get(r.label) or {}).get("all") or {}).get("score") for r in runs}
    used = {crows_protocol_of(r.summary) for r in list(crows_runs) + list(runs)} - {None}
    cs_protocols = " and ".join(CROWS_PROTOCOLS[p] for p in ("mcq", "loglik") if p in used) or "none scored"
    nb, models = boots(runs), model_labels(runs)
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
            "hbb run's own), protocol "
            f"{cs_protocols}; CIs in the CrowS-Pairs section."), flatten(t1).replace("[nan, nan]", "–")))
        items.append(Table("hbb_table2", "hbb", f"HBB Table 2 layout: count (mean S) of instances with S ≥ {thr:g}", (
            f"Task hbb, models {models} (columns). Estimator: {est}. n: instances per type in the first column. "
            "CI: none in this layout (see Table 1)."), flatten(table2(mcq, thr))))
    if sg:
        items.append(Table("hbb_table8", "hbb", f"HBB-SG Table 8 layout (S ≥ {thr:g})", (
            f"Task hbb, models {models}. Estimator: exact HBB-SG, P(A) = the mean over variation pairs of "
            f"(1/PPL(A_j)) / (1/PPL(A_j) + 1/PPL(B_j)) (appendix E.1). Variations: {sg_variations_text(runs)}. "
            f"n: the instances column. CI: 95% percentile bootstrap over concept pairs, "
            f"n_boot = {runs[0].n_boot}."),
            flatten(table8(sg, thr, n_boot=max(runs[0].n_boot or 1000, 1))).replace("[nan, nan]", "–")))
        items.append(Table("hbb_table9", "hbb", f"HBB-SG Table 9 layout: count (mean S), S ≥ {thr:g}", (
            f"Task hbb, models {models} (columns). Estimator: exact HBB-SG (perplexity). n: per type in the Type "
            "column. CI: none in this layout."), flatten(table9(sg, thr))))
    from probe.tasks.hbb.tables import table3

    top = table3({f"{label} ({VARIANTS[v]})": f for label, fr in frames.items() for v, f in fr.items()})
    if not top.empty:
        items.append(Table("hbb_table3", "hbb", "HBB Table 3 layout: top bias association per category", (
            f"Task hbb, models {models} (Scoring column). Estimator: exact S; per category the instance with the "
            "highest S, as identity ↔ concept in the direction the model chose; tied at max S: instances of the "
            "category at that S. n: 1 per category and scoring. CI: none (single instances)."), top))
    if frames:
        items += _hbb_figures(frames, thr, out, models)
    return items


SG_SOURCES = {"authors": "the authors' released variation set (all_data_more_contexts_questions.csv)",
              "file": "a variations file", "generated": "generated greedily by the evaluated model",
              "original": "the original options only (n = 1)"}


def sg_variations_text(runs: Sequence[Run]) -> str:
    """What HBB-SG variations each run scored, from its summary's ``hbb_sg`` block (source, pairs per concept
    pair, identical option pairs), one clause per run."""
    parts = []
    for r in runs:
        sg = r.summary.get("hbb_sg")
        if not sg:
            continue
        ppc = sg.get("pairs_per_concept") or {}
        src = SG_SOURCES.get(sg.get("variations"), str(sg.get("variations")))
        if sg.get("variations") == "file" and sg.get("variations_file"):
            src = f"the file {Path(str(sg['variations_file'])).name}"
        parts.append(f"{r.label}: {src}, {ppc.get('min', '?')}-{ppc.get('max', '?')} variation pairs per concept "
                     f"pair (mean {fmt(ppc.get('mean'), 1)}; {sg.get('n_requested', '?')} asked), "
                     f"{sg.get('n_identical_pairs', 0)} identical option pairs")
    return "; ".join(parts) or "not recorded"


def _hbb_figures(frames: Mapping[str, Mapping[str, pd.DataFrame]], thr: float, out: Path, models: str) -> list[Figure]:
    """Figures 3 and 4 (MCQ; each model and variant one label), 8 and 9 (HBB-SG): :mod:`probe.tasks.hbb.figures`."""
    from probe.tasks.hbb import figures as F

    mcq = {f"{label} ({VARIANTS[v]})": f for label, fr in frames.items() for v, f in fr.items() if v != "hbb_sg"}
    sg = {f"{label} (HBB-SG)": fr["hbb_sg"] for label, fr in frames.items() if "hbb_sg" in fr}
    exact = "exact S = |P1(A) − P2(A)| × 100 per test instance"
    todo = []
    if mcq:
        todo += [("hbb_figure3", F.figure3, mcq, "HBB Figure 3: instances with S ≥ {t} per category",
                  "bars: count of instances with S ≥ {t} per category; n: instances per model in Table 1"),
                 ("hbb_figure4", F.figure4, mcq, "HBB Figure 4: distribution of S",
                  "histogram of S (bins of 5), dashed: threshold {t}; n per model in each panel's title")]
    if sg:
        todo += [("hbb_figure8", F.figure8, sg, "HBB-SG Figure 8: instances with S ≥ {t} per category",
                  "bars: count of instances with S ≥ {t} per category (HBB-SG, perplexity); n in Table 8"),
                 ("hbb_figure9", F.figure9, sg, "HBB-SG Figure 9: distribution of S",
                  "histogram of S (HBB-SG, bins of 5), dashed: threshold {t}; n per model in each panel's title")]
    items = []
    for name, make, fr, title, what in todo:
        fig, _ = make(fr, thr)
        items.append(save_figure(fig, out, name, "hbb", title.format(t=f"{thr:g}"),
                                 f"Task hbb, models {models}. Estimator: {exact}; {what.format(t=f'{thr:g}')}. "
                                 "No CI (counts and distributions; CIs in Tables 1 and 8)."))
    return items


# -- iso / cmp -----------------------------------------------------------------------------------------------
def cmp_iso_section(runs: Sequence[Run], out: Path, params_b: Mapping[str, float] | None = None) -> list[Any]:
    """Seed 003 Tables 2-7 (rows = models) for both estimators, the cross-model correlations, the PG plot."""
    from probe.tasks.cmp_iso.model_tables import combine_summaries
    from probe.tasks.cmp_iso.tables import build_tables, plot_pg

    sizes = {r.label: r.params_b for r in runs if math.isfinite(r.params_b)}
    sizes.update(params_b or {})
    by_cat = _by_category(runs)
    # the per-model tables: one category's runs (a model run in several categories would repeat)
    main = by_cat.get("gender") or next(iter(by_cat.values()))
    summary = combine_summaries([{**r.summary, "model": r.label, "params_b": {}} for r in main], sizes)
    pairs = "; ".join(f"{r.label}: " + ", ".join(f"{b} {n}" for b, n in (r.summary.get("n_pairs") or {}).items())
                      for r in runs)
    models = model_labels(runs)
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
    items += _cmp_iso_across_models(runs, sizes, summary, models)
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


def _by_category(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """Runs by demographic category (task config ``category``; the released files are gender)."""
    out: dict[str, list[Run]] = {}
    for r in runs:
        out.setdefault(str(r.config.get("category") or "gender"), []).append(r)
    return out


def _cmp_iso_across_models(runs: Sequence[Run], sizes: Mapping[str, float], summary: Mapping[str, Any],
                           models: str) -> list[Any]:
    """The iso/cmp paper's Table 8 (PG vs size, dense families), Table E.2 (all models, total and active parameters),
    Table E.1 (neutral share vs |PG| ranks) over every category's runs, and the pooled cmp-vs-iso test."""
    from probe.tasks.cmp_iso.model_tables import combine_summaries, size_tables

    rows, alpha = [], float(summary.get("alpha") or 0.05)
    for cat, rs in _by_category(runs).items():
        active = {r.label: a for r in rs if (a := _per_model(r, "active_params_b")) is not None}
        fam = {r.label: str(f) for r in rs if (f := _per_model(r, "model_family")) is not None}
        s = combine_summaries([{**r.summary, "model": r.label, "params_b": {}} for r in rs], sizes, active, fam)
        rows += [{**c, "category": cat} for c in s["correlations"]]
    if not rows:
        return []
    bench = list(summary["benchmarks"])
    frames = size_tables(rows, bench, alpha)
    ms = summary.get("model_sizes") or {}
    size_note = ", ".join(f"{m} {v['total_b']:.3g}B" + ("" if v["dense"] else f" ({v['active_b']:.3g}B active)")
                          + f" [{v['family']}]" for m, v in ms.items()) or "none given"
    common = (f"Models {models}; parameters (billions) and [family]: {size_note}. Estimator: exact expected-count "
              f"PG per model (T = 1). CI: Fisher-z 95% for Pearson r; ∗: p < {alpha:g}. n = models in the cell "
              "(r needs ≥ 3, – otherwise). Orientation as the paper reports it: StereoSet, RedditBias, DE-Gen "
              "(and CrowS-Pairs, which mirrors RedditBias) enter as −PG, columns headed (−PG).")
    t8 = [c["table8"]["models"] for c in rows if c["table8"]["n"]]
    items: list[Any] = [
        Table("cmp_iso_table8", "cmp_iso", "iso/cmp Table 8: Pearson r of PG and total parameters (dense, families ≥ 2 sizes)",
              common + " Only dense models (active = total) of families with at least two sizes enter"
              + (f" (here: {', '.join(sorted(set(sum(t8, []))))})." if t8 else " (none here)."), frames["table8"]),
        Table("cmp_iso_tableE2_total", "cmp_iso", "iso/cmp Table E.2: Pearson r of PG and total parameters (all models)",
              common, frames["tableE2_total"]),
        Table("cmp_iso_tableE2_active", "cmp_iso", "iso/cmp Table E.2: Pearson r of PG and active parameters (all models)",
              common + " Active parameters: task config active_params_b, else the total (dense).", frames["tableE2_active"]),
    ]
    if len(frames["tableE1"]):
        items.append(Table("cmp_iso_tableE1", "cmp_iso", "iso/cmp Table E.1: neutral-share ranking vs |PG| ranking", (
            f"Models {models}. Estimator: exact expected-count PG and neutral share (settings with the neutral "
            f"option). Kendall τ-b between the models' neutral-option share and −|PG|; ∗: p < {alpha:g}; Top-5 "
            "intersection of the two rankings (ties by name). CI: none. n = models."), frames["tableE1"]))
    pooled = summary.get("pooled_cmp_vs_iso") or []
    if pooled:
        df = pd.DataFrame([{"model": p["model"], "setting": p["setting"], "benchmark": p["benchmark"],
                            "mode": p["mode"], "PG cmp": fmt(p.get("pg_cmp")), "PG iso": fmt(p.get("pg_iso")),
                            "cmp − iso": fmt(p.get("diff")), "p": fmt(p.get("p"), 4), "variations": p.get("n_variants"),
                            "pairs (blocks)": p.get("n_blocks")} for p in pooled])
        items.append(Table("cmp_iso_pooled_variations", "cmp_iso", "iso/cmp: cmp vs iso pooled over prompt variations", (
            f"Models {models}. Estimator: per-pair PG contributions of the run's mode, pooled over every variation "
            "of a setting. CI: none; approximate randomization test, all variations of one context pair swapped "
            "as one block (iso/cmp paper App. D); n: pairs (blocks)."), df))
    return items


def _per_model(run: Run, key: str) -> Any:
    """A run config's value for its model: a plain value, or a mapping by model name (like ``params_b``)."""
    v = run.config.get(key)
    if isinstance(v, Mapping):
        v = v.get(run.model, v.get(run.label))
    if v is None:
        return None
    return float(v) if key.endswith("_b") else v


def _num(*xs: Any) -> float:
    """The first value that is a finite number, else NaN."""
    for x in xs:
        if isinstance(x, (int, float)) and math.isfinite(x):
            return float(x)
    return math.nan


def _first(x: Any) -> Any:
    return x[0] if isinstance(x, (list, tuple)) and x else None


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
            items.append(Table(f"{r.task}_{slug(r.label)}_{csv.stem}", r.task, f"{r.task}: {csv.stem} ({r.label})",
                               f"Task {r.task}, model {r.label}: the run's own table {csv.name}, as written (its "
                               "estimator, n and CI are those of the task; see the task's docs).", df))
    return items
