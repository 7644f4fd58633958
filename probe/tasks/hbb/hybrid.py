"""HBB's parsed count from the hybrid estimator: the letter enumerated, the rest of the answer sampled to the
authors' 2048 tokens (``parse_tail: hybrid``; :mod:`probe.scoring.parse.hybrid`).

The authors read a refusal anywhere in up to 2048 generated tokens ("sorry" and
"can't": the answer is filtered). The enumeration reads the first
``parse_max_new_tokens``; with the hybrid tail every branch it cut there, still
undecided, stays open, and generations drawn from that mass (and from what the
node budget left) are completed at the authors' sampler to 2048 tokens and
parsed. Per question the chance that one sample reads as a) / b) is the
head's mass plus the residual times the tail's share; the paper's count at
S >= threshold follows (:func:`probe.tasks.hbb.sampling.prob_s_at_least`),
with its 95 % interval (:func:`probe.metrics.hybrid.hybrid_metric`, clipped to
the certified interval).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd


def _renormalised(d: Mapping[str, Any]) -> dict[str, float]:
    """The residual policy's answer (the enumerated mix), for questions without tail draws."""
    from probe.metrics.certified import point_answer

    return point_answer(d)


def hybrid_counts(config: Any, records: pd.DataFrame, inst: pd.DataFrame, certified: Mapping[str, Any]
                  ) -> dict[str, Any] | None:
    """``{"all": {...}, "by_category": {...}}``, each ``{"expected_count", "ci"}``, from the parse records' hybrid
    entries; None when no question drew a tail. ``inst``: the instances (``q1``, ``q2``, ``category``; those
    whose questions have no parse record are left out); ``certified``: per group the count's certified interval."""
    from probe.metrics.hybrid import clipped, has_draws, hybrid_metric
    from probe.tasks.hbb.records import request_kinds
    from probe.tasks.hbb.sampling import prob_s_at_least

    parsed = {r["question_id"]: r["parsed"] for r, kind in zip(records.to_dict("records"), request_kinds(records))
              if kind == "mcq" and isinstance(r.get("parsed"), Mapping)}
    if not any(has_draws(d) for d in parsed.values()):
        return None
    inst = inst[inst.q1.isin(parsed) & inst.q2.isin(parsed)]
    n, thr = int(config.paper_samples), float(config.threshold)

    def metric(probs_of: Any) -> dict[str, float]:
        p = {q: probs_of(d) for q, d in parsed.items()}
        cols = [np.array([p[q].get(a, 0.0) for q in inst[f"q{i}"]]) for i in (1, 2) for a in ("0", "1")]
        over = prob_s_at_least(*cols, n_samples=n, threshold=thr) if len(inst) else np.zeros(0)
        out = {"all": float(over.sum())}
        for c in sorted(set(inst.category)):
            out[str(c)] = float(over[(inst.category == c).to_numpy()].sum())
        return out

    # a question's tail can read a) or b) although its draws read neither: both get the interval's width
    res = hybrid_metric(metric, _renormalised, seed=int(getattr(config, "sample_seed", 0)),
                        answers=lambda _d: ("0", "1"))
    sizes = {"all": len(inst), **{str(c): int((inst.category == c).sum()) for c in set(inst.category)}}
    one = {k: {"expected_count": v, "ci": clipped(ci, certified.get(k)), "n": sizes[k]} for k, (v, ci) in res.items()}
    return {"all": one.pop("all"), "by_category": one}
