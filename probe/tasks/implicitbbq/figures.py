"""ImplicitBBQ's Figure 4 with several models: accuracy and bias per prompting strategy.

The paper's Figure 4 ("accuracy and bias scores across four prompting
strategies (zero-shot, safety, few-shot, CoT) for 11 models; each panel shows
ambiguous or disambiguated contexts under explicit or implicit prompting") as
a 2 x 4 grid: columns = explicit/implicit x ambiguous/disambiguated, rows =
accuracy (↑) and bias (→ 0); in each panel the models along x and one bar per
strategy, the paper's model-wise score (mean over dimensions) with its 95%
cluster-bootstrap CI (the run's unit, ``summary.json`` -> ``ci.unit``). Input: each run's ``summary.json`` ``by_strategy["strategy|format"]``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import matplotlib
import matplotlib.pyplot as plt

from probe.reports.compare.common import bars, boots, ci_unit, model_labels
from probe.reports.compare.runs import Run
from probe.reports.compare.tables import Figure, save_figure
from probe.tasks.implicitbbq.terms import TERMS

__all__ = ["figure4", "STRATEGY_ORDER", "figure4_values"]

#: the paper's order of the prompting strategies (others follow, sorted)
STRATEGY_ORDER = ("zero_shot", "safety", "few_shot", "cot")
PANELS = (("explicit", "amb", "Explicit, ambiguous"), ("explicit", "dis", "Explicit, disambiguated"),
          ("implicit", "amb", "Implicit, ambiguous"), ("implicit", "dis", "Implicit, disambiguated"))
METRICS = (("acc", "accuracy ↑", (0.0, 1.0)), ("bias", "bias score →0", (-1.0, 1.0)))


def strategies(runs: Sequence[Run], answer_format: str) -> list[str]:
    """The strategies any run scored in ``answer_format``, in the paper's order."""
    have = {k.split("|")[0] for r in runs for k in r.summary.get("by_strategy", {})
            if k.endswith(f"|{answer_format}")}
    return [s for s in STRATEGY_ORDER if s in have] + sorted(have - set(STRATEGY_ORDER))


def figure4_values(run: Run, key: str, kind: str, metric: str, version: str = "expected") -> tuple[float, Any]:
    """(macro value, [lo, hi] or None) of ``metric`` (e.g. ``bias_amb``) in one run, strategy|format and
    context kind; NaN when the run has no such items.

    >>> r = Run(Path("."), "implicitbbq", "m", {}, {"by_strategy": {"zero_shot|oneword": {"implicit": {"expected": {
    ...     "macro": {"bias_amb": 0.3, "bias_amb_ci": [0.1, 0.5]}}}}}}, {})
    >>> figure4_values(r, "zero_shot|oneword", "implicit", "bias_amb"), figure4_values(r, "safety|oneword", "implicit", "bias_amb")[0]
    ((0.3, [0.1, 0.5]), nan)
    """
    macro = (((run.summary.get("by_strategy") or {}).get(key) or {}).get(kind) or {}).get(version, {}).get("macro")
    v = None if not macro else macro.get(metric)
    if v is None:
        return math.nan, None
    return float(v), macro.get(f"{metric}_ci")


def _n_text(runs: Sequence[Run], strats: Sequence[str], answer_format: str) -> str:
    """Per run and strategy, the items pooled over dimensions: explicit amb/dis, implicit amb/dis."""
    parts = []
    for r in runs:
        cells = []
        for s in strats:
            entry = r.summary.get("by_strategy", {}).get(f"{s}|{answer_format}", {})
            pooled = {k: (entry.get(k) or {}).get("expected", {}).get("pooled", {}) for k in ("explicit", "implicit")}
            cells.append(f"{TERMS.get(s, s)} " + "/".join(str(pooled[k].get(f"n_{c}", 0)) for k in pooled for c in ("amb", "dis")))
        parts.append(f"{r.label}: " + ", ".join(cells))
    return "; ".join(parts)


def figure4(runs: Sequence[Run], answer_format: str, out: Path, version: str = "expected") -> Figure:
    """The paper's Figure 4 layout for ``answer_format`` (``figures/implicitbbq_figure4_<format>.png/.svg``)."""

    matplotlib.use("Agg")

    strats = strategies(runs, answer_format)
    labels = [r.label for r in runs]
    fig, axes = plt.subplots(2, len(PANELS), figsize=(max(12.0, 1.2 * len(labels) * len(PANELS)), 6.2),
                             squeeze=False, sharey="row")
    for col, (kind, cond, title) in enumerate(PANELS):
        for row, (metric, ylabel, ylim) in enumerate(METRICS):
            ax = axes[row, col]
            series = []
            for s in strats:
                vals = [figure4_values(r, f"{s}|{answer_format}", kind, f"{metric}_{cond}", version) for r in runs]
                series.append((s, [v for v, _ in vals], [c for _, c in vals]))
            bars(ax, labels, series)
            ax.set_ylim(*ylim)
            if row == 0:
                ax.set_title(title, fontsize=9)
            if col == 0:
                ax.set_ylabel(ylabel)
    axes[0, -1].legend(fontsize=7, title="strategy", title_fontsize=7)
    fmt_words = TERMS.get(answer_format, answer_format)
    fig.suptitle(f"ImplicitBBQ ({fmt_words}): accuracy and bias by prompting strategy (Figure 4 layout)",
                 fontsize=10)
    fig.tight_layout()
    est = "exact expected counts (T = 1)" if version == "expected" else "argmax answers"
    return save_figure(
        fig, out, f"implicitbbq_figure4_{answer_format}", "implicitbbq",
        f"ImplicitBBQ Figure 4 layout: strategies ({fmt_words})",
        f"Task implicitbbq, models {model_labels(runs)}; strategies {', '.join(TERMS.get(s, s) for s in strats)} (bars; a missing bar: no such "
        f"items). Top: accuracy, bottom: bias; panels: explicit/implicit x ambiguous/disambiguated. Estimator: {est}, "
        "mean over dimensions (the paper's model-wise score). Whiskers: 95% percentile cluster bootstrap CI (whole "
        f"{ci_unit(runs)} clusters resampled within each dimension; n_boot = {boots(runs)}). n (items pooled over "
        "dimensions, explicit amb/dis, "
        f"implicit amb/dis): {_n_text(runs, strats, answer_format)}.")
