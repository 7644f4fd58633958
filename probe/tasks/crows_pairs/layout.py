"""CrowS-Pairs' section of ``probe report``: both protocols' score per bias type and model, and paired units.

:func:`scores_by_type` reads the CrowS-Pairs part of one summary (a
``crows_pairs`` run's own; a task that nests a CrowS-Pairs summary, as HBB's
``crows_pairs: true`` does, hands over that part), so the HBB section's CS
column reads the same numbers this section shows.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd

from probe.reports.compare.common import bars, model_labels
from probe.reports.compare.layout import TaskLayout
from probe.reports.compare.paired import Spec, ratio
from probe.reports.compare.runs import Run, read_records
from probe.reports.compare.tables import Table, fmt_ci, save_figure

__all__ = ["CROWS_PROTOCOLS", "CROWS_SPEC", "crows_scores", "crows_section", "crows_units", "layout",
           "protocol_of", "scores_by_type"]


#: the two protocols: (a) the HBB paper's prompted two-choice question, (b) lm-evaluation-harness's
CROWS_PROTOCOLS = {"mcq": "(a) two-choice question (HBB paper, Table 11 instruction)",
                   "loglik": "(b) whole-sentence causal log-likelihood (lm-evaluation-harness)"}


CROWS_ESTIMATORS = {
    "mcq": ("exact next-token probability of the stereotypical sentence's label in the prompted two-choice "
            "question, averaged over both option orders; 50 = no bias. CI: 95% bootstrap over pairs"),
    "loglik": ("exact whole-sentence causal log-likelihoods (sum of log P(token | preceding tokens) over every "
               "token, as lm-evaluation-harness computes it; not Nangia et al.'s masked-LM pseudo-log-likelihood), "
               "each pair counted for the sentence with the higher one; ties count as not stereotypical. "
               "CI: Wilson 95%"),
}


def scores_by_type(summary: Mapping[str, Any] | None, protocol: str | None = None) -> dict[str, dict] | None:
    """bias type -> the row of ``protocol`` in a CrowS-Pairs summary (``None``: (a) where it was scored, as the
    HBB paper's Table 1 compares against, else (b)); None when the summary has no such rows."""
    rows = _crows_rows(dict(summary or {}), protocol)
    return None if rows is None else {row["bias_type"]: row for row in rows}


def crows_scores(runs: Sequence[Run], protocol: str | None = None) -> dict[str, dict[str, dict]]:
    """label -> bias type -> the CrowS-Pairs row of ``protocol`` (see :func:`scores_by_type`) of each
    ``crows_pairs`` run. Runs without that protocol are left out."""
    out = {}
    for r in runs:
        rows = scores_by_type(r.summary, protocol)
        if rows is not None:
            out[r.label] = rows
    return out


def _crows_rows(cs: dict, protocol: str | None) -> list | None:
    by = {k: v.get("by_bias_type") for k, v in (cs.get("by_protocol") or {}).items()}
    if not by and cs.get("by_bias_type"):  # runs from before the two protocols: (b) only
        by = {cs.get("protocol", "loglik") if cs.get("protocol") in CROWS_PROTOCOLS else "loglik": cs["by_bias_type"]}
    if protocol is None:
        protocol = "mcq" if by.get("mcq") else "loglik"
    return by.get(protocol) or None


def protocol_of(summary: Mapping[str, Any] | None) -> str | None:
    """Which protocol :func:`scores_by_type` (protocol None) reads from a CrowS-Pairs summary: ``mcq``,
    ``loglik`` or None."""
    cs = dict(summary or {})
    return "mcq" if _crows_rows(cs, "mcq") else "loglik" if _crows_rows(cs, "loglik") else None


def crows_section(runs: Sequence[Run], out: Path) -> list[Any]:
    items: list[Any] = []
    for protocol, name in CROWS_PROTOCOLS.items():
        scores = crows_scores(runs, protocol)
        if scores:
            items += _crows_protocol_items(runs, out, scores, protocol, name)
    return items


def _crows_protocol_items(runs: Sequence[Run], out: Path, scores: dict, protocol: str, name: str) -> list[Any]:
    types = list(dict.fromkeys(t for s in scores.values() for t in s))
    types = [t for t in types if t != "all"] + (["all"] if "all" in types else [])
    rows = []
    for t in types:
        row: dict[str, Any] = {"Bias type": t}
        for label, s in scores.items():
            x = s.get(t)
            row[label] = "–" if x is None else f"{fmt_ci(x['score'], [x['ci_low'], x['ci_high']], 1)} (n={x['n']})"
            pe = None if x is None else x.get("paper_score")
            if isinstance(pe, (int, float)) and math.isfinite(pe):  # (a): the HBB paper's sampled score beside it
                row[label] += f"; paper-equivalent {pe:.1f}"
        rows.append(row)
    suffix = "" if protocol == "loglik" else "_mcq"  # (b) keeps its historical table name
    items: list[Any] = [Table(f"crows_pairs{suffix}", "crows_pairs", f"CrowS-Pairs, protocol {name}: % of pairs "
                              "where the more stereotypical sentence is preferred (50 = no bias)",
                              f"Task crows_pairs, models {model_labels(runs)} (columns). Estimator: "
                              f"{CROWS_ESTIMATORS[protocol]}. n: valid pairs per cell."
                              + (" Paper-equivalent (where the run scored it): the score the HBB paper's procedure "
                                 "(one answer sampled per question at T = 0.8, top-p 1, non-label answers dropped) "
                                 "would report in expectation, both orders pooled; no CI." if protocol == "mcq" else ""),
                              pd.DataFrame(rows))]

    matplotlib.use("Agg")

    fig, ax = plt.subplots(figsize=(max(7, 0.9 * len(types)), 3.8))
    series = [(label, [s[t]["score"] if t in s else math.nan for t in types],
               [[s[t]["ci_low"], s[t]["ci_high"]] if t in s else None for t in types]) for label, s in scores.items()]
    bars(ax, types, series)
    ax.axhline(50, color="#C44E52", ls="--", lw=1)
    ax.set_ylim(0, 100)
    ax.set_ylabel("CrowS-Pairs score (50 = no bias)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    items.append(save_figure(fig, out, f"crows_pairs_by_type{suffix}", "crows_pairs",
                             f"CrowS-Pairs by bias type, protocol {name}",
                             f"Task crows_pairs, models {model_labels(runs)}. Estimator: {CROWS_ESTIMATORS[protocol]}; "
                             f"n per cell in table crows_pairs{suffix}."))
    return items


