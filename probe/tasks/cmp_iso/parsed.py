"""iso/cmp: the authors' K-sample Parity Gap from the enumerated parse distributions (``summary["paper_parsed"]``).

Per prompt the enumeration gives the chance that one generation after the
authors' generation-mode prompt is each offered label (``parsed.jsonl``);
the mass not enumerated (``residual``) is left out by renormalising over the
enumerated mass, and the largest residual is reported. Per context pair the
expected preference over K generations per prompt
(:mod:`probe.tasks.cmp_iso.sampling`: invalid answers excluded, the 0.5
fallback when no valid or affirmative answer is drawn); the Parity Gap is
the mean of ``2 E[p_t] - 1`` over pairs, per setting and benchmark.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _probs(parsed: dict) -> dict[str, float]:
    kept = 1.0 - float(parsed["residual"])
    return {k: float(v) / kept for k, v in parsed["probs"].items()} if kept > 0 else {}


def pair_preferences(records: Any, k: int) -> list[dict]:
    """One row per (setting, benchmark, pair, task type): the expected preference of t over K generations."""
    from probe.tasks.cmp_iso.sampling import expected_cmp_preference, expected_iso_preference

    by_pair: dict[tuple, dict] = {}
    for rec in records.to_dict("records"):
        d = rec.get("parsed")
        if not isinstance(d, dict):
            continue
        key = (rec["setting"], rec["benchmark"], str(rec["context_pair_id"]), rec["task_type"])
        slot = rec["target"] if rec["task_type"] == "iso" else rec["order"]
        by_pair.setdefault(key, {})[slot] = _probs(d)
    rows = []
    for (setting, bench, pair, task_type), slots in by_pair.items():
        if task_type == "iso":
            if set(slots) != {"t", "t_prime"}:
                continue
            share = [_yes_valid(slots["t"]), _yes_valid(slots["t_prime"])]
            pref = expected_iso_preference(*share[0], *share[1], k)
        else:
            if set(slots) != {"t_first", "t_prime_first"}:
                continue
            # t's option is A when t comes first, B otherwise
            pref = 0.5 * (expected_cmp_preference(*_pair(slots["t_first"], "A", "B"), k)
                          + expected_cmp_preference(*_pair(slots["t_prime_first"], "B", "A"), k))
        rows.append({"setting": setting, "benchmark": bench, "context_pair_id": pair, "task_type": task_type,
                     "preference": pref, "gap": 2 * pref - 1})
    return rows


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
    rows = pair_preferences(records, k)
    cells: dict[tuple, list[float]] = {}
    for r in rows:
        cells.setdefault((r["setting"], r["benchmark"], r["task_type"]), []).append(r["gap"])
    parsed = [d for d in records["parsed"] if isinstance(d, dict)]
    return {
        "settings": {"temperature": config.paper_temperature, "top_p": config.paper_top_p, "k": k,
                     "max_new_tokens": config.parse_max_new_tokens,
                     "prompt": "the authors' generation mode (\"... My answer would be: \\boxed{\")",
                     "parser": "the authors' extractor: the last boxed offered label",
                     "estimator": f"expected Parity Gap over {k} generations per prompt, invalid answers "
                                  "excluded, the 0.5 fallback when none is valid (enumerated, not sampled)"},
        "by_cell": [{"setting": s, "benchmark": b, "task_type": t, "pg": float(np.mean(g)), "n_pairs": len(g)}
                    for (s, b, t), g in sorted(cells.items())],
        "n_prompts": len(parsed),
        "max_residual": max((float(d["residual"]) for d in parsed), default=math.nan),
        "mean_rejected": float(np.mean([float(d["rejected"]) for d in parsed])) if parsed else math.nan,
        "mean_nodes": float(np.mean([float(d["nodes"]) for d in parsed])) if parsed else math.nan,
    }


def parsed_table(summary: dict, model: str) -> Any:
    """One row per setting x benchmark: the authors' K-sample Parity Gap, iso and cmp, from the enumeration."""
    import pandas as pd

    rows: dict[tuple, dict] = {}
    for c in summary["by_cell"]:
        row = rows.setdefault((c["setting"], c["benchmark"]), {"Model": model, "Setting": c["setting"],
                                                                "Benchmark": c["benchmark"]})
        row[f"PG {c['task_type']}"] = round(c["pg"], 4)
        row[f"pairs {c['task_type']}"] = c["n_pairs"]
    return pd.DataFrame(list(rows.values()))
