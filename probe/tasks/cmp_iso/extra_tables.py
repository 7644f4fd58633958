"""Two tables beside the paper's layouts: CoT chains (counts, spread) and PG with / without non-answering prompts.

Both read one model's summary (:func:`probe.tasks.cmp_iso.summary.run_summary`).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from probe.reports.headline import phrase
from probe.tasks.cmp_iso.terms import TERMS


def _r(x: Any, digits: int = 3) -> float:
    return math.nan if x is None else round(float(x), digits)


def _words(key: str) -> str:
    """A setting, benchmark or mode key as the paper names it (``de_gen`` -> ``DiscrimEval (generation)``,
    ``direct+neutral`` -> ``direct answer, with a neutral option``)."""

    return phrase(key, TERMS)


def chains_table(summary: dict) -> pd.DataFrame:
    """One row per CoT setting x benchmark: chains, chains without a valid boxed answer, prompts without a valid
    chain (kept with no valid answer), mean per-prompt std of the label probabilities, and the std across chain
    indices of PG (expected)."""
    rows = []
    for cell, v in sorted((summary.get("cot") or {}).get("by_cell", {}).items()):
        setting, bench = cell.split("|", 1)
        std = (v.get("pg_std_across_chains") or {}).get("expected", {})
        rows.append({"setting": _words(setting), "benchmark": _words(bench), "chains": v.get("n_chains", 0),
                     "chains w/o valid answer": v.get("n_chains_no_cue", 0), "prompts": v.get("n_prompts", 0),
                     # kept with no valid answer (iso/cmp paper, appendix B), not dropped
                     "prompts w/o valid chain (kept)": v.get("n_prompts_no_valid_chain",
                                                             v.get("n_prompts_no_answer", 0)),
                     "mean prompt std": _r(v.get("mean_prompt_std")),
                     "PG iso std over chains": _r(std.get("iso")), "PG cmp std over chains": _r(std.get("cmp"))})
    return pd.DataFrame(rows)


def answering_table(summary: dict) -> pd.DataFrame:
    """One row per setting x benchmark x mode: prompts below the mass floor, PG on all pairs and on the
    pairs whose prompts all reach the floor (``answering_only``)."""
    rows = []
    for r in summary.get("results", []):
        if r["mode"] == "argmax" or "mass" not in r:
            continue
        only = r.get("answering_only") or {}
        row = {"setting": _words(r["setting"]), "benchmark": _words(r["benchmark"]), "mode": _words(r["mode"])}
        for par in ("iso", "cmp"):
            m = r["mass"][par]
            row[f"{par} below floor"] = f"{m['n_below_floor']}/{m['n']}"
            row[f"{par} median mass"] = _r(m["median"])
            row[f"PG {par}"] = _r(r[par]["pg"])
            row[f"PG {par} answering"] = _r((only.get(par) or {}).get("pg"))
            row[f"pairs {par} answering"] = (only.get(par) or {}).get("n_pairs", 0)
        rows.append(row)
    return pd.DataFrame(rows)