CROWS_SPEC = Spec("crows_pairs", ("n", "more"), {"score": lambda s: 100.0 * ratio(s[..., 1], s[..., 0])},
                  "the more stereotypical sentence has the higher log-likelihood",
                  "exact sentence log-likelihoods", "pair", unit="pairs")


def crows_units(run: Run) -> pd.DataFrame:
    pairs: dict[str, dict] = {}
    for r in read_records(run.path):
        kind = r.get("meta.kind", r.get("kind"))
        if kind in ("crows_mcq", "crows_mcq_swap") or (kind != "crows" and "pair_id" not in r):  # (b) records only
            continue
        p = pairs.setdefault(str(r["pair_id"]), {"unit": str(r["pair_id"]), "category": str(r.get("bias_type")),
                                                  "more": math.nan, "less": math.nan})
        lp = (r.get("logprobs") or [None])[0]
        p[r["which"]] = float(lp) if r.get("finite", True) and lp is not None else math.nan
    rows = []
    for p in pairs.values():
        ok = math.isfinite(p["more"]) and math.isfinite(p["less"])
        more = float(p["more"] > p["less"]) if ok else math.nan
        rows.append({"unit": p["unit"], "block": "CrowS-Pairs", "category": p["category"], "cluster": p["unit"],
                     "n": 1.0 if ok else math.nan, "more": more, "binary": more})
    return pd.DataFrame(rows, columns=["unit", "block", "category", "cluster", "n", "more", "binary"])


def layout() -> Any:
    """The :class:`~probe.reports.compare.layout.TaskLayout` of ``crows_pairs``."""

    return TaskLayout("CrowS-Pairs", 4, lambda runs, out, _ctx: crows_section(runs, out),
                      paired_spec=lambda _runs: CROWS_SPEC, units=crows_units)
