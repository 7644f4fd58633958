"""What BBQ shows a reader of its run: the run's ``report.md``, its per-category tables and the template-built
warning (its section of ``probe report``: :mod:`probe.tasks.bbq.layout`)."""

from __future__ import annotations

import math
from typing import Any, Mapping

import pandas as pd


__all__ = ["category_table", "report_markdown", "template_built"]


def category_table(by_category: Mapping[str, Any]) -> Any:
    """One row per category (and ``all``): the four metrics, expected and argmax, CIs and counts."""

    rows = []
    for category, m in by_category.items():
        row: dict[str, Any] = {"category": category, "n_amb": m["n_amb"], "n_dis": m["n_dis"]}
        for version in ("expected", "argmax"):
            v = m[version]
            for metric in ("acc_amb", "acc_dis", "acc_dis_all", "bias_amb", "bias_dis"):
                if metric not in v:
                    continue
                row[f"{metric}_{version}"] = v[metric]
                if "ci" in v:
                    row[f"{metric}_{version}_lo"], row[f"{metric}_{version}_hi"] = v["ci"][metric]
        rows.append(row)
    return pd.DataFrame(rows)


def _f(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def _all_line(by_category: Mapping[str, Any]) -> str:
    a = by_category.get("all")
    if not a or not a.get("n"):
        return "no items left."
    e = a["expected"]
    return (f"n = {a['n']}, Acc amb {_f(e['acc_amb'])}, Acc dis {_f(e['acc_dis'])} (of non-Unknown answers), "
            f"{_f(e.get('acc_dis_all'))} (of all disambiguated items), Bias amb {_f(e['bias_amb'])}, "
            f"Bias dis {_f(e['bias_dis'])} (expected).")


def _left_out(summary: Mapping[str, Any]) -> set[str]:
    """The categories a ``--limit`` left out (none for a whole run)."""
    return set((((summary.get("coverage") or {}).get("strata") or {}).get("category") or {}).get("left_out") or ())


def template_built(summary: Mapping[str, Any]) -> list[str]:
    """The run's categories expanded from BBQ's templates: ``template_built`` less those a ``--limit`` left out
    (the data set's list would name categories the run never scored)."""
    left_out = _left_out(summary)
    return [c for c in summary.get("template_built") or [] if c not in left_out]


def report_markdown(summary: Mapping[str, Any], tables: Mapping[str, Any]) -> str:
    lines = [f"# BBQ — {summary.get('model', 'model')}", ""]
    built = template_built(summary)
    if built:
        lines += [f"> **Template-built categories:** {', '.join(built)} were expanded from BBQ's templates, not "
                  "read from the released JSONL (no data/<Category>.jsonl found); their items follow the templates "
                  "but are not the released item set (`--set source=jsonl` keeps the released files only).", ""]
    left_out = _left_out(summary)
    lines += [f"Strategy: {summary['strategy']}. Items: {summary['n_items']}. Sources: "
              + ", ".join(f"{c} ({s})" for c, s in summary["sources"].items() if c not in left_out) + ".", "",
              "Disambiguated accuracy, two denominators: **Acc dis (all)** = correct / all disambiguated items "
              "(the BBQ paper's and lm-evaluation-harness's accuracy); **Acc dis (non-Unknown)** = correct / "
              "items answered with a person (ImplicitBBQ's).", ""]
    for fmt, v in summary["by_format"].items():
        lines += [f"## Answer format: {fmt}", "",
                  "Expected counts (argmax in parentheses); 95% bootstrap CIs in tables/by_category_*.csv.", "",
                  "| Category | n amb | n dis | Acc amb | Acc dis (all) | Acc dis (non-Unknown) | Bias amb | Bias dis |",
                  "|---|---|---|---|---|---|---|---|"]
        for cat, m in v["by_category"].items():
            e, a = m["expected"], m["argmax"]
            cells = [f"{_f(e.get(k))} ({_f(a.get(k))})"
                     for k in ("acc_amb", "acc_dis_all", "acc_dis", "bias_amb", "bias_dis")]
            lines.append(f"| {cat} | {m['n_amb']} | {m['n_dis']} | " + " | ".join(cells) + " |")
        m = v["mass"]
        lines += ["", f"Probability mass on the scored answers: mean {_f(m['mean'])}, median {_f(m['median'])}, "
                  f"5-95% {_f(m['p05'])}-{_f(m['p95'])}; {m['n_below_floor']} of {m['n']} item(s) below the "
                  f"floor {m['floor']} (\"not answering\"); without them: "
                  + _all_line(v["answering_only"]), ""]
    if summary["n_skipped"]:
        lines += [f"Skipped {summary['n_skipped']} upstream row(s) whose stereotyped target is not exactly one "
                  "named answer (listed in summary.json).", ""]
    if summary["n_nonfinite"]:
        lines += [f"Skipped {summary['n_nonfinite']} record(s) with non-finite scores.", ""]
    return "\n".join(lines)
