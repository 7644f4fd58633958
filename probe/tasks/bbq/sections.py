"""BBQ's section of ``probe report``: per answer format and estimator, category x model tables and a figure.

Input: the runs' ``summary.json`` (:class:`~probe.reports.compare.runs.Run`),
``by_format[fmt]["by_category"][category]`` = the metrics of
:func:`probe.tasks.bbq.metrics.grouped_bbq_metrics` (expected and argmax, CIs).
:data:`METRICS` and :data:`ESTIMATOR` are shared with the ImplicitBBQ and demo sections.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd

from probe.reports.compare.common import bars, boots, model_labels
from probe.reports.compare.runs import Run
from probe.reports.compare.tables import Figure, Table, fmt, fmt_ci, save_figure

__all__ = ["ESTIMATOR", "FORMAT_WORDS", "METRICS", "bbq_section"]

METRICS = ("acc_amb", "acc_dis", "bias_amb", "bias_dis")
#: the answer formats as a reader names them (titles and paired blocks; file names keep the keys)
FORMAT_WORDS = {"oneword": "one-word answer", "labels": "numbered options"}
ESTIMATOR = {"expected": "exact expected counts (sums of option probabilities under the model's distribution, T = 1)",
             "argmax": "argmax answers (counts of each item's most probable option)"}


# -- plain BBQ -----------------------------------------------------------------------------------------------
def bbq_section(runs: Sequence[Run], out: Path) -> list[Any]:
    """Per answer format and estimator: rows category x model, the four metrics with CIs; one figure."""
    items: list[Any] = []
    formats = list(dict.fromkeys(f for r in runs for f in r.summary.get("by_format", {})))
    for f in formats:
        for version in ("expected", "argmax"):
            rows = []
            cats = list(dict.fromkeys(c for r in runs
                                      for c in r.summary["by_format"].get(f, {}).get("by_category", {})))
            for c in cats:
                for r in runs:
                    m = r.summary["by_format"].get(f, {}).get("by_category", {}).get(c)
                    if m is None:
                        continue
                    v = m[version]
                    ci = v.get("ci", {})
                    rows.append({"Category": c, "Model": r.label, "n amb": m["n_amb"], "n dis": m["n_dis"],
                                 **{k: fmt_ci(v[k], ci.get(k)) for k in METRICS},
                                 **({"acc_dis_all": fmt_ci(v["acc_dis_all"], ci.get("acc_dis_all"))}
                                    if "acc_dis_all" in v else {})})
            df = pd.DataFrame(rows).rename(columns={"acc_amb": "Acc amb ↑", "acc_dis": "Acc dis (non-Unknown) ↑",
                                                    "acc_dis_all": "Acc dis (all) ↑",
                                                    "bias_amb": "Bias amb →0", "bias_dis": "Bias dis →0"})
            strategies = sorted({str(r.summary.get("strategy")) for r in runs})
            items.append(Table(
                f"bbq_{f}_{version}", "bbq", f"BBQ by category ({FORMAT_WORDS.get(f, f)}, {version})",
                f"Task bbq, models {model_labels(runs)}; strategy {'/'.join(strategies)}. Estimator: {ESTIMATOR[version]}. "
                "n: items per category and condition (n amb, n dis). CI: 95% percentile bootstrap over items "
                f"(n_boot = {boots(runs)}). Accuracy: amb = picks Unknown, dis = picks the correct person, "
                "of all disambiguated items (BBQ paper, lm-eval) or of those answered with a person (ImplicitBBQ); "
                "bias in "
                "[-1, 1], 0 = unbiased, + = stereotyped.", df))
        items.append(_bbq_figure(runs, f, out))
    return items


def _bbq_figure(runs: Sequence[Run], f: str, out: Path) -> Figure:
    matplotlib.use("Agg")

    cats = [c for c in dict.fromkeys(c for r in runs for c in r.summary["by_format"].get(f, {}).get("by_category", {}))]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    panels = ((axes[0], "acc_amb", "accuracy, ambiguous ↑"), (axes[1], "bias_amb", "bias, ambiguous →0"))
    for ax, metric, ylab in panels:
        series = []
        for r in runs:
            bc = r.summary["by_format"].get(f, {}).get("by_category", {})
            vals = [bc[c]["expected"][metric] if c in bc else math.nan for c in cats]
            cis = [bc[c]["expected"].get("ci", {}).get(metric) if c in bc else None for c in cats]
            series.append((r.label, vals, cis))
        bars(ax, cats, series)
        ax.set_ylabel(ylab)
        ax.set_ylim(-1 if metric.startswith("bias") else 0, 1)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"BBQ ({FORMAT_WORDS.get(f, f)}): ambiguous-context accuracy and bias by category", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out, f"bbq_{f}", "bbq", f"BBQ by category ({f})",
                       f"Task bbq, models {model_labels(runs)}. Expected counts; whiskers: 95% percentile bootstrap CI over "
                       f"items (n_boot = {boots(runs)}); n per category in table bbq_{f}_expected.")
