"""BBQ-family records -> answer records: each scored (item, format) as its three option probabilities.

The metrics (:mod:`probe.tasks.bbq.metrics`), ImplicitBBQ's tables
(:mod:`probe.tasks.implicitbbq.tables`) and the paired units
(:mod:`probe.tasks.bbq.paired_units`) take these answer records; BBQ and
ImplicitBBQ turn their runner records into them here.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, Mapping

from probe.tasks.bbq.prompts import PreparedPrompt, find_cue, to_probs
from probe.tasks.chains import chain_index


__all__ = ["ITEM_FIELDS", "answer_records", "option_probs", "sampled_option_probs"]

#: item fields kept in each metric record (beside probs, pred_index, mass)
ITEM_FIELDS = ("item_id", "strategy", "answer_format", "dimension", "category", "setting", "context_kind",
               "context_condition", "question_polarity", "label", "target_index", "unknown_index", "template_id",
               "cue1", "cue2", "target_group")


def option_probs(answer_format: str, owner: Any, logprobs: Any, probs: Any, mass: Any) -> dict[str, Any]:
    """The three option probabilities and the mass the scored answers carry, from one record.

    ``oneword``: each option's mass is the total over its answer texts (Unknown:
    over its paraphrases), renormalised (:func:`probe.tasks.bbq.prompts.to_probs`);
    ``labels``: the record's softmax over the labels and its label mass.
    """

    prepared = PreparedPrompt("", "", answer_format, (), tuple(int(o) for o in owner))
    result = SimpleNamespace(probs=list(probs), label_mass=mass, logprobs=list(logprobs))
    return to_probs(prepared, result)


def sampled_option_probs(answer_format: str, owner: Any, entry: Mapping[str, Any]) -> dict[str, Any] | None:
    """The three option probabilities under a sampling spec, from a record's ``sampling`` entry; None if none
    of the scored answers can be sampled (every one outside the nucleus or underflowing).

    ``labels``: the entry's probs (renormalised over the labels) and mass.
    ``oneword``: each answer text's tempered log-likelihood is the log-probability
    that sampling emits exactly that text; an option's is the log-sum-exp over
    its texts (Unknown: its paraphrases), and the probabilities are those
    renormalised over the three options (in log space, so they survive the
    underflow a low temperature brings). ``mass``: the chance that a sample is
    one of the scored answer texts at all.

    >>> d = sampled_option_probs("oneword", [0, 1, 2, 2], {"logprobs": [math.log(.2), math.log(.1), None, math.log(.1)]})
    >>> [round(x, 3) for x in d["probs"]], round(d["mass"], 3)
    ([0.5, 0.25, 0.25], 0.4)
    """
    if answer_format == "labels":
        probs = [float(p) if p is not None else math.nan for p in entry["probs"]]
        mass = entry.get("mass")
        ok = all(math.isfinite(p) for p in probs) and mass is not None and math.isfinite(mass) and mass > 0
        return {"probs": probs, "mass": float(mass)} if ok else None
    per_option: list[list[float]] = [[], [], []]
    for lp, i in zip(entry["logprobs"], owner):
        if lp is not None and math.isfinite(lp):
            per_option[int(i)].append(float(lp))
    lse = [_logsumexp(v) for v in per_option]
    top = max(lse)
    if not math.isfinite(top):
        return None
    w = [math.exp(x - top) for x in lse]
    return {"probs": [x / sum(w) for x in w], "mass": math.exp(_logsumexp([x for v in per_option for x in v]))}


def _logsumexp(values: list[float]) -> float:
    if not values:
        return -math.inf
    m = max(values)
    return m + math.log(math.fsum(math.exp(v - m) for v in values))


def _entry(rec: Mapping[str, Any], spec: Mapping[str, float]) -> Mapping[str, Any] | None:
    for e in rec.get("sampling") or ():
        if math.isclose(e["temperature"], spec["temperature"]) and math.isclose(e["top_p"], spec["top_p"]):
            return e
    return None


def answer_records(records: Any, sampling: Mapping[str, float] | None = None) -> tuple[list[dict], int]:
    """(one answer record per finite scored record, the number of records skipped).

    A record whose scores are not finite (NaN/inf log-probabilities, e.g. a
    broken fp16 run) never becomes an answer. With ``sampling`` (a spec
    mapping), the option probabilities are those under that sampling
    (:func:`sampled_option_probs`); a record without that spec, or whose
    answers cannot be sampled at all, is skipped and counted. A record of a
    sampled reasoning chain keeps its ``chain`` index and whether the reasoning
    reached an answer cue (``has_cue``); averaging chains is the caller's
    (ImplicitBBQ's CoT).
    """

    out, skipped = [], 0
    for rec in records.to_dict("records") if hasattr(records, "to_dict") else records:
        values = list(rec["logprobs"]) + [rec.get("mass")]
        if not rec["finite"] or rec.get("pred_index") is None or not all(
                isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            skipped += 1
            continue
        if sampling is not None:
            entry = _entry(rec, sampling)
            p = sampled_option_probs(rec["answer_format"], rec["owner"], entry) if entry else None
            if p is None:
                skipped += 1
                continue
            p["logprobs"] = list(entry["logprobs"]) if "logprobs" in entry else list(rec["logprobs"])
        exact = option_probs(rec["answer_format"], rec["owner"], rec["logprobs"], rec["probs"], rec["mass"])
        p = exact if sampling is None else p
        m = {k: rec.get(k) for k in ITEM_FIELDS}
        m.update(id=rec["id"], probs=p["probs"], mass=p["mass"], logprobs=p["logprobs"],
                 option_mass=exact["option_mass"],
                 pred_index=max(range(3), key=lambda i: (p["probs"][i], -i)),
                 chain=chain_index(rec.get("chain")), has_cue=_has_cue(rec.get("reasoning")))
        out.append(m)
    return out, skipped


def _has_cue(reasoning: Any) -> bool | None:
    """Whether a CoT reasoning reached an answer cue (None: the record has no reasoning)."""

    return find_cue(reasoning) is not None if isinstance(reasoning, str) else None
