"""HBB's count from the paper's own procedure, enumerated (``summary["paper_parsed"]``): each MCQ question's
generations under the paper's sampling, read by the ``choice)<answer>`` rule, then the paper's N-sample
estimator (:mod:`probe.tasks.hbb.sampling`) beside the first-token one. The published count
(``paper_parsed["published"]``, :mod:`probe.tasks.hbb.hybrid`) is the hybrid's: each question's exact head plus
its own tail draws, with a 95 % interval holding the tail's and the paper's N-sample noise, and ``n/a`` where
nothing parsed; the certified interval (:mod:`probe.tasks.hbb.certify`) beside it; the renormalising rule's
count (``all``, ``by_category``) stays as a sensitivity."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from probe.metrics.certified import RESIDUAL_POLICY, answer_target, interval_text, uncertified
from probe.tasks.hbb.certify import count_bounds
from probe.tasks.hbb.hybrid import published_counts
from probe.tasks.hbb.records import request_kinds, sampled_question_probs
from probe.tasks.hbb.samplers import parse_chain
from probe.tasks.hbb.sampling import sampled_count

__all__ = ["paper_parsed", "parsed_question_probs"]


def parsed_question_probs(records: pd.DataFrame) -> pd.DataFrame:
    """Per question (a)=s1 order), from its enumerated generations: the mass parsed as label a) / b)
    (``pa_parsed``, ``pb_parsed``; the rest was refused, unparsable or not enumerated), ``residual``,
    ``rejected`` and ``nodes``; questions without a distribution are left out."""
    rows = []
    for r, kind in zip(records.to_dict("records"), request_kinds(records)):
        d = r.get("parsed")
        if kind != "mcq" or not isinstance(d, Mapping):
            continue
        rows.append({"question_id": r["question_id"], "pa_parsed": float(d["probs"].get("0", 0.0)),
                     "pb_parsed": float(d["probs"].get("1", 0.0)), "residual": float(d["residual"]),
                     "rejected": float(d["rejected"]), "nodes": int(d["nodes"])})
    cols = ["question_id", "pa_parsed", "pb_parsed", "residual", "rejected", "nodes"]
    return pd.DataFrame(rows, columns=cols).set_index("question_id")


def paper_parsed(config: Any, records: pd.DataFrame, df: pd.DataFrame,
                 first_token: Mapping[str, Any] | None) -> tuple[dict, pd.DataFrame]:
    """The paper's count from its own procedure: each question's generations under the paper's sampling,
    parsed by the ``choice)<answer>`` rule (refusals are non-answers), enumerated exactly
    (:func:`probe.scoring.parse.exact.parse_exact`); then the same N-sample estimator as
    :func:`~probe.tasks.hbb.summary.paper_equivalent`, with how far it lies from the first-token estimate.

    The published count is the hybrid's (``published``, :func:`probe.tasks.hbb.hybrid.published_counts`).
    ``all`` / ``by_category``: the renormalising rule's (mass not enumerated answered in the question's
    enumerated mix, P(a) = p_a / (1 - residual)), a sensitivity, with the count's certified interval
    (``expected_count_certified``, :mod:`probe.tasks.hbb.certify`: every split of the residual)."""

    qp = parsed_question_probs(records)
    inst = _parsed_instances(qp, df)
    n, thr = int(config.paper_samples), float(config.threshold)
    spec = {"temperature": float(config.paper_temperature), "top_p": float(config.paper_top_p)}
    overall = _parsed_count(inst, n, thr) if len(inst) else None
    by_category = {str(c): _parsed_count(g, n, thr) for c, g in inst.groupby("category", sort=True)}
    stats = _parse_stats(config, records, qp, len(inst), spec, first_token)
    settings = _parse_settings(config, spec, n, thr)
    certified = {"all": (overall or {}).get("expected_count_certified"),
                 **{c: r.get("expected_count_certified") for c, r in by_category.items()}}
    published = published_counts(config, records, df)
    if published is not None:
        for g, c in [("all", published["all"]), *published["by_category"].items()]:
            c["certified"] = certified.get(g)
        stats["published"] = published
        settings["estimator"] = published["estimator"]
        if "hybrid" in published["estimator"]:
            settings["tail"] = (f"hybrid: ceil({n} x residual) generations a question drawn from the mass not "
                                f"enumerated, completed to {int(config.parse_tail_max_new_tokens)} tokens")
    table = _parsed_table(overall, by_category, first_token, published, settings, stats["max_residual"])
    return {"settings": settings, "all": overall, "by_category": by_category, **stats}, table


def _parsed_instances(qp: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """The instances of ``df`` whose two questions were parsed, with per question ``i``: ``p{i}_a``, ``p{i}_b``
    (the enumerated mix, the residual answered in it), ``p{i}_raw_a``, ``p{i}_raw_b`` (as enumerated) and
    ``p{i}_r`` (the residual)."""
    kept = (1.0 - qp["residual"]).where(qp["residual"] < 1.0)
    # a question with nothing enumerated to its own budget (every branch left to the hybrid's tail) has an empty
    # enumerated mix: its point reads no answer (the drop rule skips it), inside its certified range
    cols = {"a": (qp["pa_parsed"] / kept).fillna(0.0), "b": (qp["pb_parsed"] / kept).fillna(0.0),
            "raw_a": qp["pa_parsed"],
            "raw_b": qp["pb_parsed"], "r": qp["residual"]}
    inst = df.assign(**{f"p{i}_{c}": v.reindex(df[f"q{i}"]).to_numpy() for i in (1, 2) for c, v in cols.items()})
    return inst[inst[[f"p{i}_{c}" for i in (1, 2) for c in cols]].notna().all(axis=1).to_numpy()]


def _parsed_count(part: pd.DataFrame, n: int, thr: float) -> dict:
    """The paper's N-sample count over ``part`` from the parsed probabilities, with its certified interval."""

    out = sampled_count(part.p1_a, part.p1_b, part.p2_a, part.p2_b, n_samples=n, threshold=thr,
                        q1_ids=list(part.q1), q2_ids=list(part.q2)).to_dict()
    out["expected_count_certified"] = count_bounds(part.p1_raw_a, part.p1_raw_b, part.p1_r, part.p2_raw_a,
                                                   part.p2_raw_b, part.p2_r, n_samples=n, threshold=thr)
    return out


