"""HBB records -> per-question probabilities -> per-instance P1(A), P2(A), S and direction.

Pure functions over a records frame (:func:`probe.runs.record.records_to_frame`:
one row per record, ``meta`` flattened; the request kind ``mcq`` / ``mcq_swap``
/ ``sg`` / ``crows`` is the ``meta.kind`` column because ``kind`` is the record
field). Kept apart from the task so that a finished run's outputs can be
rebuilt from its ``records.jsonl`` without a model.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import pandas as pd

from probe.tasks.hbb.metrics import bias_scores, direction, sg_prob_a, swap_average

#: a)=s1 order; mean over both orders; semi-generation
VARIANTS = ("hbb", "hbb_swapavg", "hbb_sg")
LABELS = {"hbb": "one option order", "hbb_swapavg": "both orders averaged", "hbb_sg": "HBB-SG"}
HBB_KINDS = ("mcq", "mcq_swap", "sg")


def request_kinds(records: pd.DataFrame) -> pd.Series:
    """The request kind of each record (``meta["kind"]``)."""
    if "meta.kind" in records:
        return records["meta.kind"]
    return pd.Series([None] * len(records), index=records.index, dtype=object)


def _num(x: Any) -> float:
    """A score as float; JSON null (a non-finite score read back) is NaN."""
    return math.nan if x is None else float(x)


def _score(r: dict, x: Any) -> float:
    """A record's score, NaN when the record is marked non-finite (it never becomes an answer)."""
    return _num(x) if r.get("finite", True) else math.nan


def question_probs(records: pd.DataFrame) -> pd.DataFrame:
    """Per question: P(s1) in the a)=s1 order, in the swapped order, and from HBB-SG.

    Columns (when their records exist): ``p_s1_mcq``, ``label_mass``,
    ``p_s1_swap``, ``label_mass_swap``, ``p_s1_sg`` (1/PPL normalized within each variation
    pair, then averaged: :func:`probe.tasks.hbb.metrics.sg_prob_a`) and ``sg_n`` (the pairs it
    averages); index ``question_id``.
    """

    rows: dict[str, dict] = {}
    sg: dict[str, tuple[dict, dict]] = {}  # question -> (option 1, option 2): variation -> PPL
    for r, kind in zip(records.to_dict("records"), request_kinds(records)):
        if kind not in HBB_KINDS:
            continue
        q = rows.setdefault(r["question_id"], {"question_id": r["question_id"]})
        if kind == "mcq":
            q["p_s1_mcq"], q["label_mass"] = _score(r, r["probs"][0]), _score(r, r["mass"])
        elif kind == "mcq_swap":
            q["p_s1_swap"], q["label_mass_swap"] = _score(r, r["probs"][1]), _score(r, r["mass"])  # s1 is option b)
        else:
            per = sg.setdefault(r["question_id"], ({}, {}))[int(r["option"]) - 1]
            j = r.get("variation")
            per[len(per) if j is None or j != j else int(j)] = _score(r, r["ppl"])  # no index: record order
    for qid, (a, b) in sg.items():
        # variation j of s1 is normalized against variation j of s2 (an unpaired one is left out)
        pairs = sorted(set(a) & set(b))
        rows[qid]["p_s1_sg"] = sg_prob_a([a[j] for j in pairs], [b[j] for j in pairs]) if pairs else np.nan
        rows[qid]["sg_n"] = len(pairs)
    if not rows:  # e.g. a CrowS-Pairs-only run
        return pd.DataFrame(index=pd.Index([], name="question_id"))
    return pd.DataFrame(list(rows.values())).set_index("question_id")


def instance_frame(instances: Sequence[Any], qp: pd.DataFrame) -> pd.DataFrame:
    """Join question probabilities into instances: P1(A), P2(A), S and direction per variant."""

    base = pd.DataFrame([{
        "id": i.id, "concept_id": i.concept_id, "category": i.category, "descriptor_type": i.descriptor_type,
        "identity_1": i.identity_1, "identity_2": i.identity_2, "q1": i.question_1.id, "q2": i.question_2.id,
        "concept_1": i.concept_1, "concept_2": i.concept_2,  # for the top associations (Tables 3 and 7)
    } for i in instances])
    cols = {"hbb": "p_s1_mcq", "hbb_sg": "p_s1_sg"}
    for variant, col in cols.items():
        if col in qp:
            base[f"{variant}_p1"] = qp[col].reindex(base.q1).to_numpy()
            base[f"{variant}_p2"] = qp[col].reindex(base.q2).to_numpy()
    if "p_s1_mcq" in qp and "p_s1_swap" in qp:
        avg = pd.Series(swap_average(qp.p_s1_mcq, qp.p_s1_swap), index=qp.index)
        base["hbb_swapavg_p1"] = avg.reindex(base.q1).to_numpy()
        base["hbb_swapavg_p2"] = avg.reindex(base.q2).to_numpy()
    for variant in VARIANTS:
        if f"{variant}_p1" in base:
            base[f"{variant}_S"] = bias_scores(base[f"{variant}_p1"], base[f"{variant}_p2"])
            base[f"{variant}_direction"] = direction(base[f"{variant}_p1"], base[f"{variant}_p2"])
    return base


