"""`probe report RUN_DIR [RUN_DIR ...] --output DIR`: many runs (any tasks, any models) as one report.

Reads each run directory written by ``probe run`` / ``probe demo``
(``summary.json``, ``provenance.json``, ``records.jsonl``), groups the runs by
task and model (runs of one model with different configs stay apart, labelled
by what differs), and writes a headline (the main metric per model and task), the
papers' table layouts across models, paired
comparisons between every two runs of a task (cluster bootstrap, McNemar,
Holm), figures and one self-contained ``report.html``. See ``docs/reports.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from probe.errors import ProbeError

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.


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


def run(args: argparse.Namespace) -> int:
    from probe.runs.results import combined_report

    if args.n_boot < 1:
        raise ProbeError(f"--n-boot must be a positive integer, got {args.n_boot}")
    if args.output.exists() and not args.output.is_dir():
        raise ProbeError(f"--output {args.output} exists and is not a directory; give a report directory")
    manifest = combined_report(args.runs, args.output, n_boot=args.n_boot, seed=args.seed,
                               params_b=_params(args.params), title=args.title,
                               progress=lambda m: print(f"report: {m}", file=sys.stderr))
    print(f"wrote {args.output}/report.html, report.md, results.csv, {len(manifest['tables'])} table(s) and "
          f"{len(manifest['figures'])} figure(s) (tables/, figures/)", file=sys.stderr)
    return 0
