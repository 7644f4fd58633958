"""ImplicitBBQ records -> option probabilities, the summary, the paper's tables, the figure, the projection.

The metrics and layouts are :mod:`probe.tasks.bbq.metrics` and
:mod:`probe.tasks.implicitbbq.tables`; this module only turns the runner's records
into the per-item answer distributions they take.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from probe.metrics.certified import interval_text, uncertified
from probe.metrics.hybrid import has_draws, hybrid_metric, hybrid_probs
from probe.tasks.bbq.metrics import bbq_metrics
from probe.tasks.bbq.records import ITEM_FIELDS, answer_records
from probe.tasks.implicitbbq.chains import average_chains
from probe.tasks.implicitbbq.selection import unit_key
from probe.tasks.implicitbbq.tables import KINDS, VERSIONS, figure3, table2, tables_per_dimension


#: The bootstrap resampling unit of every ImplicitBBQ CI (:func:`cluster_of`), as summaries and captions state it.
CI_UNIT = "template x context (a Person context with all its cue pairs; an explicit fill)"
CI_UNIT_SHORT = "template x context"


def cluster_of(item: Any) -> str:
    """The bootstrap cluster of an item: its template x context (a Person context crossed with its cue
    pairs is one cluster; an explicit context is its fill with its condition x polarity variants)."""

    context = item.metadata.get("context_id") or unit_key(item)
    return f"{item.template_id}|{context}"


def add_clusters(recs: list[dict], items: Any) -> list[dict]:
    """Each metric record gets ``cluster`` (:func:`cluster_of` its item)."""
    clusters = {it.id: cluster_of(it) for it in items}
    for r in recs:
        r["cluster"] = clusters.get(r["item_id"], r["item_id"])
    return recs


def paper_spec(config: Any) -> dict[str, float] | None:
    """The paper's sampling setting as a spec mapping (None: the paper estimate is off)."""
    t = getattr(config, "paper_temperature", None)
    return None if t is None else {"temperature": float(t), "top_p": float(getattr(config, "paper_top_p", 1.0))}


def metric_records(records: Any, sampling: Mapping[str, float] | None = None, require_cue: bool = True,
                   per_chain: bool = False) -> tuple[list[dict], int]:
    """(one metric record per finite scored (item, strategy, format), the number of records skipped).

    The answer records of :func:`probe.tasks.bbq.records.answer_records` (non-finite
    records skipped and counted; with ``sampling``, the option probabilities
    under that spec). CoT chains (records with ``chain``) are averaged per item
    (:func:`.chains.average_chains`; ``per_chain``: one metric record per chain
    instead); with ``require_cue`` a reasoning that never reached an answer cue
    is left out (counted in the task summary's ``cot``, not here).
    """

    out, skipped = answer_records(records, sampling)
    return (out if per_chain else average_chains(out, require_cue)), skipped


def parsed_metric_records(records: Any, target: float | None = None) -> tuple[list[dict], list[dict], dict[str, Any]]:
    """(one metric record per record with a parsed answer, one certification record per record that may
    parse, their statistics).

    ``probs``: the published parsed-answer distribution over the item's three
    options given a parse: the hybrid's (each prompt's exact head plus its own
    tail draws, :func:`probe.metrics.hybrid.hybrid_probs`), renormalised over its
    parsed mass; for a record without tail draws (``parse_tail: exact``) the
    enumerated conditional (the renormalising rule, ``docs/scoring.md``). A
    prompt whose head parsed nothing and whose tail draws read no answer rests
    on nothing: left out of the point and counted (``n_no_parsed_answer``).
    Both kinds of record carry ``raw`` (the enumerated masses), ``residual`` and
    ``uncertified`` (residual / parsed mass above ``target``,
    :func:`probe.metrics.certified.uncertified`); the certification records
    (:mod:`.certify`) also hold prompts with nothing parsed but some residual.
    Statistics: ``n`` records, ``n_no_parsed_answer`` (nothing enumerated was
    parsed: left out of the point), ``n_uncertified``, ``max_residual`` (the
    largest mass not enumerated), ``mean_rejected`` (share of generations the
    parser maps to no option) and ``mean_nodes``.
    """

    out, cert, residuals, rejected, nodes, none, flagged = [], [], [], [], [], 0, 0
    for rec in records.to_dict("records") if hasattr(records, "to_dict") else records:
        d = rec.get("parsed")
        if not isinstance(d, Mapping):
            continue
        residual = float(d["residual"])
        residuals.append(residual)
        rejected.append(float(d["rejected"]))
        nodes.append(int(d["nodes"]))
        raw = [float(d["probs"].get(str(i), 0.0)) for i in range(3)]
        total = math.fsum(raw)
        flag = uncertified(total, residual, target)
        answer = hybrid_probs(d)  # the head where nothing was drawn (closed, or an exact-only run: its conditional)
        pub = [float(answer.get(str(i), 0.0)) for i in range(3)]
        flagged += flag
        m = {k: rec.get(k) for k in ITEM_FIELDS}  # the fields of every answer record
        m.update(id=rec["id"], raw=raw, residual=residual, uncertified=flag, parsed=d)
        if total > 0 or residual > 0:
            cert.append(dict(m))
        if math.fsum(pub) <= 0:
            none += 1
            continue
        probs = [x / math.fsum(pub) for x in pub]
        m.update(probs=probs, mass=math.fsum(pub), logprobs=[math.log(x) if x > 0 else -math.inf for x in probs],
                 option_mass=probs, pred_index=max(range(3), key=lambda i: (probs[i], -i)), chain=None, has_cue=None)
        out.append(m)
    n = len(residuals)
    stats = {"n": n, "n_no_parsed_answer": none, "n_uncertified": flagged, "answer_residual_target": target,
             "max_residual": max(residuals) if residuals else math.nan,
             "mean_residual": math.fsum(residuals) / n if n else math.nan,
             "mean_rejected": math.fsum(rejected) / n if n else math.nan,
             "mean_nodes": math.fsum(nodes) / n if n else math.nan}
    return out, cert, stats


