"""`probe demo`: the main job on the embedded default model and demo data."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from probe.commands.common import bounded_int, positive_int_or_auto
from probe.models.builtins import DEFAULT_MODEL
from probe.tasks import get

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.

#: shown first in ``probe --help``
FIRST_STEPS = (("probe demo", "the embedded demo set on the embedded model (no data needed)"),)


def register(groups: dict) -> None:
    p = groups[""].add_parser(
        "demo",
        help="score the embedded demo set (default model: smollm2) and write records, summary and report",
        description="Writes DIR/records.jsonl, DIR/summary.json, DIR/report.md, DIR/report.html (with a figure). "
                    "Re-running with the same --output resumes.",
    )
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"built-in name, .gguf file, model directory or hub id (default: {DEFAULT_MODEL})")
    p.add_argument("--output", type=Path, default=Path("probe-demo"), help="run directory (default: probe-demo)")
    p.add_argument("--threads", type=bounded_int(1, None), default=None,
                   help="torch CPU threads (default: torch's, fewer when the CPU is busy)")
    p.add_argument("--batch-size", type=positive_int_or_auto, default="auto",
                   help="most sequences per forward pass, or auto (default; probe score --help)")
    p.add_argument("--device", default="auto", help="auto (default: the GPU when one is visible), cpu, cuda, cuda:N, mps")
    p.add_argument("--dtype", default="auto", choices=["float32", "bfloat16", "float16", "auto"],
                   help="default: auto = bfloat16 on a GPU that supports it, else float32")
    p.add_argument("--limit", type=int, default=None, help="score N demo items, spread over the dimensions (quick checks)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="print the whole report (report.md), not only the headline, the warnings and the paths")
    tmpl = p.add_mutually_exclusive_group()
    tmpl.add_argument("--chat-template", dest="chat_template", action="store_true", default=None)
    tmpl.add_argument("--no-chat-template", dest="chat_template", action="store_false")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from probe.runs.runner import RunOptions
    from probe.runs.results import print_run
    from probe.runs.task_run import run_task

    task = get("demo")
    options = RunOptions(device=args.device, dtype=args.dtype, batch_size=args.batch_size, threads=args.threads)
    evaluation = run_task(task, task.make_config({"chat_template": args.chat_template}), args.model,
                          output=args.output, limit=args.limit, options=options)
    print_run(evaluation, args.verbose)
    print(f"wrote {args.output}/records.jsonl, summary.json, report.md, report.html", file=sys.stderr)
    return 0