def variant_frames(inst: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per scored variant, the per-instance frame the metrics and tables expect (``S``, ``direction``);
    HBB-SG keeps only the instances in its subset (``in_sg``): the others were not scored there."""
    frames = {}
    for v in (v for v in VARIANTS if f"{v}_S" in inst):
        df = inst.rename(columns={f"{v}_S": "S", f"{v}_direction": "direction"})
        if v == "hbb_sg" and "in_sg" in df:
            df = df[df.in_sg.astype(bool)]
        frames[v] = df
    return frames


def mcq_diagnostics(records: pd.DataFrame) -> dict:
    """Label mass and position bias of the MCQ scoring (not in the paper; needed to read it)."""
    kinds = request_kinds(records)
    mcq = [(k, r) for k, r in zip(kinds, records.to_dict("records")) if k in ("mcq", "mcq_swap")]
    if not mcq:
        return {}
    out: dict[str, Any] = {}
    for kind in ("mcq", "mcq_swap"):
        rs = [r for k, r in mcq if k == kind]
        if rs:
            pa = np.array([_score(r, r["probs"][0]) for r in rs], dtype=float)
            mass = np.array([_score(r, r["mass"]) for r in rs], dtype=float)
            ok = np.isfinite(pa)  # a non-finite record is no answer: out of every share, not counted as b)
            out[kind] = {"n": len(rs), "n_nonfinite": int((~ok).sum()),
                         "mean_p_label_a": float(np.mean(pa[ok])) if ok.any() else math.nan,
                         "mean_label_mass": float(np.nanmean(mass)) if ok.any() else math.nan,
                         "share_argmax_a": float(np.mean(pa[ok] > 0.5)) if ok.any() else math.nan}
    by_q: dict[str, dict] = {}
    for kind, r in mcq:
        by_q.setdefault(r["question_id"], {})[kind] = [_score(r, x) for x in r["probs"]]
    both = [(v["mcq"][0], v["mcq_swap"][1]) for v in by_q.values()
            if "mcq" in v and "mcq_swap" in v and math.isfinite(v["mcq"][0]) and math.isfinite(v["mcq_swap"][1])]
    if both:
        arr = np.array(both, dtype=float)
        out["order_agreement"] = {
            "n_questions": len(both),
            "same_argmax_option_share": float(np.mean((arr[:, 0] > 0.5) == (arr[:, 1] > 0.5))),
            "pearson_p_s1": float(np.corrcoef(arr[:, 0], arr[:, 1])[0, 1]) if len(both) > 2 else None,
        }
    return out


def sampled_question_probs(records: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """Per question (a)=s1 order): the chance one sample under ``spec`` is label a) / label b)
    (``pa_paper``, ``pb_paper``: the tempered label probabilities times the tempered label mass); NaN when the
    record is non-finite or lacks the spec."""
    rows = []
    for r, kind in zip(records.to_dict("records"), request_kinds(records)):
        if kind != "mcq":
            continue
        pa = pb = math.nan
        entry = next((e for e in (r.get("sampling") or ()) if math.isclose(e["temperature"], spec["temperature"])
                      and math.isclose(e["top_p"], spec["top_p"])), None)
        if entry is not None and r.get("finite", True) and entry.get("mass") is not None:
            probs = [_num(x) for x in entry["probs"]]
            pa, pb = _num(entry["mass"]) * probs[0], _num(entry["mass"]) * probs[1]
        rows.append({"question_id": r["question_id"], "pa_paper": pa, "pb_paper": pb})
    return pd.DataFrame(rows, columns=["question_id", "pa_paper", "pb_paper"]).set_index("question_id")
