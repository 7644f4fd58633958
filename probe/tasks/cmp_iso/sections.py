"""iso/cmp's section of ``probe report``: Tables 2-7, 8, E.1 and E.2 with several models, the
paper-equivalent tables beside the exact ones, and paired units per context pair and paradigm.

iso/cmp tables are :mod:`probe.tasks.cmp_iso.tables` over
:func:`probe.tasks.cmp_iso.model_tables.combine_summaries` of the runs
(parameter counts from the report's ``params_b``, else each run's provenance).
A run that computed the authors' sampled estimator carries ``results`` rows of
mode ``paper``; :func:`cmp_iso_paper_tables` lays them out.

Paired units: one per context pair and paradigm, cluster = context pair, one
block per setting; McNemar: the argmax answers treat t and t' unequally
(argmax gap ≠ 0).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from probe.reports.compare.common import model_labels
from probe.reports.compare.paired import Spec, ratio
from probe.reports.compare.runs import Run, read_records
from probe.reports.compare.tables import Figure, Table, flatten, fmt
from probe.reports.headline import phrase
from probe.tasks.cmp_iso.metrics import PAPER_MODE, observation_from_dict, summarize
from probe.tasks.cmp_iso.model_tables import combine_summaries, size_tables
from probe.tasks.cmp_iso.tables import build_tables, mode_title, plot_pg, table_modes
from probe.tasks.cmp_iso.terms import TERMS

__all__ = ["CMP_ISO_SPEC", "cmp_iso_paper_tables", "cmp_iso_section", "cmp_iso_units"]


def cmp_iso_section(runs: Sequence[Run], out: Path, params_b: Mapping[str, float] | None = None) -> list[Any]:
    """Seed 003 Tables 2-7 (rows = models) for both estimators, the cross-model correlations, the PG plot."""

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
        items.append(Figure(png.stem, "cmp_iso", f"iso vs cmp Parity Gap ({phrase(s, TERMS)})", (
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
        df = pd.DataFrame([{"model": p["model"], "setting": phrase(p["setting"], TERMS),
                            "benchmark": TERMS.get(p["benchmark"], p["benchmark"]),
                            "mode": TERMS.get(p["mode"], p["mode"]), "PG cmp": fmt(p.get("pg_cmp")), "PG iso": fmt(p.get("pg_iso")),
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


CMP_ISO_SPEC = Spec("cmp_iso", ("n", "gap"), {"PG": lambda s: ratio(s[..., 1], s[..., 0])},
                    "the argmax answers treat the two targets unequally (argmax gap ≠ 0)",
                    "exact expected counts (label probabilities, T = 1)", "context pair", unit="context pairs")

def cmp_iso_units(run: Run) -> pd.DataFrame:
    groups: dict[tuple, list[dict]] = {}
    for r in read_records(run.path):
        probs = r.get("probs") or []
        if "+v" in str(r.get("setting", "")) or not r.get("finite", True) or not probs or not all(
                isinstance(p, (int, float)) and math.isfinite(p) for p in probs):
            continue
        groups.setdefault((r["setting"], r["benchmark"]), []).append(
            {"context_pair_id": r["context_pair_id"], "task_type": r["task_type"], "target": r.get("target"),
             "order": r.get("order"), "probs": dict(zip(r["options"], probs))})
    rows = []
    for (setting, bench), lines in groups.items():
        s = {mode: summarize([observation_from_dict(d, mode) for d in lines], allow_incomplete=True)
             for mode in ("expected", "argmax")}
        for par in ("iso", "cmp"):
            arg = dict(zip(getattr(s["argmax"], par).pair_ids, getattr(s["argmax"], par).gaps))
            res = getattr(s["expected"], par)
            for cp, gap in zip(res.pair_ids, res.gaps):
                ag = arg.get(cp, math.nan)
                rows.append({"unit": f"{bench}|{cp}|{par}", "block": phrase(setting, TERMS),
                             "category": f"{TERMS.get(bench, bench)}, {par}",
                             "cluster": f"{bench}|{cp}", "n": 1.0 if math.isfinite(gap) else math.nan, "gap": gap,
                             "binary": float(abs(ag) > 1e-12) if math.isfinite(ag) else math.nan})
    return pd.DataFrame(rows, columns=["unit", "block", "category", "cluster", "n", "gap", "binary"])


def cmp_iso_paper_tables(runs: Sequence[Run], params_b: Mapping[str, float] | None = None) -> list[tuple[str, Table]]:
    """(name of the exact table it mirrors, the paper-equivalent table) for every iso/cmp table the runs support."""

    if not any(x.get("mode") == PAPER_MODE for r in runs for x in r.summary.get("results", [])):
        return []
    have = list(runs)  # a model without paper rows (e.g. every label outside the nucleus) shows "–"
    sizes = {r.label: r.params_b for r in have if math.isfinite(r.params_b)}
    sizes.update(params_b or {})
    summary = combine_summaries([{**r.summary, "model": r.label, "params_b": {}} for r in have], sizes)
    if (PAPER_MODE, "_paper") not in table_modes(summary):
        return []
    est = mode_title(summary, PAPER_MODE)
    pairs = "; ".join(f"{r.label}: " + ", ".join(f"{b} {n}" for b, n in (r.summary.get("n_pairs") or {}).items())
                      for r in have)
    out = []
    for name, (title, df) in build_tables(summary, PAPER_MODE).items():
        if name == "variants":  # already every estimator in the exact table
            continue
        note = f" {df.attrs['caption']}" if df.attrs.get("caption") else ""
        out.append((f"cmp_iso_{name}", Table(f"cmp_iso_{name}_paper", "cmp_iso", title, (
            f"Task cmp_iso, models {model_labels(have)} (rows). Estimator: {est} (the authors' sampling), computed exactly. "
            f"n: context pairs per benchmark ({pairs}). CI: none in this table; ∗: approximate randomization test "
            f"p < {summary.get('alpha')} (n_iter = {summary.get('n_iter')}).{note}"), flatten(df))))
    return out
