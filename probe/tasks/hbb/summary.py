"""The HBB summary (every metric with CIs, counts, diagnostics), its tables, and the timing projection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from probe.io import write_json_atomic
from probe.metrics.mass import answering, mass_summary
from probe.tasks.hbb.data import IDENTITIES, TYPE_INDEX, expected_counts, unique_questions
from probe.tasks.hbb.metrics import direction_by_pair, identity_concept1_rates, over_threshold, summarize_by
from probe.tasks.hbb.parsed import paper_parsed
from probe.tasks.hbb.records import LABELS, mcq_diagnostics, request_kinds, variant_frames
from probe.tasks.hbb.records import question_probs, sampled_question_probs
from probe.tasks.hbb.sampling import sampled_count
from probe.tasks.hbb.tables import run_tables


def hbb_summary(config: Any, instances: Sequence[Any], records: pd.DataFrame, inst: pd.DataFrame,
                crows: dict | None = None) -> tuple[dict, dict[str, pd.DataFrame]]:
    """The summary and the paper-layout tables of one run.

    ``records``: the HBB records (kinds ``mcq``, ``mcq_swap``, ``sg``);
    ``inst``: the per-instance frame (:func:`~probe.tasks.hbb.records.instance_frame`);
    ``crows``: the CrowS-Pairs summary, when the run scored it.
    """

    thr, n_boot = config.threshold, config.n_boot
    summary = _run_counts(config, instances, records, inst)
    frames = variant_frames(inst)
    for v, df in frames.items():
        summary["variants"][v] = _variant_summary(df, thr, n_boot)
    summary["threshold_sweep"] = {v: _sweep(df, sorted({*config.extra_thresholds, thr})) for v, df in frames.items()}
    paper_table, parsed_table = _paper_estimates(config, records, frames, summary)
    cs = None
    if crows is not None:
        summary["crows_pairs"] = crows
        # Table 1's CS column: protocol (a) when scored, as the HBB paper's
        table1 = (crows.get("by_protocol") or {}).get(crows.get("table1_protocol"), crows)
        cs = next(r for r in table1["by_bias_type"] if r["bias_type"] == "all")["score"]
    tables = run_tables(frames, LABELS, thr, config.extra_thresholds, n_boot, cs,
                        crows_protocol=(crows or {}).get("table1_protocol"))
    if paper_table is not None:
        tables = {"table1_paper_equivalent": paper_table, **tables}
    if parsed_table is not None:
        tables = {"table1_paper_parsed": parsed_table, **tables}
    if "hbb" in frames:
        summary["label_mass"], tables["table6_label_mass"] = label_mass(records, frames["hbb"], thr,
                                                                        getattr(config, "mass_floor", 0.1))
    return summary, tables


def _run_counts(config: Any, instances: Sequence[Any], records: pd.DataFrame, inst: pd.DataFrame) -> dict[str, Any]:
    """The summary's head: counts (instances, questions, forward passes), MCQ diagnostics, the prompt, the CI
    unit, and an empty ``variants`` to fill."""

    kinds: dict[str, int] = {}
    for k in request_kinds(records):
        kinds[k] = kinds.get(k, 0) + 1
    n_questions = len(unique_questions(instances))
    return {
        "threshold": config.threshold,
        "n_instances": len(instances),
        "n_distinct_questions": n_questions,
        "instances_per_cell": inst.groupby(["category", "descriptor_type"]).size().rename("n").reset_index()
        .to_dict("records"),
        "forward_passes": {"by_kind": kinds, "total": len(records)},
        "paper_equivalent_generations": {
            "questions_x10": 2 * len(instances) * 10,
            "distinct_questions_x10": n_questions * 10,
            "note": "the paper samples each question >= 10 times (each a full generation); one label "
            "forward pass per distinct question and option order replaces them",
        },
        "mcq_diagnostics": mcq_diagnostics(records),
        "mcq_prompt": {"system_prompt": getattr(config, "system_prompt", None),
                       "chat_template": getattr(config, "chat_template", True)},
        # every CI resamples whole concept pairs: the instances of one pair share its context and options
        "ci": {"method": "95% percentile bootstrap", "unit": "concept pair (concept_id: one row of questions.csv, "
               "one distinct bias type1 / bias type2 pair)", "n_boot": config.n_boot},
        "variants": {},
    }


def _variant_summary(df: pd.DataFrame, thr: float, n_boot: int) -> dict[str, Any]:
    """One variant's metrics: overall, per category, per category x type (with CIs), per identity pair,
    direction per concept pair and each identity's concept-1 rate."""

    return {
        "overall": summarize_by(df, [], threshold=thr, n_boot=n_boot).to_dict("records")[0],
        "by_category": summarize_by(df, ["category"], threshold=thr, n_boot=n_boot).to_dict("records"),
        "by_type": summarize_by(df, ["category", "descriptor_type"], threshold=thr, n_boot=n_boot)
        .to_dict("records"),
        "by_identity_pair": summarize_by(
            df, ["category", "descriptor_type", "identity_1", "identity_2"], threshold=thr, ci=False
        ).to_dict("records"),
        "direction_by_pair": direction_by_pair(df, threshold=thr).to_dict("records"),
        "identity_concept1_rate": identity_concept1_rates(df, threshold=thr).to_dict("records"),
    }


