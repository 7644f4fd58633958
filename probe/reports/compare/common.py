"""What every multi-model layout shares: the runs' labels, bootstrap counts and CI unit in captions, grouped bars.

>>> from pathlib import Path
>>> runs = [Run(Path("a"), "bbq", "m", {"n_boot": 200}, {}, {}, label="m1"),
...         Run(Path("b"), "bbq", "m", {"n_boot": 1000}, {"ci": {"unit": "pair"}}, {}, label="m2")]
>>> model_labels(runs), boots(runs), ci_unit(runs[1:])
('m1, m2', '200/1000', 'pair')
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from probe.reports.compare.runs import Run

__all__ = ["bars", "boots", "ci_unit", "model_labels"]


def model_labels(runs: Sequence[Run]) -> str:
    """The runs' labels, comma-separated (the models a caption names)."""
    return ", ".join(r.label for r in runs)


def boots(runs: Sequence[Run]) -> str:
    """The runs' bootstrap draws (``n_boot``), distinct values joined by ``/`` (``?`` when none is recorded)."""
    vals = sorted({r.n_boot for r in runs if r.n_boot})
    return "/".join(str(v) for v in vals) or "?"


def ci_unit(runs: Sequence[Run]) -> str:
    """The resampling unit of the runs' CIs, as their summaries state it (``summary.json`` -> ``ci.unit``).

    ImplicitBBQ runs resample template x context clusters; a run whose summary names no unit (made
    before clustered CIs) is said to resample items.
    """
    units = {r.label: str((r.summary.get("ci") or {}).get("unit") or "items (no cluster unit in the summary)")
             for r in runs}
    vals = sorted(set(units.values()))
    return vals[0] if len(vals) == 1 else "; ".join(f"{k}: {v}" for k, v in units.items())


def bars(ax: Any, groups: Sequence[str], series: Sequence[tuple[str, Sequence[float], Sequence[Any]]]) -> None:
    """Grouped bars with CI whiskers: ``series`` = (label, values, [lo, hi] or None per group)."""
    width = 0.8 / max(1, len(series))
    x = np.arange(len(groups))
    for j, (label, vals, cis) in enumerate(series):
        v = np.array([np.nan if a is None else a for a in vals], dtype=float)
        lo = [max(0.0, a - c[0]) if c and c[0] is not None and np.isfinite(a) else 0 for a, c in zip(v, cis)]
        hi = [max(0.0, c[1] - a) if c and c[1] is not None and np.isfinite(a) else 0 for a, c in zip(v, cis)]
        ax.bar(x + (j - (len(series) - 1) / 2) * width, v, width, yerr=[lo, hi], capsize=2, label=label)
    ax.set_xticks(x, groups, rotation=25, ha="right", fontsize=8)
    ax.axhline(0, color="black", lw=0.7)
