"""HBB's published parsed count: each question's exact head plus its own tail, sampled to the authors' 2048
tokens (``parse_tail: hybrid``; :mod:`probe.scoring.parse.hybrid`, :mod:`probe.metrics.hybrid`).

The authors read a refusal anywhere in up to 2048 generated tokens ("sorry" and
"can't": the answer is filtered). The enumeration reads the first
``parse_max_new_tokens``; with the hybrid tail every branch it cut there, still
undecided, stays open, and ``ceil(N x residual)`` generations drawn from that
mass are completed at the authors' sampler to 2048 tokens and parsed. Per
question the chance that one sample reads as a) / b) is the head's mass plus
the residual times the question's own tail share; the paper's count at
S >= threshold follows (:func:`probe.tasks.hbb.sampling.prob_s_at_least`).

Its 95 % interval (:func:`probe.metrics.hybrid.hybrid_metric`) holds both the
tail's uncertainty (each question's own draws) and the paper's N-sample noise
(the count is a sum of independent instance events: variance ``sum p (1 - p)``),
centred on the point. An instance with a question whose head parsed nothing and
whose tail draws read no answer rests on nothing: it is left out and counted; a
group with none left is undefined (``n/a: nothing parsed, 8 of 8 questions``),
never a count of 0. Without tail draws (``parse_tail: exact``) the renormalising
rule answers the residual, named as such.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from probe.metrics.certified import point_answer
from probe.metrics.hybrid import answered, hybrid_metric, undefined_text
from probe.tasks.hbb.records import request_kinds
from probe.tasks.hbb.sampling import prob_s_at_least

__all__ = ["published_counts"]


def published_counts(config: Any, records: pd.DataFrame, inst: pd.DataFrame) -> dict[str, Any] | None:
    """``{"estimator", "all": {...}, "by_category": {...}}``, each group ``{"expected_count", "ci", "n",
    "n_undefined", "undefined"}`` (``undefined``: the reason, only where no instance is left); None without
    parse records. ``inst``: the instances (``q1``, ``q2``, ``category``; those whose questions have no parse
    record are left out)."""

    parsed = {r["question_id"]: r["parsed"] for r, kind in zip(records.to_dict("records"), request_kinds(records))
              if kind == "mcq" and isinstance(r.get("parsed"), Mapping)}
    if not parsed:
        return None
    hybrid = any("hybrid" in d for d in parsed.values())
    inst = inst[inst.q1.isin(parsed) & inst.q2.isin(parsed)]
    ok = np.array([answered(parsed[a]) and answered(parsed[b]) for a, b in zip(inst.q1, inst.q2)], dtype=bool)
    kept = inst[ok] if len(inst) else inst
    n, thr = int(config.paper_samples), float(config.threshold)
    groups = {"all": np.ones(len(kept), dtype=bool),
              **{str(c): (kept.category == c).to_numpy() for c in sorted(set(inst.category))}}

    def over(probs_of: Any) -> np.ndarray:
        p = {q: probs_of(parsed[q]) for q in {*kept.q1, *kept.q2}}
        cols = [np.array([p[q].get(a, 0.0) for q in kept[f"q{i}"]]) for i in (1, 2) for a in ("0", "1")]
        return prob_s_at_least(*cols, n_samples=n, threshold=thr) if len(kept) else np.zeros(0)

    def metric(probs_of: Any) -> dict[str, float]:
        o = over(probs_of)
        return {g: float(o[m].sum()) if m.any() else float("nan") for g, m in groups.items()}

    def noise(probs_of: Any) -> dict[str, float]:  # the paper's N-sample count: a sum of instance events
        o = over(probs_of)
        return {g: float((o[m] * (1 - o[m])).sum()) for g, m in groups.items()}

    sizes = {g: int(m.sum()) for g, m in groups.items()}
    res = hybrid_metric(metric, None if hybrid else point_answer, seed=int(getattr(config, "sample_seed", 0)),
                        answers=lambda _d: ("0", "1"), noise=noise, limits=lambda g: (0.0, float(sizes[g])))
    out = {}
    for g, v in res.items():
        mine = inst if g == "all" else inst[inst.category.astype(str) == g]
        questions = {*mine.q1, *mine.q2}
        empty = sum(not answered(parsed[q]) for q in questions)
        out[g] = {"expected_count": v.point, "ci": list(v.ci), "n": sizes[g], "n_undefined": len(mine) - sizes[g],
                  **({"undefined": undefined_text(empty, len(questions), "questions")} if not sizes[g] else {})}
    estimator = ("hybrid: exact head + each question's tail draws" if hybrid
                 else "renormalising rule (no tail draws)")
    return {"estimator": estimator, "all": out.pop("all"), "by_category": out}
