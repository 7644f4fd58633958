"""Several ``cmp_iso`` runs (one model each) as one summary: the tables' model rows and the cross-model statistics.

A ``cmp_iso`` run writes one model's ``summary.json`` (rows without a model
name; :mod:`probe.tasks.cmp_iso.summary`). :func:`combine_runs` reads several
run directories, names every row by its run's model and adds what needs more
than one model (iso/cmp paper): per setting x benchmark x paradigm, the Pearson
correlation of PG with parameter count (``params_b``, billions; models without
a count are left out) over the dense models of families with >= 2 sizes
(Table 8) and over all models, total and active parameters (Table E.2), and
Kendall's tau and the top-5 intersection between the neutral-option share and
-|PG| (Table E.1); the numbers are :mod:`probe.tasks.cmp_iso.model_metrics`. The
size correlations use PG in the paper's orientation
(:data:`probe.tasks.cmp_iso.data.PAPER_ORIENTATION`: StereoSet, RedditBias,
CrowS-Pairs and DE-Gen as -PG), so their signs compare with Table 8 / E.2; the
tables mark those columns "(−PG)".
:func:`size_tables` lays them out as the paper's tables (rows setting x
category, columns benchmarks). The result feeds
:func:`probe.tasks.cmp_iso.tables.write_report`.

>>> s = combine_summaries([{"model": "m", "benchmarks": ["bbq"], "settings": ["direct"], "alpha": 0.05,
...                         "results": [], "comparisons": [], "variants": []}])
>>> s["models"], s["correlations"]
(['m'], [])
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from probe.errors import ProbeError
from probe.tasks.cmp_iso.data import BENCHMARK_TITLES, paper_sign
from probe.tasks.cmp_iso.model_metrics import ModelSize, model_sizes, neutral_rank_agreement, size_correlation

#: the task whose summaries these tables read (a run of another task is refused, not switched on)
SUMMARY_TASK = "cmp_iso"
#: summary keys copied from the first run (they are the same for runs of one config)
SHARED = ("max_pairs", "seed", "alpha", "n_iter", "n_boot", "paper_equivalent")


def combine_runs(run_dirs: Sequence[str | Path], params_b: Mapping[str, float] | None = None) -> dict:
    """The combined summary of the ``cmp_iso`` runs in ``run_dirs`` (each holding ``summary.json``).

    ``params_b``: parameter counts by model name; default: the ``params_b`` of
    each run's config.
    """
    summaries = []
    for d in run_dirs:
        path = Path(d) / "summary.json"
        if not path.is_file():
            raise ProbeError(f"{path}: not found (is {d} a finished cmp_iso run?)")
        try:
            s = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ProbeError(f"{path}: cannot read ({exc})") from None
        if s.get("task") != SUMMARY_TASK:
            raise ProbeError(f"{path}: a summary of task {s.get('task')!r}, not {SUMMARY_TASK}")
        summaries.append(s)
    return combine_summaries(summaries, params_b)


def combine_summaries(summaries: Sequence[Mapping[str, Any]], params_b: Mapping[str, float] | None = None,
                      active_b: Mapping[str, float] | None = None,
                      families: Mapping[str, str] | None = None) -> dict:
    """One summary over several models' run summaries (each with ``model``), in the tables' input format.

    ``params_b`` / ``active_b``: total / active parameter counts (billions) by
    model (active defaults to total: dense); ``families``: family by model
    (default: the name without its size, :func:`probe.tasks.cmp_iso.model_metrics.family_of`).
    """

    models = [str(s.get("model") or "model") for s in summaries]
    dup = sorted({m for m in models if models.count(m) > 1})
    if dup:
        raise ProbeError(f"cmp_iso runs of the same model given twice: {', '.join(dup)}")
    sizes: dict[str, float] = {}
    for m, s in zip(models, summaries):
        own = (s.get("params_b") or {}).get(m)
        if own is not None:
            sizes[m] = float(own)
    sizes.update({str(k): float(v) for k, v in (params_b or {}).items()})
    benchmarks = list(dict.fromkeys(b for s in summaries for b in s.get("benchmarks", [])))
    out: dict[str, Any] = {"models": sorted(models), "benchmarks": benchmarks,
                           "settings": sorted({x for s in summaries for x in s.get("settings", [])})}
    first = summaries[0] if summaries else {}
    out.update({k: first.get(k) for k in SHARED})
    out["nonfinite_records"] = [f"{m}|{i}" for m, s in zip(models, summaries) for i in s.get("nonfinite_records", [])]
    for key in ("results", "comparisons", "variants", "pooled_cmp_vs_iso"):
        out[key] = [{"model": m, **row} for m, s in zip(models, summaries) for row in s.get(key, []) or []]
    msizes = model_sizes(sizes, active_b, families)
    out["model_sizes"] = {m: {"total_b": v.total_b, "active_b": v.active_b, "family": v.family, "dense": v.dense}
                          for m, v in msizes.items()}
    out["correlations"] = correlations(out["results"], out["models"], benchmarks, msizes, out.get("alpha") or 0.05)
    return out


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def correlations(results: Sequence[Mapping], models: Sequence[str], benchmarks: Sequence[str],
                 sizes: Mapping[str, Any], alpha: float = 0.05) -> list[dict]:
    """Per setting x benchmark x paradigm (expected counts) over the models that have pairs there:
    ``table8`` (Pearson PG vs total parameters, dense models of families with >= 2 sizes; PG in the paper's
    orientation, ``orientation`` = the sign applied, :func:`probe.tasks.cmp_iso.data.paper_sign`),
    ``e2_total`` / ``e2_active`` (all models with a count), ``e1`` (Kendall tau and top-5 intersection of
    neutral share vs -|PG|); ``pearson_pg_params`` / ``kendall_neutral_vs_abs_pg`` are the (r, p) /
    (tau, p) of ``e2_total`` / ``e1``. ``sizes``: :class:`~probe.tasks.cmp_iso.model_metrics.ModelSize` by
    model, or plain total counts."""

    if sizes and not isinstance(next(iter(sizes.values())), ModelSize):
        sizes = model_sizes({k: float(v) for k, v in sizes.items()})
    out = []
    for setting in sorted({r["setting"] for r in results}):
        for bench in benchmarks:
            for par in ("iso", "cmp"):
                rows = {r["model"]: r[par] for r in results if r["setting"] == setting and r["benchmark"] == bench
                        and r["mode"] == "expected" and r[par]["n_pairs"]}
                ms = [m for m in models if m in rows]
                sign = paper_sign(bench)
                entry: dict[str, Any] = {"setting": setting, "benchmark": bench, "paradigm": par, "n_models": len(ms),
                                         "orientation": sign}
                pg = {m: _num(rows[m]["pg"]) for m in ms}
                # iso/cmp paper's Table 8 / E.2 correlate the PG as its tables report it: re-oriented benchmarks as -PG
                oriented = {m: sign * v for m, v in pg.items()}
                entry["table8"] = size_correlation(oriented, sizes, dense_families=True, alpha=alpha)
                entry["e2_total"] = size_correlation(oriented, sizes, dense_families=False, alpha=alpha)
                entry["e2_active"] = size_correlation(oriented, sizes, use_active=True, dense_families=False,
                                                      alpha=alpha)
                entry["pearson_pg_params"] = (entry["e2_total"]["r"], entry["e2_total"]["p"])
                ns = {m: _num(rows[m]["neutral_share"]) for m in ms}
                if ns and all(math.isfinite(x) for x in ns.values()):
                    # iso/cmp paper, Table E.1: does ranking by neutral share agree with ranking by (low) |PG|?
                    entry["e1"] = neutral_rank_agreement(ns, pg)
                    entry["kendall_neutral_vs_abs_pg"] = (entry["e1"]["tau"], entry["e1"]["p"])
                out.append(entry)
    return out


def _cell_r(c: Mapping[str, Any] | None, alpha: float) -> str:
    if not c or not math.isfinite(c.get("r", math.nan)):
        return "–" if not c else f"– (n={c.get('n', 0)})"
    star = " ∗" if c["p"] < alpha else ""
    lo, hi = c["ci"]
    ci = f" [{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) else ""
    return f"{c['r']:.3f}{star}{ci} (n={c['n']})"


def size_tables(correlation_rows: Sequence[Mapping[str, Any]], benchmarks: Sequence[str],
                alpha: float = 0.05) -> dict[str, pd.DataFrame]:
    """Seed 003 Table 8, Table E.2 (total and active) and Table E.1 as frames: rows setting x paradigm x
    category (``category`` of each correlation row, default gender), columns benchmarks.

    Cells: ``r ∗ [CI] (n=models)`` (Pearson, Fisher-z 95% CI, ∗: p < alpha) /
    ``tau ∗`` and ``top-5 k/5``; – where fewer than 3 models (Pearson) or no
    neutral option (E.1). In the Pearson tables a benchmark whose PG enters
    re-oriented (:func:`probe.tasks.cmp_iso.data.paper_sign` -1) is headed
    ``<benchmark> (−PG)``.
    """

    def head(b: str) -> str:  # the paper's name of the benchmark ("DE-Gen", not the key de_gen)
        name = BENCHMARK_TITLES.get(b, b)
        return name if paper_sign(b) > 0 else f"{name} (−PG)"

    def frame(key: str) -> pd.DataFrame:
        rows: dict[tuple, dict] = {}
        for c in correlation_rows:
            row = rows.setdefault((c["setting"], c["paradigm"], c.get("category", "gender")), {})
            row[c["benchmark"]] = _cell_r(c.get(key), alpha)
        recs = [{"setting": s, "paradigm": p, "category": cat, **{head(b): cells.get(b, "–") for b in benchmarks}}
                for (s, p, cat), cells in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1] != "cmp", kv[0][2]))]
        return pd.DataFrame(recs)

    out = {"table8": frame("table8"), "tableE2_total": frame("e2_total"), "tableE2_active": frame("e2_active")}
    e1: dict[tuple, dict] = {}
    for c in correlation_rows:
        if "e1" not in c:
            continue
        d = c["e1"]
        key = (c["setting"], c["paradigm"], c.get("category", "gender"))
        tau = "–" if not math.isfinite(d["tau"]) else f"{d['tau']:.3f}{' ∗' if d['p'] < alpha else ''}"
        e1.setdefault((*key, "Kendall τ"), {})[c["benchmark"]] = tau
        e1.setdefault((*key, f"Top-{d['k']} intersection"), {})[c["benchmark"]] = f"{d['top_k']} (n={d['n']})"
    out["tableE1"] = pd.DataFrame([{"setting": s, "paradigm": p, "category": cat, "metric": m,
                                    **{BENCHMARK_TITLES.get(b, b): cells.get(b, "–") for b in benchmarks}}
                                   for (s, p, cat, m), cells in sorted(e1.items(), key=lambda kv: (kv[0][0], kv[0][1] != "cmp", kv[0][2], kv[0][3]))])
    return out
