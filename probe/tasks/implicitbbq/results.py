"""ImplicitBBQ records -> option probabilities, the summary, the seed's tables, the figure, the projection.

The metrics and layouts are :mod:`probe.metrics.bbq` and
:mod:`probe.reports.bbq_tables`; this module only turns the runner's records
into the per-item answer distributions they take.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Mapping

#: item fields kept in each metric record (beside probs, pred_index, mass)
ITEM_FIELDS = ("item_id", "strategy", "answer_format", "dimension", "category", "setting", "context_kind",
               "context_condition", "question_polarity", "label", "target_index", "unknown_index", "template_id",
               "cue1", "cue2", "target_group")


def option_probs(answer_format: str, owner: Any, logprobs: Any, probs: Any, mass: Any) -> dict[str, Any]:
    """The three option probabilities and the mass the scored answers carry, from one record.

    ``oneword``: each option's mass is the total over its answer texts (Unknown:
    over its paraphrases), renormalised (:func:`probe.prompts.bbq.to_probs`);
    ``labels``: the record's softmax over the labels and its label mass.
    """
    from probe.prompts.bbq import PreparedPrompt, to_probs

    prepared = PreparedPrompt("", "", answer_format, (), tuple(int(o) for o in owner))
    result = SimpleNamespace(probs=list(probs), label_mass=mass, logprobs=list(logprobs))
    return to_probs(prepared, result)


def metric_records(records: Any) -> tuple[list[dict], int]:
    """(one metric record per finite scored record, the number of non-finite records skipped).

    A record whose scores are not finite (NaN/inf log-probabilities, e.g. a
    broken fp16 run) never becomes an answer.
    """
    out, skipped = [], 0
    for rec in records.to_dict("records") if hasattr(records, "to_dict") else records:
        values = list(rec["logprobs"]) + [rec.get("mass")]
        if not rec["finite"] or rec.get("pred_index") is None or not all(
                isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            skipped += 1
            continue
        p = option_probs(rec["answer_format"], rec["owner"], rec["logprobs"], rec["probs"], rec["mass"])
        m = {k: rec.get(k) for k in ITEM_FIELDS}
        m.update(id=rec["id"], probs=p["probs"], mass=p["mass"], logprobs=p["logprobs"],
                 pred_index=max(range(3), key=lambda i: (p["probs"][i], -i)))
        out.append(m)
    return out, skipped


def tables(summary: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The seed's Table 2 (per version) and Tables 5-7 (per strategy|format and version) layouts."""
    from probe.reports.bbq_tables import VERSIONS, table2, tables_per_dimension

    out = {}
    for version in VERSIONS:
        out[f"table2_{version}"] = table2(dict(summary), version, model)
        for key in summary:
            out[f"per_dimension_{key.replace('|', '_')}_{version}"] = tables_per_dimension(dict(summary), key, version)
    return out


def write_figures(summary: Mapping[str, Any], output: Path, model: str) -> list[Path]:
    """``figure3_<strategy>_<format>.png`` (the seed's Figure 3 layout) for each zero-shot format."""
    from probe.reports.bbq_tables import figure3

    paths = []
    for key in summary:
        if key.startswith("zero_shot"):
            path = output / f"figure3_{key.replace('|', '_')}.png"
            figure3(dict(summary), key, path, model=model)
            paths.append(path)
    return paths


def full_grid_items(pool: Any, strategies: Any, control_strategies: Any) -> dict[str, int]:
    """Items per strategy if every built item were scored (the controls only with ``control_strategies``)."""
    n_all = len(pool)
    n_mitig = sum(1 for it in pool if not it.setting.startswith(("neutral", "nochar")))
    return {s: n_all if s in control_strategies else n_mitig for s in strategies}


def projection(timing: Mapping[str, Mapping[str, float]], grid: Mapping[str, int],
               n_formats: int = 1) -> dict[str, Any]:
    """Projected hours to score the full grid (every item, every answer format) at the measured rates.

    ``timing``: the runner's seconds and request counts per request kind; the
    kinds are the strategies (scoring, one request per item and format) and
    ``cot/generate`` (the reasoning, one per item and format), so a CoT item
    costs both.

    >>> projection({"zero_shot": {"n": 20, "seconds": 10.0}}, {"zero_shot": 3600}, n_formats=2)
    {'zero_shot': {'seconds_per_item': 1.0, 'items': 3600, 'hours': 1.0}, 'total_hours': 1.0}
    """
    out: dict[str, Any] = {}
    for kind, t in sorted(timing.items()):
        if kind not in grid or not t.get("n"):
            continue
        seconds = float(t.get("seconds", 0.0)) + float(timing.get(f"{kind}/generate", {}).get("seconds", 0.0))
        rate = seconds / (t["n"] / n_formats)
        out[kind] = {"seconds_per_item": rate, "items": grid[kind], "hours": rate * grid[kind] / 3600}
    out["total_hours"] = sum(v["hours"] for v in out.values())
    return out


def read_timing(output: Path) -> dict[str, Any]:
    """The runner's per-kind timing from ``output/timing.json`` ({} when there is none)."""
    path = output / "timing.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    timing = data.get("scored_this_invocation", {}) if isinstance(data, dict) else {}
    return timing if isinstance(timing, dict) else {}
