"""`probe report RUN_DIR [RUN_DIR ...] --output DIR`: many runs (any tasks, any models) as one report.

Reads each run directory written by ``probe run`` / ``probe demo``
(``summary.json``, ``provenance.json``, ``records.jsonl``), groups the runs by
task and model (runs of one model with different configs stay apart, labelled
by what differs), and writes the seeds' multi-model tables, paired
comparisons between every two runs of a task (cluster bootstrap, McNemar,
Holm), figures and one self-contained ``report.html``. See ``docs/reports.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from probe.errors import ProbeError


def register(groups: dict) -> None:
    p = groups[""].add_parser(
        "report", help="merge finished runs (any tasks, any models) into one report: tables, paired tests, HTML",
        description=__doc__.split("\n\n")[1],
    )
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories (probe run --output ...)")
    p.add_argument("--output", "-o", type=Path, required=True, help="report directory (report.html, tables/, figures/)")
    p.add_argument("--n-boot", type=int, default=2000, help="paired bootstrap replicates (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the paired bootstrap")
    p.add_argument("--params", action="append", default=[], metavar="MODEL=BILLIONS",
                   help="parameter count of a model label for iso/cmp's size correlation (default: provenance)")
    p.add_argument("--title", default=None, help="the report's title")
    p.set_defaults(func=run)


def _params(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        key, sep, value = item.rpartition("=")
        try:
            out[key] = float(value)
        except ValueError:
            sep = ""
        if not sep or not key:
            raise ProbeError(f"--params {item!r}: expected MODEL=BILLIONS, e.g. smollm2=0.135")
    return out


def bbq_family_units(run: Any) -> Any:
    """Per-item answer records of a ``bbq``, ``implicitbbq`` or ``demo`` run as paired units: the task's own
    conversion of records to option probabilities, then block / category / cluster (the resampling unit:
    BBQ template instance; ImplicitBBQ template x context; demo scenario)."""
    from probe.reports.compare.units import bbq_units
    from probe.runs.record import records_to_frame

    frame = records_to_frame(run.path)
    if frame.empty:
        return None
    if run.task == "demo":
        from probe.tasks.demo import answer_records

        extra = frame.set_index("id")["scenario"].to_dict()
        recs = [r for r in answer_records(frame) if r["finite"]]
        for r in recs:
            r.update(block="demo", category=f"{r['dimension']} {r['context_kind']}", cluster=str(extra[r["id"]]))
        return bbq_units(recs)
    from probe.tasks.implicitbbq.results import metric_records

    recs, _ = metric_records(frame)
    answers = frame.set_index("id")["answers"].to_dict() if "answers" in frame else {}
    for r in recs:
        if run.task == "bbq":
            opts = "|".join(sorted(str(a) for a in answers.get(r["id"], [])))
            r.update(block=f"{r['answer_format']} format", category=r["category"],
                     cluster=f"{r['category']}|{r['template_id']}|{opts}")
        else:  # ImplicitBBQ: one context (its 4 condition x polarity variants) of one template
            r.update(block=f"{r['strategy']}, {r['answer_format']}", category=f"{r['dimension']} {r['context_kind']}",
                     cluster=f"{r['template_id']}|{str(r['item_id']).rsplit('-', 2)[0]}")
    return bbq_units(recs)


def headline_of(runs: list) -> tuple[Any, list[str], Any]:
    """The headline table, the warnings (each run's, labelled) and the flat results of many runs."""
    from probe.runs.results import headline_table, report_warnings, result_rows, results_frame
    from probe.tasks import available, get

    rows: list[dict] = []
    warnings: list[str] = []
    for r in runs:
        if r.task not in available():
            continue
        mine = result_rows(get(r.task), None, r.summary)
        for row in mine:
            row["model"] = r.label or row["model"]
        rows += mine
        warnings += [f"{r.task}, {r.label}: {w}" for w in report_warnings(r.summary, mine)]
    return headline_table(rows), warnings, results_frame(rows)


def run(args: argparse.Namespace) -> int:
    from probe.reports.compare import build_report, load_runs

    if args.n_boot < 1:
        raise ProbeError(f"--n-boot must be a positive integer, got {args.n_boot}")
    runs = load_runs(args.runs)
    for r in runs:
        if r.task in ("bbq", "implicitbbq", "demo") and (r.path / "records.jsonl").is_file():
            r.units = bbq_family_units(r)
    headline, warnings, results = headline_of(runs)
    manifest = build_report(runs, args.output, n_boot=args.n_boot, seed=args.seed, params_b=_params(args.params),
                            title=args.title, progress=lambda m: print(f"report: {m}", file=sys.stderr),
                            headline=headline, warnings=warnings)
    from probe.io import write_atomic

    write_atomic(args.output / "results.csv", results.to_csv(index=False))
    print(f"wrote {args.output}/report.html, report.md, {len(manifest['tables'])} table(s) and "
          f"{len(manifest['figures'])} figure(s) (tables/, figures/)", file=sys.stderr)
    return 0
