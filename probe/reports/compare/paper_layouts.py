"""Paper-equivalent multi-model tables of HBB (Table 1) and iso/cmp (Tables 2-7), placed beside the exact ones.

Each run that computed the paper's own sampled estimator carries it in its
``summary.json`` (``paper_equivalent``: the settings and the numbers; for
iso/cmp also ``results`` rows of mode ``paper``). :func:`hbb_paper_tables` and
:func:`cmp_iso_paper_tables` lay them out with every model, each table captioned
with the sampling settings (the task's layout names which applies);
:func:`insert_beside` puts each right after the exact table it mirrors.
(ImplicitBBQ's paper-equivalent Table 2 is in :mod:`.bbq_layouts`.)
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import pandas as pd

from probe.reports.compare.common import model_labels
from probe.reports.compare.runs import Run
from probe.reports.compare.tables import Table, flatten

__all__ = ["insert_beside", "hbb_paper_table", "hbb_paper_tables", "cmp_iso_paper_tables"]


def _count(entry: Mapping[str, Any] | None) -> str:
    """``E (q05–q95); exact k`` of one paper-equivalent group (– when missing)."""
    if not entry:
        return "–"
    e = entry.get("expected_count")
    e_txt = "–" if not isinstance(e, (int, float)) or not math.isfinite(e) else f"{e:.1f}"
    return f"{e_txt} ({entry.get('count_q05', '–')}–{entry.get('count_q95', '–')}); exact {entry.get('exact_count', '–')}"


def _settings_text(st: Mapping[str, Any]) -> str:
    return (f"T = {st.get('temperature', math.nan):g}, top-p = {st.get('top_p', math.nan):g}, "
            f"{st.get('samples', '?')} samples per question, S ≥ {st.get('threshold', math.nan):g}, non-label answers "
            f"{'dropped' if st.get('invalid') == 'drop' else st.get('invalid', '?')}")


def hbb_paper_table(runs: Sequence[Run]) -> Table | None:
    """HBB Table 1 (a)=s1) under the paper's estimator: one row per model, one column per category and all;
    cell = expected count (5-95% over repeated runs of the paper's procedure); exact count beside it."""
    have = [r for r in runs if (r.summary.get("paper_equivalent") or {}).get("all")]
    if not have:
        return None
    cats = list(dict.fromkeys(c for r in have for c in r.summary["paper_equivalent"].get("by_category", {})))
    rows = []
    for r in have:
        pe = r.summary["paper_equivalent"]
        row: dict[str, Any] = {"Model": r.label, "n": pe["all"].get("n")}
        row.update({c: _count(pe.get("by_category", {}).get(c)) for c in cats})
        row["all"] = _count(pe["all"])
        nf = pe["all"].get("noise_floor_expected_count")
        row["noise floor (all)"] = (f"{nf:.1f} ({pe['all'].get('noise_floor_q05', '–')}–"
                                    f"{pe['all'].get('noise_floor_q95', '–')})") if isinstance(nf, (int, float)) else "–"
        ms = pe["all"].get("expected_mean_s")
        row["paper E[mean S] (all)"] = f"{ms:.1f}" if isinstance(ms, (int, float)) and math.isfinite(ms) else "–"
        rows.append(row)
    settings = {_settings_text(r.summary["paper_equivalent"].get("settings") or {}) for r in have}
    st = "; ".join(sorted(settings))
    return Table("hbb_table1_paper", "hbb", f"HBB Table 1 layout, a)=s1, paper-equivalent ({st})", (
        f"Task hbb, models {model_labels(have)}. Estimator: paper-equivalent ({st}): the count of instances with "
        "S ≥ threshold that the paper's procedure (each question answered by sampled generations, S from the answer "
        "shares) would report, as its expectation computed exactly from the tempered label probabilities; in "
        "parentheses its 5-95% range over repeated runs of that procedure (Poisson-binomial), then the exact count "
        "(S from the T = 1 probabilities). Noise floor: the same expectation with p1 = p2 for every instance (what "
        "sampling noise alone gives). n: instances. CI: the 5-95% ranges (no bootstrap)."), pd.DataFrame(rows))


def cmp_iso_paper_tables(runs: Sequence[Run], params_b: Mapping[str, float] | None = None) -> list[tuple[str, Table]]:
    """(name of the exact table it mirrors, the paper-equivalent table) for every iso/cmp table the runs support."""
    from probe.tasks.cmp_iso.metrics import PAPER_MODE
    from probe.tasks.cmp_iso.model_tables import combine_summaries
    from probe.tasks.cmp_iso.tables import build_tables, mode_title, table_modes

    if not any(x.get("mode") == PAPER_MODE for r in runs for x in r.summary.get("results", [])):
        return []
    have = list(runs)  # a model without paper rows (e.g. every label outside the nucleus) shows "–"
    sizes = {r.label: r.params_b for r in have if math.isfinite(r.params_b)}
    sizes.update(params_b or {})
    summary = combine_summaries([{**r.summary, "model": r.label, "params_b": {}} for r in have], sizes)
    if (PAPER_MODE, "_paper") not in table_modes(summary):
        return []
    est = mode_title(summary, PAPER_MODE)
    pairs = "; ".join(f"{r.label}: " + ", ".join(f"{b} {n}" for b, n in (r.summary.get("n_pairs") or {}).items())
                      for r in have)
    out = []
    for name, (title, df) in build_tables(summary, PAPER_MODE).items():
        if name == "variants":  # already every estimator in the exact table
            continue
        note = f" {df.attrs['caption']}" if df.attrs.get("caption") else ""
        out.append((f"cmp_iso_{name}", Table(f"cmp_iso_{name}_paper", "cmp_iso", title, (
            f"Task cmp_iso, models {model_labels(have)} (rows). Estimator: {est} (the authors' sampling), computed exactly. "
            f"n: context pairs per benchmark ({pairs}). CI: none in this table; ∗: approximate randomization test "
            f"p < {summary.get('alpha')} (n_iter = {summary.get('n_iter')}).{note}"), flatten(df))))
    return out


def hbb_paper_tables(runs: Sequence[Run], params_b: Mapping[str, float] | None = None) -> list[tuple[str, Table]]:
    """``[("hbb_table1", the paper-equivalent Table 1)]`` when any run computed it, else ``[]``."""
    t = hbb_paper_table(runs)
    return [("hbb_table1", t)] if t is not None else []


def insert_beside(items: list[Any], extra: Sequence[tuple[str, Any]]) -> list[Any]:
    """``items`` with each extra item right after the item named by its anchor (at the end when none is).

    >>> from types import SimpleNamespace as N
    >>> [x.name for x in insert_beside([N(name="a"), N(name="b")], [("a", N(name="a_paper")), ("z", N(name="z2"))])]
    ['a', 'a_paper', 'b', 'z2']
    """
    out = list(items)
    for anchor, item in extra:
        at = next((i for i, x in enumerate(out) if getattr(x, "name", None) == anchor), None)
        if at is None:
            out.append(item)
        else:
            out.insert(at + 1, item)
    return out
