"""The demo's section of ``probe report``: explicit vs implicit metrics, one row per model, context kind and
estimator."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from probe.reports.compare.common import model_labels
from probe.reports.compare.layout import TaskLayout
from probe.reports.compare.runs import Run
from probe.reports.compare.tables import Table, fmt
from probe.tasks.bbq.paired_units import answer_units, bbq_spec
from probe.tasks.bbq.sections import METRICS
from probe.tasks.demo.task import answer_records

__all__ = ["demo_section"]

#: the columns as the demo's own report names them
COLUMN = {"acc_amb": "Acc amb", "acc_dis": "Acc dis", "bias_amb": "Bias amb", "bias_dis": "Bias dis"}


def demo_section(runs: Sequence[Run], out: Path) -> list[Any]:
    """The demo's explicit vs implicit metrics, one row per model, context kind and estimator."""
    rows = []
    for r in runs:
        for kind, m in r.summary.get("by_context_kind", {}).items():
            for version in ("expected", "argmax"):
                v = m[version]
                rows.append({"Model": r.label, "Context": kind, "Estimator": version, "n amb": m["n_amb"],
                             "n dis": m["n_dis"], **{COLUMN[k]: fmt(v[k]) for k in METRICS}})
    df = pd.DataFrame(rows)
    return [Table("demo_by_context", "demo", "Demo set: explicit vs implicit", (
        f"Task demo, models {model_labels(runs)}. Estimators: expected counts (T = 1) and argmax answers (column "
        "Estimator). n: items per condition. CI: none in the demo summary (see the paired comparison below and "
        "each run's report.html)."), df)]


def layout() -> Any:
    """The demo's section of a comparison report: explicit vs implicit per model and estimator; paired units:
    items, clustered by scenario."""

    return TaskLayout("Demo set", 2, lambda runs, out, _ctx: demo_section(runs, out),
                      paired_spec=lambda _runs: bbq_spec("demo", "scenario"),
                      units=lambda run: answer_units(run, paired_records))


def paired_records(frame: Any) -> list[dict]:
    """Answer records of a demo run for paired tests: one block; category = dimension x kind; cluster = scenario."""

    extra = frame.set_index("id")["scenario"].to_dict()
    recs = [r for r in answer_records(frame) if r["finite"]]
    for r in recs:
        r.update(block="demo", category=f"{r['dimension']} {r['context_kind']}", cluster=str(extra[r["id"]]))
    return recs