def parsed_tables(summary: Mapping[str, Any], model: str, spec: Mapping[str, float],
                  certified: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The paper's Table 2 from its own procedure (sampling + parsing, enumerated exactly): the headline; with
    ``certified`` (:func:`.certify.certified_summary`) each metric's certified interval beside its CI."""

    name = f"table2_paper_parsed_T{spec['temperature']:g}" + (f"_topp{spec['top_p']:g}" if spec["top_p"] < 1 else "")
    table = table2(dict(summary), "expected", model)
    if certified:
        table = _with_certified(table, certified)
    return {name: table}


#: table2's metric columns -> (context kind, metric)
_T2_CELLS = {"Acc Amb Exp": ("explicit", "acc_amb"), "Acc Amb Imp": ("implicit", "acc_amb"),
             "Acc Dis Exp": ("explicit", "acc_dis"), "Acc Dis Imp": ("implicit", "acc_dis"),
             "Bias Amb Exp": ("explicit", "bias_amb"), "Bias Amb Imp": ("implicit", "bias_amb"),
             "Bias Dis Exp": ("explicit", "bias_dis"), "Bias Dis Imp": ("implicit", "bias_dis"),
             "Neutral Amb": ("neutral", "acc_amb"), "Neutral Dis": ("neutral", "acc_dis"),
             "NoChar Amb": ("nochar", "acc_amb"), "NoChar Dis": ("nochar", "acc_dis")}

def _with_certified(table: Any, certified: Mapping[str, Any]) -> Any:
    """Each metric cell followed by its certified interval (macro over dimensions), ``cert. [lo, hi]``, and a
    column counting the prompts not certified to the target."""

    table = table.assign(**{"not certified (prompts)": ""})
    for i, row in table.iterrows():
        key = str(row["Strategy/format"]).replace("/", "|")
        kinds = certified.get(key, {})
        for col, (kind, metric) in _T2_CELLS.items():
            iv = kinds.get(kind, {}).get("macro", {}).get(metric)
            if col in table.columns and iv is not None and not any(math.isnan(x) for x in iv):
                table.at[i, col] = f"{table.at[i, col]} cert. {interval_text(iv)}"
        table.at[i, "not certified (prompts)"] = str(sum(kinds.get(k, {}).get("n_uncertified", 0) for k in KINDS))
    return table


def option_mass_summary(recs: list[dict]) -> dict[str, Any]:
    """Mean probability each answer carries, per strategy|format and context kind (exact scores, T = 1).

    ``target`` / ``other`` / ``unknown``: the mean over records of the total probability of
    that option's surface forms (one-word) or label (labels); ``person`` = target + other;
    ``unknown_share`` = unknown / (person + unknown). One-word forms are
    :mod:`probe.tasks.bbq.answer_forms`; this shows whether the explicit and implicit
    answers are scored on an equal footing.

    >>> r = {"strategy": "zero_shot", "answer_format": "oneword", "context_kind": "explicit",
    ...      "target_index": 0, "unknown_index": 2, "option_mass": [0.1, 0.3, 0.2]}
    >>> option_mass_summary([r])["zero_shot|oneword"]["explicit"]["unknown_share"]
    0.3333333333333333
    """
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in recs:
        if r.get("option_mass") is not None:
            groups.setdefault((f"{r['strategy']}|{r['answer_format']}", r["context_kind"]), []).append(r)
    out: dict[str, Any] = {}
    for (key, kind), rs in sorted(groups.items()):
        t = [r["option_mass"][r["target_index"]] for r in rs]
        u = [r["option_mass"][r["unknown_index"]] for r in rs]
        o = [sum(r["option_mass"]) - a - b for r, a, b in zip(rs, t, u)]
        n = len(rs)
        person, unknown = (sum(t) + sum(o)) / n, sum(u) / n
        out.setdefault(key, {})[kind] = {
            "n": n, "target": sum(t) / n, "other": sum(o) / n, "unknown": unknown, "person": person,
            "unknown_share": unknown / (person + unknown) if person + unknown > 0 else math.nan}
    return out


def demo_summary(records: Any) -> dict[str, Any]:
    """Few-shot records: how many used an alternate demonstration (the primary shared the item's template)
    or left a slot out ({} when no record has demonstrations).

    >>> demo_summary([{"demo_ids": ["a", "b"], "demo_fallback": [2], "demo_skipped": []}])
    {'n_records': 1, 'n_with_fallback': 1, 'n_fallback_slots': 1, 'n_with_skipped': 0, 'n_demos_mean': 2.0}
    """
    rows = [r for r in (records.to_dict("records") if hasattr(records, "to_dict") else records)
            if isinstance(r.get("demo_ids"), (list, tuple)) or type(r.get("demo_ids")).__name__ == "ndarray"]
    if not rows:
        return {}
    fb = [list(r.get("demo_fallback") or ()) for r in rows]
    sk = [list(r.get("demo_skipped") or ()) for r in rows]
    return {"n_records": len(rows), "n_with_fallback": sum(1 for f in fb if f),
            "n_fallback_slots": sum(len(f) for f in fb), "n_with_skipped": sum(1 for x in sk if x),
            "n_demos_mean": sum(len(r["demo_ids"]) for r in rows) / len(rows)}


def option_mass_table(summary: Mapping[str, Any]) -> Any:
    """``summary["option_mass"]`` as one row per strategy|format x context kind."""

    return pd.DataFrame([{"strategy|format": key, "context": kind, **v} for key, kinds in summary.items()
                         for kind, v in kinds.items()])


def tables(summary: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The paper's Table 2 (per version) and Tables 5-7 (per strategy|format and version) layouts."""

    out = {}
    for version in VERSIONS:
        out[f"table2_{version}"] = table2(dict(summary), version, model)
        for key in summary:
            out[f"per_dimension_{key.replace('|', '_')}_{version}"] = tables_per_dimension(dict(summary), key, version)
    return out


def chains_table(cot: Mapping[str, Any]) -> Any:
    """One row per CoT strategy|format: the chains' settings, counts and spread (``summary["cot"]``)."""

    st = cot["settings"]
    setting = (f"{st['chains']} sampled, T {st['temperature']:g}, top-p {st['top_p']:g}" if st["chains"]
               else "greedy") + f", <= {st['max_new_tokens']} tokens"
    rows = []
    for key, v in cot["by_strategy"].items():
        sd = v["metrics_std_across_chains"]
        rows.append({"strategy|format": key, "chains": setting, "n_chains": v["n_chains"],
                     "no cue": v["n_chains_no_cue"], "items": v["n_items"],
                     "items without a valid chain": v["n_items_no_valid_chain"],
                     "mean item std of probs": v["mean_item_std_probs"],
                     **{f"std across chains: {m} {kind}": sd[kind]["expected"][m] for kind in sorted(sd)
                        for m in ("acc_amb", "bias_amb")}})
    return pd.DataFrame(rows)


def paper_tables(summary: Mapping[str, Any], model: str, spec: Mapping[str, float]) -> dict[str, Any]:
    """The paper's Table 2 under its own sampling (the headline), named by its settings."""

    name = f"table2_paper_T{spec['temperature']:g}" + (f"_topp{spec['top_p']:g}" if spec["top_p"] < 1 else "")
    return {name: table2(dict(summary), "expected", model)}


def write_figures(summary: Mapping[str, Any], output: Path, model: str) -> list[Path]:
    """``figure3_<strategy>_<format>.png`` (the paper's Figure 3 layout) for each zero-shot format."""

    paths = []
    for key in summary:
        if key.startswith("zero_shot"):
            path = output / f"figure3_{key.replace('|', '_')}.png"
            figure3(dict(summary), key, path, model=model, ci_unit=CI_UNIT_SHORT)
            paths.append(path)
    return paths


def full_grid_items(pool: Any, strategies: Any, control_strategies: Any) -> dict[str, int]:
    """Items per strategy if every built item were scored (the controls only with ``control_strategies``)."""
    n_all = len(pool)
    n_mitig = sum(1 for it in pool if not it.setting.startswith(("neutral", "nochar")))
    return {s: n_all if s in control_strategies else n_mitig for s in strategies}


def projection(timing: Mapping[str, Mapping[str, float]], grid: Mapping[str, int],
               n_formats: int = 1, chains: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Projected hours to score the full grid (every item, every answer format) at the measured rates.

    ``timing``: the runner's seconds and request counts per request kind; the
    kinds are the strategies (scoring, one request per item and format) and
    ``cot/generate`` (the reasoning, one per item and format), so a CoT item
    costs both; ``chains``: requests per item and format of a kind (CoT: its
    reasoning chains), so a CoT item costs all its chains.

    >>> projection({"zero_shot": {"n": 20, "seconds": 10.0}}, {"zero_shot": 3600}, n_formats=2)
    {'zero_shot': {'seconds_per_item': 1.0, 'items': 3600, 'hours': 1.0}, 'total_hours': 1.0}
    """
    out: dict[str, Any] = {}
    for kind, t in sorted(timing.items()):
        if kind not in grid or not t.get("n"):
            continue
        seconds = float(t.get("seconds", 0.0)) + float(timing.get(f"{kind}/generate", {}).get("seconds", 0.0))
        rate = seconds / (t["n"] / (n_formats * max(1, (chains or {}).get(kind, 1))))
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


def with_tail_uncertainty(by_strategy: dict[str, Any], recs: list[dict], seed: int = 0) -> dict[str, Any]:
    """The parsed metrics' ``expected`` intervals (pooled, and macro over dimensions: Table 2's) widened by the
    hybrid tail's uncertainty (in place; returned): per strategy|format and kind, each metric's standard error
    from every prompt's own tail draws (:func:`probe.metrics.hybrid.hybrid_metric`) is added in quadrature to
    each side of the item bootstrap's interval, which stays around the point. Records without tail draws add
    nothing (a run with none is unchanged)."""

    groups: dict[tuple[str, str], list[dict]] = {}
    for r in recs:
        groups.setdefault((f"{r['strategy']}|{r['answer_format']}", r["context_kind"]), []).append(r)
    for (key, kind), rs in groups.items():
        entry = (by_strategy.get(key, {}).get(kind) or {}).get("expected")
        if entry is None or not any(has_draws(r.get("parsed")) for r in rs):
            continue
        tail = hybrid_metric(lambda probs_of, rs=rs: _tail_metrics(rs, probs_of), seed=seed,
                             answers=lambda _d: ("0", "1", "2"))
        for (part, k), v in tail.items():
            if part == "pooled":
                _widen(entry["pooled"], k, entry["pooled"].get("ci") or {}, k, v.ci)
            else:
                _widen(entry["macro"], k, entry["macro"], f"{k}_ci", v.ci)
    return by_strategy


def _tail_metrics(rs: list[dict], probs_of: Any) -> dict[tuple[str, str], float]:
    """The pooled and macro ``expected`` metrics of ``rs`` with each record's answer from ``probs_of``."""

    names = ("acc_amb", "acc_dis", "bias_amb", "bias_dis")
    redrawn: dict[str, list[dict]] = {}
    for r in rs:
        p = probs_of(r["parsed"])
        raw = [float(p.get(str(i), 0.0)) for i in range(3)]
        total = math.fsum(raw)
        probs = [x / total for x in raw] if total > 0 else list(r["probs"])
        redrawn.setdefault(str(r["dimension"]), []).append({**r, "probs": probs, "option_mass": probs})
    pooled = bbq_metrics([x for xs in redrawn.values() for x in xs])["expected"]
    per_dim = [bbq_metrics(xs)["expected"] for xs in redrawn.values()]
    out = {("pooled", k): float(pooled[k]) for k in names if k in pooled}
    for k in names:
        vals = [float(m[k]) for m in per_dim if k in m and math.isfinite(float(m[k]))]
        out[("macro", k)] = sum(vals) / len(vals) if vals else math.nan
    return out


def _widen(holder: dict, point_key: str, ci_holder: dict, ci_key: str, tail_ci: list[float]) -> None:
    """``ci_holder[ci_key]`` widened on each side by the tail's half-width (in quadrature), around the point."""
    ci, point = ci_holder.get(ci_key), holder.get(point_key)
    if ci is None or point is None or not all(math.isfinite(float(x)) for x in (*ci, point, *tail_ci)):
        return
    half = (tail_ci[1] - tail_ci[0]) / 2  # 1.96 x the tail's standard error (no limits: symmetric)
    lo, hi = float(point) - float(ci[0]), float(ci[1]) - float(point)
    ci_holder[ci_key] = [float(point) - math.hypot(lo, half), float(point) + math.hypot(hi, half)]
