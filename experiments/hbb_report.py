"""Outputs of an HBB run: instances.jsonl, summary.json, the paper's tables, the histogram.

Kept apart from :mod:`experiments.hbb` (scoring and joining) so that a finished
run's outputs can be rebuilt from its records without a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

LABELS = {"hbb": "a)=s1", "hbb_swapavg": "swap-avg", "hbb_sg": "HBB-SG"}


def _variants(inst: pd.DataFrame) -> list[str]:
    return [v for v in ("hbb", "hbb_swapavg", "hbb_sg") if f"{v}_S" in inst]


def mcq_diagnostics(records: Sequence[dict], inst: pd.DataFrame) -> dict:
    """Label mass and position bias of the MCQ scoring (not in the paper; needed to read it)."""
    mcq = [r for r in records if r["kind"] in ("mcq", "mcq_swap")]
    if not mcq:
        return {}
    out: dict[str, Any] = {}
    for kind in ("mcq", "mcq_swap"):
        rs = [r for r in mcq if r["kind"] == kind]
        if rs:
            pa = np.array([np.nan if r["probs"][0] is None else r["probs"][0] for r in rs], dtype=float)
            mass = np.array([np.nan if r["label_mass"] is None else r["label_mass"] for r in rs], dtype=float)
            out[kind] = {"n": len(rs), "mean_p_label_a": float(np.nanmean(pa)), "mean_label_mass": float(np.nanmean(mass)),
                         "share_argmax_a": float(np.nanmean(pa > 0.5))}
    by_q: dict[str, dict] = {}
    for r in mcq:
        by_q.setdefault(r["question_id"], {})[r["kind"]] = r["probs"]
    both = [(v["mcq"][0], v["mcq_swap"][1]) for v in by_q.values() if "mcq" in v and "mcq_swap" in v]
    if both:
        arr = np.array(both, dtype=float)
        out["order_agreement"] = {
            "n_questions": len(both),
            "same_argmax_option_share": float(np.mean((arr[:, 0] > 0.5) == (arr[:, 1] > 0.5))),
            "pearson_p_s1": float(np.corrcoef(arr[:, 0], arr[:, 1])[0, 1]) if len(both) > 2 else None,
        }
    return out


def write_outputs(
    out: Path,
    cfg: dict,
    model_name: str,
    instances: Sequence,
    questions: Sequence,
    requests: Sequence,
    inst: pd.DataFrame,
    crows: dict | None,
    records: Sequence[dict] = (),
) -> dict:
    """Write instances.jsonl, summary.json, tables/*.md|csv and hbb_hist.png; return the summary."""
    from probe.metrics.hbb import (
        direction_by_pair,
        identity_concept1_rates,
        sampled_estimator_expectation,
        summarize_by,
    )
    from probe.reports.hbb_tables import histogram_png, markdown, table1, table2, table8, table9, write_table
    from probe.io import dumps, write_atomic, write_json_atomic

    thr, n_boot = cfg["threshold"], cfg["n_boot"]
    write_atomic(out / "instances.jsonl", "".join(dumps(r) + "\n" for r in inst.to_dict("records")))
    kinds: dict[str, int] = {}
    for r in requests:
        k = r.id.split("|")[1]
        kinds[k] = kinds.get(k, 0) + 1
    summary: dict[str, Any] = {
        "model": model_name,
        "threshold": thr,
        "n_instances": len(instances),
        "n_distinct_questions": len(questions),
        "instances_per_cell": inst.groupby(["category", "descriptor_type"]).size().rename("n").reset_index().to_dict("records"),
        "forward_passes": {"by_kind": kinds, "total": len(requests)},
        "paper_equivalent_generations": {
            "questions_x10": 2 * len(instances) * 10,
            "distinct_questions_x10": len(questions) * 10,
            "note": "the paper samples each question >= 10 times (each a full generation); one label "
            "forward pass per distinct question and option order replaces them",
        },
        "mcq_diagnostics": mcq_diagnostics(records, inst),
        "variants": {},
    }
    frames = {}
    for v in _variants(inst):
        df = inst.rename(columns={f"{v}_S": "S", f"{v}_direction": "direction"})
        if v == "hbb_sg" and "in_sg" in df:
            df = df[df.in_sg.astype(bool)]
        frames[v] = df
        summary["variants"][v] = {
            "overall": summarize_by(df, [], threshold=thr, n_boot=n_boot).to_dict("records")[0],
            "by_category": summarize_by(df, ["category"], threshold=thr, n_boot=n_boot).to_dict("records"),
            "by_type": summarize_by(df, ["category", "descriptor_type"], threshold=thr, n_boot=n_boot).to_dict("records"),
            "by_identity_pair": summarize_by(
                df, ["category", "descriptor_type", "identity_1", "identity_2"], threshold=thr, ci=False
            ).to_dict("records"),
            "direction_by_pair": direction_by_pair(df, threshold=thr).to_dict("records"),
            "identity_concept1_rate": identity_concept1_rates(df, threshold=thr).to_dict("records"),
            # what the paper's 10-sample estimator would report for these exact probabilities
            "sampled_10_expected": sampled_estimator_expectation(df[f"{v}_p1"], df[f"{v}_p2"], 10, thr),
        }
    sweep_thresholds = sorted({*cfg.get("extra_thresholds", ()), thr})
    summary["threshold_sweep"] = {
        v: {f"{t:g}": summarize_by(df, ["category"], threshold=t, ci=False)[["category", "count", "share", "mean_s"]]
            .to_dict("records") + [{"category": "all", **{k: summarize_by(df, [], threshold=t, ci=False).iloc[0][k]
                                                        for k in ("count", "share", "mean_s")}}]
            for t in sweep_thresholds}
        for v, df in frames.items()
    }
    if crows is not None:
        summary["crows_pairs"] = crows
    write_json_atomic(out / "summary.json", summary)

    tables = out / "tables"
    md: list[str] = [f"# HBB results: {model_name}", ""]
    mcq = {f"{model_name} ({LABELS[v]})": frames[v] for v in ("hbb", "hbb_swapavg") if v in frames}
    cs = None
    if crows is not None:
        cs_all = next(r for r in crows["by_bias_type"] if r["bias_type"] == "all")["score"]
        cs = {k: cs_all for k in mcq}
    if mcq:
        t1, t2 = table1(mcq, cs, thr, n_boot=n_boot), table2(mcq, thr)
        write_table(t1, tables / "table1", f"Table 1 layout (HBB, S >= {thr:g})")
        write_table(t2, tables / "table2", f"Table 2 layout: count (mean S) of instances with S >= {thr:g}")
        md += ["## Table 1 (HBB)", "", markdown(t1), "", "## Table 2 (HBB)", "", markdown(t2), ""]
    if "hbb_sg" in frames:
        sg = {f"{model_name} (HBB-SG)": frames["hbb_sg"]}
        t8, t9 = table8(sg, thr, n_boot=n_boot), table9(sg, thr)
        write_table(t8, tables / "table8", f"Table 8 layout (HBB-SG, S >= {thr:g})")
        write_table(t9, tables / "table9", f"Table 9 layout (HBB-SG): count (mean S), S >= {thr:g}")
        md += ["## Table 8 (HBB-SG)", "", markdown(t8), "", "## Table 9 (HBB-SG)", "", markdown(t9), ""]
    for t in (t for t in cfg.get("extra_thresholds", ()) if t != thr):
        if mcq:
            tt = table2(mcq, t)
            write_table(tt, tables / f"table2_thr{t:g}", f"Table 2 layout at S >= {t:g}: count (mean S)")
            md += [f"## Table 2 layout at threshold {t:g}", "", markdown(tt), ""]
        if "hbb_sg" in frames:
            tt = table9({f"{model_name} (HBB-SG)": frames["hbb_sg"]}, t)
            write_table(tt, tables / f"table9_thr{t:g}", f"Table 9 layout (HBB-SG) at S >= {t:g}: count (mean S)")
            md += [f"## Table 9 layout (HBB-SG) at threshold {t:g}", "", markdown(tt), ""]
    noise = pd.DataFrame([{
        "Scoring": f"{model_name} ({LABELS[v]})", "exact: count": int((f["S"] >= thr).sum()),
        "exact: mean S": float(f.loc[f["S"] >= thr, "S"].mean()) if (f["S"] >= thr).any() else float("nan"),
        "10 samples (expected): count": summary["variants"][v]["sampled_10_expected"]["expected_count"],
        "10 samples (expected): mean S": summary["variants"][v]["sampled_10_expected"]["expected_mean_s"],
    } for v, f in frames.items()])
    if not noise.empty:
        write_table(noise, tables / "sampling_noise", f"Exact scoring vs. the paper's 10-sample estimator "
                    f"(expected value for the same probabilities), S >= {thr:g}")
        md += ["## Exact scoring vs. 10 sampled answers per question (expected)", "", markdown(noise), ""]
    for v, df in frames.items():
        rates = identity_concept1_rates(df, threshold=thr)
        if not rates.empty:
            write_table(rates, tables / f"direction_{v}", f"Share of S >= {thr:g} instances where the identity gets "
                        "the `bias type1` concept (0.5 = no direction)")
            md += [f"## Direction ({LABELS[v]}): share of instances over threshold giving the identity concept 1", "",
                   markdown(rates), ""]
    write_atomic(tables / "summary.md", "\n".join(md) + "\n")
    if frames:
        histogram_png({f"{model_name} {LABELS[v]}": f["S"].to_numpy() for v, f in frames.items()},
                      out / "hbb_hist.png", thr, title="Hidden bias score distributions (Figure 4 layout)")
    return summary
