"""The sampling check's Markdown report: settings, shares, |Δ|, the aggregate against the sampled interval."""

from __future__ import annotations

from collections import Counter
from typing import Any

from probe.studies.sampling_check.check import SamplingCheck

__all__ = ["generation_kinds", "report_markdown"]


def report_markdown(check: SamplingCheck) -> str:
    """A short Markdown report: settings, shares, |Δ|, and the aggregate against the sampled interval."""
    s, agg = check.summary, check.aggregate
    pred = any("predicted_low" in v for v in agg.values())
    tail = any("tail_low" in v for v in agg.values())
    lines = [f"# Sampling check: {check.task} on {check.model}", "",
             *_verdict_lines(s), _settings_line(s, check.settings), "",
             *_quantity_table(s), "", *_metric_table(agg, pred, tail), *_baseline_table(agg),
             "", _SAMPLED_NOTE, *(["", _PREDICTED_NOTE] if pred else []), *(["", _TAIL_NOTE] if tail else [])]
    counts = {m: v for m, v in agg.items() if "ci_low" not in v}
    if counts:
        lines += ["", "Counts (sampled / exact): " + ", ".join(f"{m} {v['sampled']} / {v['exact']}"
                                                              for m, v in counts.items())]
    lines += ["", "Most frequent generations (first 40 characters) by how the parser and the exact estimator treat them:",
              "", "| parser | estimator | share of generations | most frequent texts |", "|---|---|---|---|"]
    for (acc, cnt), (share, top) in generation_kinds(check).items():
        lines.append(f"| {'accepted' if acc else 'rejected'} | {'counted' if cnt else 'not counted'} | {share:.3f} | "
                     + "; ".join(f"`{t}` x{n}" for t, n in top) + " |")
    return "\n".join(lines) + "\n"


_MARKS = {True: "yes", False: "no", None: "n/a"}

_SAMPLED_NOTE = ("Sampled interval: 2.5-97.5 % of the bootstrap over units with replacement, each unit with its own K "
                 "sampled answers; \"exact inside\" allows one generation's worth, 1 / (K x prompts).")

_PREDICTED_NOTE = ("The exact side's K-sample range: where the sampled values fall if the "
                   "enumerated distributions are the truth, on these same prompts (per prompt, how many of the "
                   "K generations parse and what they say, drawn from its parse distribution). It holds the "
                   "prompts fixed, as both sides read the same prompts, and sees a rare answer a unit bootstrap "
                   "of the sampled answers cannot. The ranges are joint: all the metrics lie inside together in "
                   "95 % of draws, so the verdict, which fails when any one leaves, is a single test at the 5 % "
                   "level (each metric's own central 95 % range is in check.json, `predicted_95_low` / "
                   "`predicted_95_high`). It is the verdict; the sampled interval is for information. "
                   "Smallest difference detected: the shift of a metric this test finds with 80 % power, "
                   "(z of its range's level + 0.84) x the standard deviation of its draws.")

_TAIL_NOTE = ("With the hybrid tail's uncertainty: the same range, each draw first drawing every hybrid "
              "prompt's tail shares from its own draws as the published 95 % interval does (the rate at which "
              "its tail reads an answer, then the split between answers; nothing pooled across prompts), so it "
              "holds the published estimate's own uncertainty as well as the K-sample noise. Where the exact "
              "side has tail draws, this is the verdict.")

def _verdict_lines(s: dict) -> list[str]:
    """The verdict and how surprising its count of metrics outside their ranges is, each with a blank line."""
    return [*([f"**Verdict: {s['verdict']}** (pass when every metric's sampled value lies inside the exact side's "
               f"same-prompts range; prompts with a sampled parse but no parse on the exact side: {s.get('n_misses', 0)}).", ""]
              if "verdict" in s else []),
            *([_chance_line(s), ""] if s.get("n_tested") else [])]