def _parse_stats(config: Any, records: pd.DataFrame, qp: pd.DataFrame, n_instances: int,
                 spec: Mapping[str, float], first_token: Mapping[str, Any] | None) -> dict:
    """The enumeration's counts (questions, uncertified ones, residuals, nodes) and how far its P-hat(A) lies
    from the first-token estimator's per question (a)=s1 order)."""

    target = answer_target(config.parse_answer_residual)
    flagged = int(sum(uncertified(a + b, r, target) for a, b, r in zip(qp["pa_parsed"], qp["pb_parsed"], qp["residual"])))
    ft = sampled_question_probs(records, spec).reindex(qp.index)
    phat_ft = ft["pa_paper"] / (ft["pa_paper"] + ft["pb_paper"])
    phat_parsed = qp["pa_parsed"] / (qp["pa_parsed"] + qp["pb_parsed"])
    diff = (phat_parsed - phat_ft).abs().dropna()
    ft_all = (first_token or {}).get("all") or {}
    return {"n_questions": int(len(qp)), "n_instances": n_instances,
            "n_uncertified": flagged, "answer_residual_target": target,
            "max_residual": float(qp["residual"].max()) if len(qp) else math.nan,
            "mean_residual": float(qp["residual"].mean()) if len(qp) else math.nan,
            "mean_rejected": float(qp["rejected"].mean()) if len(qp) else math.nan,
            "mean_nodes": float(qp["nodes"].mean()) if len(qp) else math.nan,
            "mean_abs_diff_phat_a_vs_first_token": float(diff.mean()) if len(diff) else math.nan,
            "max_abs_diff_phat_a_vs_first_token": float(diff.max()) if len(diff) else math.nan,
            "expected_count_first_token": ft_all.get("expected_count")}


def _parse_settings(config: Any, spec: Mapping[str, float], n: int, thr: float) -> dict:
    """The procedure's settings as the summary records them: sampler, samples, parser, invalid answers."""

    chain = parse_chain(getattr(config, "parse_sampler", "plain"), spec["temperature"], spec["top_p"])
    sampler = chain.describe() if chain is not None else f"T = {spec['temperature']:g}, top-p {spec['top_p']:g}"
    return {**spec, "sampler": sampler, "samples": n, "threshold": thr,
            "max_new_tokens": int(config.parse_max_new_tokens),
            "parser": "choice)<answer> at the start, after an optional answer cue; an output holding 'sorry' "
                      "and \"can't\" is a non-answer (the authors' cleaning); probe.tasks.hbb.parse",
            "invalid": "drop (refusals and unparsable answers)", "residual_policy": RESIDUAL_POLICY}


def _parsed_table(overall: dict | None, by_category: Mapping[str, dict], first_token: Mapping[str, Any] | None,
                  hybrid: Mapping[str, Any] | None, settings: Mapping[str, Any], max_residual: float) -> pd.DataFrame:
    """Table 1 from sampling + parsing: per category and overall, the parsed count beside the first-token one."""

    ft_all = (first_token or {}).get("all") or {}
    ft_by_category = (first_token or {}).get("by_category") or {}
    rows = []
    for name, r in [*by_category.items(), ("all", overall)]:
        if r is None:
            continue
        ref = ft_all if name == "all" else ft_by_category.get(name) or {}
        rows.append({"group": name, "n": r["n"], "parsed renormalising rule": round(r["expected_count"], 1),
                     "rule 5-95%": f"{r['count_q05']}-{r['count_q95']}",
                     "parsed certified": interval_text(r.get("expected_count_certified"), 1),
                     **({_published_column(hybrid): _published_text(hybrid, name)} if hybrid is not None else {}),
                     "first-token expected count": round(float(ref.get("expected_count", math.nan)), 1)})
    thr, n = settings["threshold"], settings["samples"]
    table = pd.DataFrame(rows)
    table.attrs["title"] = (f"HBB (one option order) count at S >= {thr:g} from the paper's procedure "
                            f"({settings['sampler']}, {n} samples, generations parsed), enumerated exactly, beside "
                            f"the first-token estimator; largest mass not enumerated per question {max_residual:.3f}")
    table.attrs["heading"] = "Table 1 from sampling + parsing"
    return table


def _published_column(published: Mapping[str, Any]) -> str:
    """The published count's column, naming its estimator."""
    return "parsed hybrid" if "hybrid" in published["estimator"] else "parsed (renormalising rule, no tail)"


def _published_text(published: Mapping[str, Any], group: str) -> str:
    """The published count and its 95 % interval (the tail's and the paper's N-sample noise; it holds at any
    number of instances, being no resampling of them), or why there is none."""

    h = published["all"] if group == "all" else published["by_category"].get(group)
    if h is None:
        return ""
    if h.get("undefined"):
        return str(h["undefined"])
    return f"{h['expected_count']:.1f} {interval_text(h['ci'], 1)}"
