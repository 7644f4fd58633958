"""Several ``cmp_iso`` runs (one model each) as one summary: the tables' model rows and the cross-model statistics.

A ``cmp_iso`` run writes one model's ``summary.json`` (rows without a model
name; :mod:`probe.tasks.cmp_iso.summary`). :func:`combine_runs` reads several
run directories, names every row by its run's model and adds what needs more
than one model (seed 003): per setting x benchmark x paradigm, the Pearson
correlation of PG with parameter count (``params_b``, billions; models without
a count are left out) and Kendall's tau between the neutral-option share and
-|PG| (Table E.1). The result feeds :func:`probe.reports.cmp_iso_tables.write_report`.

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

from probe.errors import ProbeError

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
        if s.get("task") != "cmp_iso":
            raise ProbeError(f"{path}: a summary of task {s.get('task')!r}, not cmp_iso")
        summaries.append(s)
    return combine_summaries(summaries, params_b)


def combine_summaries(summaries: Sequence[Mapping[str, Any]], params_b: Mapping[str, float] | None = None) -> dict:
    """One summary over several models' run summaries (each with ``model``), in the tables' input format."""
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
    for key in ("results", "comparisons", "variants"):
        out[key] = [{"model": m, **row} for m, s in zip(models, summaries) for row in s.get(key, [])]
    out["correlations"] = correlations(out["results"], out["models"], benchmarks, sizes)
    return out


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def correlations(results: Sequence[Mapping], models: Sequence[str], benchmarks: Sequence[str],
                 params_b: Mapping[str, float]) -> list[dict]:
    """Per setting x benchmark x paradigm (expected counts): Pearson(PG, params_b) and
    Kendall tau(neutral share, -|PG|) over the models that have pairs there."""
    from probe.metrics.significance import kendall_tau, pearson

    out = []
    for setting in sorted({r["setting"] for r in results}):
        for bench in benchmarks:
            for par in ("iso", "cmp"):
                rows = {r["model"]: r[par] for r in results if r["setting"] == setting and r["benchmark"] == bench
                        and r["mode"] == "expected" and r[par]["n_pairs"]}
                ms = [m for m in models if m in rows]
                entry: dict[str, Any] = {"setting": setting, "benchmark": bench, "paradigm": par, "n_models": len(ms)}
                pg = [_num(rows[m]["pg"]) for m in ms]
                sizes = [float(params_b.get(m, math.nan)) for m in ms]
                ok = [i for i, x in enumerate(sizes) if math.isfinite(x)]
                entry["pearson_pg_params"] = pearson([pg[i] for i in ok], [sizes[i] for i in ok])
                ns = [_num(rows[m]["neutral_share"]) for m in ms]
                if ns and all(math.isfinite(x) for x in ns):
                    # seed 003 Table E.1: does ranking by neutral share agree with ranking by (low) |PG|?
                    entry["kendall_neutral_vs_abs_pg"] = kendall_tau(ns, [-abs(x) for x in pg])
                out.append(entry)
    return out