def _settings_line(s: dict, st: dict) -> str:
    """The sampler, the sample and the exact side's settings, in one sentence."""
    return (f"T = {st['temperature']}, top-p = {st['top_p']}"
            + (f", top-k = {st['top_k'] or 'off'}, repetition penalty = {st['repetition_penalty']}, "
               f"min-p = {st['min_p']}" if "top_k" in st else "")
            + f", max_new_tokens = {st['max_new_tokens']}, "
            f"K = {s['k']} samples per prompt, {s['n_prompts']} prompts in {s['n_units']} units "
            f"({st['unit']}), seed {st['seed']}, {st['n_boot']} bootstrap draws."
            + (f" Sampled by {st['sampled_by']}." if "sampled_by" in st else "")
            + (f" {st['prompts_per_call']} prompts a generate call (a prompt's samples depend on the prompts "
               "sharing its call)." if st.get("prompts_per_call", 1) > 1 else "")
            + (" Exact side: " + ", ".join(f"parse_{k} {v}" for k, v in st["parse"].items()) + "."
               if st.get("parse") else ""))


def _quantity_table(s: dict) -> list[str]:
    """The per-prompt shares, |Δ| and counts of the summary, as a table."""
    return ["| quantity | value |", "|---|---|",
            f"| generations the paper's parser accepts | {s['accepted_share']:.3f} |",
            f"| generations the exact estimator counts (sampled) | {s['counted_share']:.3f} |",
            f"| the same, exact expectation (answer mass under the paper's sampling) | {s['exact_counted_share']:.3f} |",
            f"| accepted by the parser, not counted by the estimator | {s['accepted_not_counted']} |",
            f"| counted by the estimator, not accepted by the parser | {s['counted_not_accepted']} |",
            f"| mean per-prompt abs delta (parsed vs exact distribution; {s['n_delta']} prompts) | {s['mean_abs_delta']:.3f} |",
            f"| mean abs delta from K-sample noise alone | {s['mean_noise_delta']:.3f} |",
            *([f"| the ratio of the two (prompts with both; 1.3 or less: within noise) | {_f(s['delta_noise_ratio'])} |"]
              if "delta_noise_ratio" in s else []),
            *([f"| prompts whose published answer leaves its certified interval | {s['n_outside_certified']} |"]
              if "n_outside_certified" in s else []),
            *([f"| prompts whose exact side has hybrid tail draws | {s['n_hybrid']} |",
               f"| of those, with a sampled parse but none read by head or tail (judged on the parsed mass's "
               f"interval, not a miss) | {s.get('n_judged_on_interval', 0)} |",
               f"| hybrid prompts whose sampled parse share (Wilson 95 %) misses their parsed mass's interval | "
               f"{s.get('n_accepted_outside_interval', 0)} |"] if "n_hybrid" in s else []),
            *([f"| published parse rate and answer shares against the sampled ones ({v['n']} prompt x quantity "
               f"rows): \\|z\\| <= 2 / mean z / the published interval covers the sampled share | "
               f"{v['within_2']:.0%} / {v['mean_z']:+.2f} / {v['covered']:.0%} |"]
              if (v := s.get("published_vs_sampled")) else []),
            *([f"| the same for the first-token estimator over the scored answer texts | "
               f"{s['mean_abs_delta_baseline']:.3f} |"] if "mean_abs_delta_baseline" in s else []),
            *([f"| exact side: largest / mean residual (mass not enumerated) | {s['parse_exact']['max_residual']:.4f}"
               f" / {s['parse_exact']['mean_residual']:.4f} |",
               f"| exact side: mean forward tokens per prompt | {s['parse_exact']['mean_nodes']:.1f} |"]
              if "parse_exact" in s else []),
            f"| prompts with no accepted generation | {s['n_no_accepted']} |",
            f"| prompts the exact estimator cannot sample | {s['n_exact_unsampleable']} |"]