def _paper_estimates(config: Any, records: pd.DataFrame, frames: Mapping[str, pd.DataFrame],
                     summary: dict[str, Any]) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """The paper's estimators into ``summary`` (``paper_equivalent``, ``paper_parsed``) when the run has them;
    their Table 1 layouts (None for one it has not)."""

    paper_table = None
    # the paper's estimator (T = 0.8, 10 samples, non-label answers dropped) for the MCQ a)=s1 order only: the
    # paper samples the MCQ answers; HBB-SG reads perplexities, which the paper never samples
    if getattr(config, "paper_temperature", None) is not None and "hbb" in frames:
        summary["paper_equivalent"], paper_table = paper_equivalent(config, records, frames["hbb"])
    parsed_table = None
    if "parsed" in records.columns and records["parsed"].notna().any() and "hbb" in frames:
        summary["paper_parsed"], parsed_table = paper_parsed(config, records, frames["hbb"],
                                                             summary.get("paper_equivalent"))
    return paper_table, parsed_table


def label_mass(records: pd.DataFrame, df: pd.DataFrame, thr: float, floor: float) -> tuple[dict, pd.DataFrame]:
    """The analogue of the paper's refusal table (Table 6): how much probability the MCQ labels carry.

    Per question (a)=s1 order) the label mass; a question below ``floor`` is "not answering" (the model
    would mostly write something other than a label: the closest exact counterpart of a refusal). Per
    category: the mass distribution, the share of questions not answering, and the count at S >= threshold
    over all instances and over the instances whose two questions both answer.
    """

    qp = question_probs(records)
    m1 = qp["label_mass"].reindex(df.q1).to_numpy() if "label_mass" in qp else np.full(len(df), np.nan)
    m2 = qp["label_mass"].reindex(df.q2).to_numpy() if "label_mass" in qp else np.full(len(df), np.nan)
    inst = df.assign(answers=[answering(a, floor) and answering(b, floor) for a, b in zip(m1, m2)])
    masses = qp["label_mass"] if "label_mass" in qp else pd.Series(dtype=float)
    question_category = dict(zip(df.q1, df.category)) | dict(zip(df.q2, df.category))
    rows, out = [], {"floor": floor, "by_category": {}}
    for cat in [*sorted(df.category.unique()), "all"]:
        part = inst if cat == "all" else inst[inst.category == cat]
        qs = [m for q, m in masses.items() if cat == "all" or question_category.get(q) == cat]
        ms = mass_summary(qs, floor)
        over = over_threshold(part.S.to_numpy(dtype=float), thr)
        kept = part[part.answers]
        entry = {**ms, "n_instances": len(part), "n_instances_answering": len(kept),
                 "count": int(over.sum()), "count_answering": int(over_threshold(kept.S.to_numpy(dtype=float),
                                                                                  thr).sum())}
        out["by_category"][str(cat)] = entry
        rows.append({"category": cat, "questions": ms["n"], "mean label mass": round(ms["mean"], 3),
                     "median": round(ms["median"], 3), f"not answering (< {floor:g})": f"{ms['share_below_floor']:.1%}",
                     f"count S>={thr:g}": entry["count"], "instances": len(part),
                     f"count S>={thr:g}, answering only": entry["count_answering"],
                     "instances answering": len(kept)})
    table = pd.DataFrame(rows)
    table.attrs["title"] = (f"Label mass of the MCQ answers (Table 6 analogue): a question whose labels carry less "
                            f"than {floor:g} of the probability is 'not answering'; counts at S >= {thr:g} with "
                            "and without the instances that have such a question")
    table.attrs["heading"] = "Table 6 analogue (label mass)"
    return out, table


