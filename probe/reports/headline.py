"""The headline of a report and the warnings above it, from a task's flat result rows and its summary.

- :func:`headline_table`: the main metric per model x task with its CI and n (the first section of every
  report: a task run's own page, ``probe report``, the demo's page);
- :func:`headline_section`: that table as the report section every page opens with;
- :func:`report_warnings`: what a reader must see before the numbers (low answer mass, tiny samples,
  the task's own warnings, a limited run's coverage).

Pure: rows and summaries in, tables and sentences out.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import pandas as pd

from probe.metrics.small_sample import MIN_UNITS
from probe.reports.compare.tables import Section, Table, ci_cell

if TYPE_CHECKING:
    import pandas as pd

#: mean answer (label) mass below which a report warns that the model mostly does not answer
LOW_MASS = 0.5
#: fewer items than this in a headline metric: the report says the sample is small
SMALL_N = 30


#: summary keys that only structure a summary: left out of the phrase naming a place in it
STRUCTURE = {"label_mass": "", "mass": "", "by_format": "", "by_strategy": "", "by_protocol": "", "overall": "",
             "variants": "", "results": "", "pooled": "", "by_category": "category", "by_bias_type": "bias type",
             "by_dimension": "dimension", "all": "all items"}
#: the fields that name an entry of a list in a summary (used instead of its position)
_NAMING = ("setting", "benchmark", "mode", "category", "bias_type", "dimension", "name")


def phrase(key: Any, terms: Mapping[str, str] | None = None) -> str:
    """An internal key or label as words: each part (split at dots, ``|`` and spaces) replaced by the task's
    ``terms`` (:attr:`probe.tasks.facets.Reporting.terms`), structural summary keys dropped, the rest kept. A setting
    joined with ``+`` (``direct+neutral``) is split too when a part of it is a term.

    >>> phrase("label_mass.by_category.race")
    'category race'
    >>> phrase("hbb_swapavg all", {"hbb_swapavg": "both option orders averaged"})
    'both option orders averaged, all items'
    >>> phrase("zero_shot|oneword explicit", {"zero_shot": "zero-shot", "oneword": "one-word answer"})
    'zero-shot, one-word answer, explicit'
    >>> phrase("bbq direct+neutral v0", {"bbq": "BBQ", "direct": "direct answer", "v0": "prompt variant 0"})
    'BBQ, direct answer, neutral, prompt variant 0'
    >>> phrase("S >= 20"), phrase("+0.12")
    ('S >= 20', '+0.12')
    """

    terms = terms or {}
    parts = [p for p in re.split(r"[.|\s]+", str(key)) if p]
    parts = [q for p in parts for q in (p.split("+") if any(x in terms for x in p.split("+")) else [p]) if q]
    if not any(p in terms or p in STRUCTURE for p in parts):
        return str(key)  # nothing to translate: the label as written ("S >= 20", "(a) two-choice question")
    words = []
    for part in parts:
        w = terms.get(part, STRUCTURE.get(part, part))
        if w:
            words.append(w)
    if words and words[0] in ("category", "bias type", "dimension") and len(words) > 1:  # "category race"
        words = [f"{words[0]} {words[1]}", *words[2:]]
    return ", ".join(words) or "all items"


def headline_table(rows: Iterable[Mapping[str, Any]]) -> "pd.DataFrame":
    """The rows flagged ``headline`` as a display table: Task, Model, Metric, Subgroup, Estimator, Value (labels
    as the task's ``terms`` phrase them: a row's ``terms``)."""

    out = [{"Task": r["task"], "Model": r["model"],
            "Metric": _named(phrase(r["metric"], r.get("terms")), r.get("note")),
            "Subgroup": phrase(r["subgroup"], r.get("terms")),
            "Estimator": phrase(r["estimator"], r.get("terms")) if r["estimator"] else "–",
            "Value [95% CI] (n)": ci_cell(r["value"], r["ci_low"], r["ci_high"], r["n"],
                                          clusters=r.get("n_clusters"), undefined=r.get("undefined"))}
           for r in rows if r.get("headline")]
    return pd.DataFrame(out, columns=["Task", "Model", "Metric", "Subgroup", "Estimator", "Value [95% CI] (n)"])


def _named(metric: str, note: str | None = None) -> str:
    """The metric's name, with what a reader must see beside it (a row's ``note``: its task's
    ``reporting.metric_notes``, e.g. the denominator) in parentheses."""
    return f"{metric} ({note})" if note else metric


def _mass_summaries(node: Any, path: str = "") -> Iterable[tuple[str, float]]:
    """``(where, mean)`` of every answer-mass summary (a mapping with mean, floor and n_below_floor); an entry
    of a list is named by its naming fields (setting, benchmark, ...), not its position."""
    if isinstance(node, Mapping):
        if {"mean", "floor", "n_below_floor"} <= set(node) and isinstance(node.get("mean"), (int, float)):
            yield path or "all", float(node["mean"])
            return
        for k, v in node.items():
            if str(k) in ("answering_only", "coverage", "skipped"):
                continue
            yield from _mass_summaries(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            named = [str(v[k]) for k in _NAMING if isinstance(v, Mapping) and isinstance(v.get(k), str)]
            yield from _mass_summaries(v, f"{path}.{'.'.join(named)}" if named else f"{path}.{i + 1}")


def report_warnings(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]] = (),
                    task_warnings: Sequence[str] = (), terms: Mapping[str, str] | None = None) -> list[str]:
    """Lines a report shows at its top, before any number: low answer mass, a small sample, the task's own
    (``task_warnings``: :meth:`probe.tasks.facets.Reporting.warnings`), a limited run's coverage. ``terms``:
    the task's words for its summary keys (:func:`phrase`)."""
    out = []
    masses = [(w, m) for w, m in _mass_summaries(summary) if math.isfinite(m)]
    if masses:
        where, low = min(masses, key=lambda x: x[1])
        if low < LOW_MASS:
            out.append(f"low answer mass: the model puts on average only {low:.2f} of its probability on the "
                       f"scored answers ({phrase(where, terms)}); the scores describe a model that mostly does not answer the "
                       "question as asked (see the mass sections, the answering-only numbers, or try another "
                       "prompt format).")
    ns = [r["n"] for r in rows if r.get("headline") and isinstance(r.get("n"), (int, float)) and math.isfinite(r["n"])]
    if ns and min(ns) < SMALL_N:
        out.append(f"small sample: a headline metric rests on {int(min(ns))} item(s); intervals are wide or "
                   f"undefined ('n/a (k units)': no resampled interval from fewer than {MIN_UNITS} units), so read "
                   "the numbers as a smoke test, not a result.")
    out += list(task_warnings)
    cov = summary.get("coverage")
    if cov and cov.get("n_left_out"):
        left = [f"{(terms or {}).get(name, name.replace('_', ' '))} "  # "bias type age", not "bias_type age"
                f"{', '.join(str((terms or {}).get(str(v), v)) for v in s['left_out'][:8])}"  # values in words too
                f"{', ...' if len(s['left_out']) > 8 else ''}"
                for name, s in cov.get("strata", {}).items() if s.get("left_out")]
        out.append(f"limited run: {cov['n_items']} of {cov['n_available']} items (--limit {cov.get('limit_fraction', cov.get('limit'))})"
                   + (f"; left out: {'; '.join(left)}" if left else "; every stratum covered") + _cells(cov, terms) + ".")
    return out


def _cells(cov: Mapping[str, Any], terms: Mapping[str, str] | None) -> str:
    """The combinations of strata a limited run covered, when it left some out (what its coverage line says)."""
    c = cov.get("cells") or {}
    if not c or c.get("n_covered", 0) >= c.get("n_total", 0):
        return ""
    by = " x ".join((terms or {}).get(k, k.replace("_", " ")) for k in str(c.get("by", "")).split(" x "))
    return f", but only {c['n_covered']} of the {c['n_total']} combinations ({by})"


def headline_section(headline: "pd.DataFrame") -> Any:
    """The headline table as the first report section (:class:`probe.reports.compare.tables.Section`)."""

    items = [Table(
        "headline", "", "The main metric per model and task",
        "Each task's main metric over all items scored, with its 95% CI and n (the task's own estimator and "
        f"resampling unit); 'n/a (k units)' where fewer than {MIN_UNITS} units were scored (no resampled interval from "
        "fewer). Every metric, subgroup "
        "and estimator is in results.csv.", headline)]
    return Section("headline", "Headline", "", items)