def _metric_table(agg: dict, pred: bool, tail: bool) -> list[str]:
    """Each metric: exact against the sampled interval and, with ``pred`` / ``tail``, the verdict's ranges."""
    head = ("| metric | exact (paper-equivalent) | sampled | sampled 95 % interval | exact inside | "
            "exact on the prompts with a parsed answer |")
    rule = "|---|---|---|---|---|---|"
    if pred:
        head += " sampled inside the exact side's K-sample range | smallest difference detected |"
        rule += "---|---|"
    if tail:
        head += " the same with the hybrid tail's uncertainty (verdict) | smallest difference it detects |"
        rule += "---|---|"
    lines = [head, rule]
    for m, v in agg.items():
        if "ci_low" not in v:
            continue
        lines.append(f"| {m} | {_f(v['exact'])} | {_f(v['sampled'])} | [{_f(v['ci_low'])}, {_f(v['ci_high'])}] "
                     f"| {_MARKS[v['exact_inside']]} | {_f(v.get('exact_same_prompts'))} |"
                     + (f" [{_f(v.get('predicted_low'))}, {_f(v.get('predicted_high'))}]: "
                        f"{_MARKS[v.get('sampled_inside_predicted')]} | {_f(v.get('detectable_difference'))} |"
                        if pred else "")
                     + (f" [{_f(v.get('tail_low'))}, {_f(v.get('tail_high'))}]: {_MARKS[v.get('sampled_inside_tail')]} |"
                        f" {_f(v.get('tail_detectable_difference'))} |" if tail else ""))
    return lines


def _baseline_table(agg: dict) -> list[str]:
    """The estimator the exact side replaced against the sampled interval; none without it."""
    if not any("baseline" in v for v in agg.values()):
        return []
    lines = ["", "The estimator it replaced (first-token probabilities of the scored answer texts under the "
                 "paper's sampling, renormalised over the options) against the same interval:", "",
             "| metric | first-token estimator | sampled 95 % interval | inside |", "|---|---|---|---|"]
    for m, v in agg.items():
        if "baseline" in v:
            lines.append(f"| {m} | {_f(v['baseline'])} | [{_f(v['ci_low'])}, {_f(v['ci_high'])}] | "
                         f"{_MARKS[v['baseline_inside']]} |")
    return lines


def generation_kinds(check: SamplingCheck, top: int = 4) -> dict[tuple[bool, bool], tuple[float, list]]:
    """(accepted by the parser, counted by the exact estimator) -> (share of all generations, most frequent texts)."""

    kinds: dict[tuple[bool, bool], Counter] = {}
    total = 0
    for r in check.prompts:
        for text, parsed, cnt in zip(r["generations"], r["parsed"], r.get("counted") or [None] * len(r["parsed"])):
            key = (parsed is not None, bool(cnt))
            short = text.strip().replace("\n", " ").replace("|", "/")[:40]
            kinds.setdefault(key, Counter())[short] += 1
            total += 1
    return {k: (sum(c.values()) / total, c.most_common(top)) for k, c in sorted(kinds.items(), reverse=True)}


def _chance_line(s: dict) -> str:
    """How surprising the count of metrics outside their ranges is when the exact side is right."""
    n, out = int(s["n_tested"]), int(s["n_outside_range"])
    each = s.get("range_level_each")
    how = (f"the ranges hold all {n} together in 95 % of runs, each metric's range its central "
           f"{100 * each:.1f} %" if each is not None and n > 1 else "each range is 95 %")
    line = (f"Metrics outside their range: {out} of {n}. If the exact side is right, at least one of {n} falls "
            f"outside in {_pct(s['chance_any_outside'])} of runs ({how})")
    if out > 1:
        line += f", {out} or more in {_pct(s['chance_as_many_outside'])}"
    return line + "."


def _pct(x: Any) -> str:
    return "n/a" if x is None or x != x else f"{100 * x:.1f} %"


def _f(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and x != x) else f"{x:.3f}"
