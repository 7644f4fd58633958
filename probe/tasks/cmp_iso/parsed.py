"""iso/cmp: the authors' K-sample Parity Gap from their own procedure, enumerated (``summary["paper_parsed"]``).

Per prompt the enumeration gives the chance that one generation after the
authors' generation-mode prompt is each offered label (``parsed.jsonl``). Per
context pair the expected preference over K generations per prompt
(:mod:`probe.tasks.cmp_iso.sampling`: invalid answers excluded, the 0.5
fallback when no valid or affirmative answer is drawn); the Parity Gap is the
mean of ``2 E[p_t] - 1`` over pairs, per setting and benchmark.

The published point (``pg``) is the hybrid estimator (``parse_tail: hybrid``,
the default; :mod:`probe.metrics.hybrid`): each prompt's exact head plus the mass
it left answered by that prompt's own tail draws (``ceil(K x residual)`` of
them), the exact head alone where the enumeration closed. Its 95 % interval
(``pg_ci``) comes from each prompt's own draws, centred on the point. A context
pair with a prompt whose head parsed nothing and whose tail draws read no label
rests on nothing: it is left out and counted (``n_pairs_undefined``); a cell
with none left is undefined. The renormalising rule (the mass not enumerated
answered in the prompt's enumerated mix, ``p / (1 - residual)``) stays as a
named sensitivity (``pg_rule``); with ``parse_tail: exact`` (no tail draws) it is
the only point there is, and the estimator says so.

Certified interval: the K-sample preference is monotone in where the residual
goes (couple the K draws: a draw moved to t's answer can only raise ``p_t``,
one moved to the other answer can only lower it), so over every split the
pair's preference is extreme when each prompt's residual all goes to the
answer favouring t, or all to the one against t (:func:`_pair_bounds`); the
Parity Gap's interval is the mean of the pairs' intervals (pairs share no prompt).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from probe.metrics.certified import RESIDUAL_POLICY, answer_target, interval_mean, point_answer, uncertified
from probe.metrics.certified import interval_text
from probe.metrics.hybrid import answered, hybrid_metric, hybrid_probs, undefined_text
from probe.scoring.parse.schema import TailSpec
from probe.tasks.cmp_iso.sampling import expected_cmp_preference, expected_iso_preference

#: the renormalising rule (a sensitivity, the published point only without tail draws)
_probs = point_answer


def head_budget(config: Any) -> tuple[int | None, Any]:
    """The exact head's node budget and the request's hybrid tail: with ``parse_tail: hybrid``, half of
    ``parse_max_nodes`` for the head and the K samples' budget in all (the tail draws in what the head left)."""
    if getattr(config, "parse_tail", "exact") != "hybrid":
        return config.parse_max_nodes, None

    nodes = config.parse_max_nodes
    return (max(1, nodes // 2) if nodes is not None else None), TailSpec(int(config.parse_k), None, int(config.seed))


def pair_preferences(records: Any, k: int, probs_of: Any = None, defined_only: bool = False) -> list[dict]:
    """One row per (setting, benchmark, pair, task type): the expected preference of t over K generations,
    the gap and its certified interval (``gap_certified``). ``probs_of(parsed record)``: each prompt's answer
    probabilities (default: the renormalising rule; the hybrid estimator passes its own). ``defined_only``:
    leave out a pair with a prompt whose answer rests on nothing (:func:`probe.metrics.hybrid.answered`).
    ``records``: the frame, or its complete pairs (:func:`_pairs`) when called many times."""
    probs_of = probs_of or _probs
    rows = []
    pairs = records if isinstance(records, dict) else _pairs(records)
    for (setting, bench, pair, task_type), slots in pairs.items():
        if defined_only and not all(answered(d) for d in slots.values()):
            continue
        pref = _preference(task_type, {s: dict(probs_of(d)) for s, d in slots.items()}, k)
        lo, hi = _pair_bounds(task_type, slots, k)
        rows.append({"setting": setting, "benchmark": bench, "context_pair_id": pair, "task_type": task_type,
                     "preference": pref, "gap": 2 * pref - 1, "gap_certified": [2 * lo - 1, 2 * hi - 1]})
    return rows


def _pairs(records: Any) -> dict[tuple, dict[str, dict]]:
    """Complete context pairs: (setting, benchmark, pair, task type) -> slot -> parse record."""
    by_pair: dict[tuple, dict] = {}
    for rec in records.to_dict("records"):
        d = rec.get("parsed")
        if not isinstance(d, dict):
            continue
        key = (rec["setting"], rec["benchmark"], str(rec["context_pair_id"]), rec["task_type"])
        slot = rec["target"] if rec["task_type"] == "iso" else rec["order"]
        by_pair.setdefault(key, {})[slot] = d
    return {key: slots for key, slots in by_pair.items()
            if set(slots) == ({"t", "t_prime"} if key[3] == "iso" else {"t_first", "t_prime_first"})}


def _preference(task_type: str, slots: dict[str, dict[str, float]], k: int) -> float:
    """The pair's expected K-sample preference from its prompts' per-generation answer probabilities."""

    if task_type == "iso":
        return expected_iso_preference(*_yes_valid(slots["t"]), *_yes_valid(slots["t_prime"]), k)
    # t's option is A when t comes first, B otherwise
    return 0.5 * (expected_cmp_preference(*_pair(slots["t_first"], "A", "B"), k)
                  + expected_cmp_preference(*_pair(slots["t_prime_first"], "B", "A"), k))


def _pair_bounds(task_type: str, slots: dict[str, dict], k: int) -> tuple[float, float]:
    """The pair's preference over every split of its prompts' residuals (enumerated masses, not renormalised):
    highest with each residual on the answer favouring t (iso: Yes for t, another label for t'; cmp: t's
    option), lowest with it on the answer against t. A label the parser never saw stands for "another
    offered label" (``_other``)."""
    raw = {s: ({a: float(v) for a, v in d["probs"].items()}, float(d["residual"])) for s, d in slots.items()}

    def moved(slot: str, answer: str) -> dict[str, float]:
        probs, r = raw[slot]
        return {**probs, answer: probs.get(answer, 0.0) + r}

    if task_type == "iso":
        hi = {"t": moved("t", "Yes"), "t_prime": moved("t_prime", _OTHER)}
        lo = {"t": moved("t", _OTHER), "t_prime": moved("t_prime", "Yes")}
    else:
        hi = {"t_first": moved("t_first", "A"), "t_prime_first": moved("t_prime_first", "B")}
        lo = {"t_first": moved("t_first", "B"), "t_prime_first": moved("t_prime_first", "A")}
    return _preference(task_type, lo, k), _preference(task_type, hi, k)


#: a stand-in for "an offered label other than Yes" (the parser keeps offered labels only)
_OTHER = "<another offered label>"


def _yes_valid(p: dict[str, float]) -> tuple[float, float]:
    """(P(Yes), P(any offered label)) of one generation (the parser keeps offered labels only)."""
    valid = min(1.0, math.fsum(p.values()))
    return min(p.get("Yes", 0.0), valid), valid


def _pair(p: dict[str, float], t: str, t_prime: str) -> tuple[float, float]:
    a = min(1.0, p.get(t, 0.0))
    return a, min(1.0 - a, p.get(t_prime, 0.0))


def parsed_summary(records: Any, config: Any) -> dict[str, Any]:
    """Settings, the Parity Gap per (setting, benchmark, paradigm) and the enumeration's residual / rejected."""
    k = int(config.parse_k)
    cells: dict[tuple, list[dict]] = {}
    for r in pair_preferences(records, k):
        cells.setdefault((r["setting"], r["benchmark"], r["task_type"]), []).append(r)
    parsed = [d for d in records["parsed"] if isinstance(d, dict)]
    hybrid = getattr(config, "parse_tail", "exact") == "hybrid" and any("hybrid" in d for d in parsed)
    published = _hybrid_cells(records, k, int(getattr(config, "seed", 0))) if hybrid else {}
    target = answer_target(config.parse_answer_residual)
    flagged = sum(uncertified(math.fsum(float(v) for v in d["probs"].values()), float(d["residual"]), target)
                  for d in parsed)
    return {
        "settings": {"temperature": config.paper_temperature, "top_p": config.paper_top_p, "k": k,
                     "max_new_tokens": config.parse_max_new_tokens,
                     "prompt": "the authors' generation mode (\"... My answer would be: \\boxed{\")",
                     "parser": "the authors' extractor: the last boxed offered label",
                     "estimator": (f"hybrid: expected Parity Gap over {k} generations per prompt, each prompt's exact "
                                   "head plus its own tail draws; pairs with nothing parsed left out"
                                   if hybrid else f"renormalising rule: expected Parity Gap over {k} generations per "
                                   "prompt, the mass not enumerated answered in the prompt's enumerated mix"),
                     "residual_policy": RESIDUAL_POLICY,
                     "tail": ("hybrid: half the node budget enumerated, ceil(K x residual) generations drawn from "
                              "the mass left per prompt" if hybrid else "exact")},
        "by_cell": [_cell(s, b, t, g, published.get((s, b, t)) if hybrid else None)
                    for (s, b, t), g in sorted(cells.items())],
        "n_prompts": len(parsed),
        "n_prompts_nothing_parsed": sum(not answered(d) for d in parsed),
        "n_uncertified": flagged,
        "answer_residual_target": target,
        "max_residual": max((float(d["residual"]) for d in parsed), default=math.nan),
        "mean_rejected": float(np.mean([float(d["rejected"]) for d in parsed])) if parsed else math.nan,
        "mean_nodes": float(np.mean([float(d["nodes"]) for d in parsed])) if parsed else math.nan,
        **_tail_stats(parsed, getattr(config, "parse_tail", "exact")),
    }


def _cell(setting: str, bench: str, task_type: str, rows: list[dict], hybrid: Any) -> dict[str, Any]:
    """One cell: the published Parity Gap (the hybrid's, with its 95 % interval; the rule's without tail
    draws), its certified interval, the rule as a sensitivity, and the pairs left out for resting on nothing."""
    cert = list(interval_mean([tuple(r["gap_certified"]) for r in rows]))
    rule = float(np.mean([r["gap"] for r in rows]))
    out = {"setting": setting, "benchmark": bench, "task_type": task_type, "pg_certified": cert,
           "pg_rule": rule, "n_pairs": len(rows)}
    if hybrid is None:
        return {**out, "pg": rule, "pg_ci": [math.nan, math.nan], "estimator": "rule"}
    point, ci, n_defined = hybrid
    out.update({"pg": point, "pg_ci": list(ci), "estimator": "hybrid", "n_pairs": n_defined,
                "n_pairs_undefined": len(rows) - n_defined})
    if n_defined == 0:
        out["undefined"] = undefined_text(len(rows), len(rows), "context pairs")
    return out


def _hybrid_cells(records: Any, k: int, seed: int) -> dict[tuple, tuple[float, list[float], int]]:
    """Per cell the Parity Gap from the hybrid estimator (pairs whose answers rest on nothing left out), its
    95 % interval (:func:`probe.metrics.hybrid.hybrid_metric`: each prompt's own tail draws) and the pairs
    it rests on."""

    def metric(probs_of: Any) -> dict[tuple, float]:
        cells: dict[tuple, list[float]] = {c: [] for c in keys}
        for r in pair_preferences(pairs, k, probs_of, defined_only=True):
            cells[(r["setting"], r["benchmark"], r["task_type"])].append(r["gap"])
        return {c: float(np.mean(g)) if g else math.nan for c, g in cells.items()}

    pairs = _pairs(records)
    keys = {(s, b, t) for (s, b, _p, t) in pairs}
    n_defined: dict[tuple, int] = {c: 0 for c in keys}
    for r in pair_preferences(pairs, k, hybrid_probs, defined_only=True):
        n_defined[(r["setting"], r["benchmark"], r["task_type"])] += 1
    # a prompt's tail can read any offered label although its draws read none: each gets the interval's width
    offered = {id(rec["parsed"]): tuple(map(str, rec.get("options") or ()))
               for rec in records.to_dict("records") if isinstance(rec.get("parsed"), dict)}
    res = hybrid_metric(metric, seed=seed, answers=lambda d: offered.get(id(d), ()), limits=(-1.0, 1.0))
    return {c: (v.point, v.ci, n_defined[c]) for c, v in res.items()}


def _tail_stats(parsed: list[dict], mode: str) -> dict[str, Any]:
    """How the hybrid's tail was spent: prompts with draws, mean draws and forward tokens per prompt."""
    hyb = [d["hybrid"] for d in parsed if isinstance(d.get("hybrid"), dict)]
    if mode != "hybrid" or not hyb:
        return {}
    return {"tail": {"n_prompts_drawn": sum(1 for h in hyb if h["n_tail"] > 0),
                     "mean_draws": float(np.mean([h["n_tail"] for h in hyb])),
                     "mean_tail_tokens": float(np.mean([h["tokens"] for h in hyb]))}}


def parsed_table(summary: dict, model: str) -> Any:
    """One row per setting x benchmark: the authors' K-sample Parity Gap, iso and cmp, as published (the hybrid
    and its 95 % interval, or "n/a: nothing parsed"), its certified interval and the renormalising rule."""

    rows: dict[tuple, dict] = {}
    for c in summary["by_cell"]:
        row = rows.setdefault((c["setting"], c["benchmark"]), {"Model": model, "Setting": c["setting"],
                                                                "Benchmark": c["benchmark"]})
        t = c["task_type"]
        if c.get("estimator", "rule") == "hybrid":  # the column names the estimator
            row[f"PG {t} hybrid"] = c.get("undefined") or f"{c['pg']:.4f} {interval_text(c.get('pg_ci'), 4)}"
        else:
            row[f"PG {t}"] = round(c["pg"], 4)
        row[f"PG {t} certified"] = interval_text(c.get("pg_certified"), 4)
        if c.get("estimator") == "hybrid":
            row[f"PG {t} renormalising rule"] = round(c["pg_rule"], 4)
        row[f"pairs {t}"] = c["n_pairs"]
    return pd.DataFrame(list(rows.values()))