def paper_equivalent(config: Any, records: pd.DataFrame, df: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """The paper's sampled count (T, N samples, S >= threshold) per category, per category x type and
    overall, computed exactly from the tempered label probabilities, beside the exact count; with its 5-95 %
    range over repeated runs of the paper's procedure and the noise floor (p1 = p2)."""

    spec = {"temperature": float(config.paper_temperature), "top_p": float(config.paper_top_p)}
    qp = sampled_question_probs(records, spec)
    inst = df.assign(p1_a=qp["pa_paper"].reindex(df.q1).to_numpy(), p1_b=qp["pb_paper"].reindex(df.q1).to_numpy(),
                     p2_a=qp["pa_paper"].reindex(df.q2).to_numpy(), p2_b=qp["pb_paper"].reindex(df.q2).to_numpy())
    n, thr = int(config.paper_samples), float(config.threshold)

    def one(part: pd.DataFrame) -> dict:
        r = sampled_count(part.p1_a, part.p1_b, part.p2_a, part.p2_b, n_samples=n, threshold=thr,
                          q1_ids=list(part.q1), q2_ids=list(part.q2)).to_dict()
        r["exact_count"] = int(over_threshold(part.S.to_numpy(dtype=float), thr).sum())
        return r

    groups = {"all": one(inst)}
    by_category = {str(c): one(g) for c, g in inst.groupby("category", sort=True)}
    by_type = {f"{c}|{t}": one(g) for (c, t), g in inst.groupby(["category", "descriptor_type"], sort=True)}
    rows = []
    for name, r in [*by_category.items(), *by_type.items(), *groups.items()]:
        rows.append({"group": name, "n": r["n"], f"exact count S>={thr:g}": r["exact_count"],
                     "paper expected count": round(r["expected_count"], 1),
                     "paper 5-95%": f"{r['count_q05']}-{r['count_q95']}",
                     "noise floor (p1 = p2)": round(r["noise_floor_expected_count"], 1),
                     "noise floor 5-95%": f"{r['noise_floor_q05']}-{r['noise_floor_q95']}",
                     "paper mean S over": round(r["expected_mean_s"], 1) if r["expected_mean_s"] == r["expected_mean_s"]
                     else None})
    table = pd.DataFrame(rows)
    title = (f"HBB (one option order) count at S >= {thr:g}: exact vs the paper's estimator (T = {spec['temperature']:g}, "
             f"top-p {spec['top_p']:g}, {n} samples per question, non-label answers dropped), computed exactly; "
             "5-95% over repeated runs of the paper's procedure (Poisson-binomial); noise floor: the same with "
             "p1 = p2 for every instance")
    table.attrs["title"], table.attrs["heading"] = title, "Table 1/2/9 beside the paper's estimator"
    settings = {**spec, "samples": n, "threshold": thr, "invalid": "drop",
                "estimator": "expected count of the paper's S >= threshold over its sampled answers"}
    return {"settings": settings, "all": groups["all"], "by_category": by_category, "by_type": by_type}, table


def _sweep(df: pd.DataFrame, thresholds: Sequence[float]) -> dict[str, list]:
    """Count, share and mean S per category and overall at each threshold (no CIs)."""

    out = {}
    for t in thresholds:
        overall = summarize_by(df, [], threshold=t, ci=False).iloc[0]
        out[f"{t:g}"] = (summarize_by(df, ["category"], threshold=t, ci=False)[["category", "count", "share", "mean_s"]]
                         .to_dict("records") + [{"category": "all", **{k: overall[k]
                                                                      for k in ("count", "share", "mean_s")}}])
    return out


def full_benchmark_requests(sg_n: int = 10) -> dict[str, int]:
    """Requests per kind for all 103,649 instances (77,350 distinct questions; HBB-SG at ``sg_n`` variations
    per option, and one variation generation per concept pair and option when ``sg_n > 1``)."""

    per_concept = sum(len(TYPE_INDEX[c]) * len(IDENTITIES[c]) for c in TYPE_INDEX)  # 50 distinct questions
    full_questions = 1547 * per_concept
    out = {"mcq": full_questions, "mcq_swap": full_questions, "sg": 2 * sg_n * full_questions}
    if sg_n > 1:
        out["sg_generate"] = 2 * 1547
    return out


def projection(timing: dict[str, dict[str, float]], sg_n: int = 10) -> dict:
    """Seconds per request kind (``{kind: {"n", "seconds"}}``, the runner's timing) and the projection to
    the full benchmark on the same machine (HBB-SG at ``sg_n`` variations per option)."""

    full_requests = full_benchmark_requests(sg_n)
    per = {k: v["seconds"] / v["n"] for k, v in timing.items() if v.get("n")}
    projected = {k: per[k] * n for k, n in full_requests.items() if k in per}
    return {
        "scored": timing,
        "seconds_per_request": per,
        "full_benchmark": {"instances": expected_counts()["total"], "distinct_questions": full_requests["mcq"],
                           "requests": full_requests, "projected_seconds": projected,
                           "projected_hours_total": sum(projected.values()) / 3600 if projected else None},
    }


def write_projection(output: Path, sg_n: int = 10) -> Path | None:
    """``timing_projection.json`` from the runner's ``timing.json`` (its ``scored_this_invocation``).

    An invocation that scored nothing (a finished run resumed) keeps the projection already there.
    """

    src = output / "timing.json"
    try:
        timing = json.loads(src.read_text(encoding="utf-8")).get("scored_this_invocation") or {}
    except (OSError, ValueError):
        return None
    if not any(k in timing for k in full_benchmark_requests(sg_n)):
        return None
    path = output / "timing_projection.json"
    write_json_atomic(path, projection(timing, sg_n))
    return path
