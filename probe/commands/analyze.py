"""``probe analyze ANALYSIS``: analyses of a model's internals (a subcommand group).

``probe analyze representations RUN_DIR --output OUT`` runs the
representations study (probes, logit lens, patching, steering) on an
ImplicitBBQ run (``probe run implicitbbq --set answer_formats=[labels] --capture
'blocks.*.hook_resid_post@last' --output RUN_DIR``;
:mod:`probe.studies.representations`).

``probe analyze steer|probes|lens|patch RUN_DIR ...`` analyse a task run
(``probe run TASK --output RUN_DIR [--capture ...]``), or ``--task TASK``
scored first (:mod:`probe.studies.analyze`; docs/activations.md, "Analyses on
task runs"):

    probe analyze steer runs/bbq --layer 5 --direction mean-diff:context_condition=ambig,disambig \
        --strengths -4,-2,0,2,4 --output runs/bbq/steer
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

from probe.commands.analyze_tasks import register_task_analyses
from probe.commands.common import bounded_int
from probe.errors import ProbeError

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.


def register(groups: dict) -> None:
    analyze = groups[""].add_parser("analyze", help="analyses of a model's internals (representations, ...)",
                                    description=__doc__.splitlines()[0].replace("``", "'"))
    sub = analyze.add_subparsers(dest="analysis", metavar="ANALYSIS")
    analyze.set_defaults(func=_usage(analyze))
    groups["analyze"] = sub  # later command modules may add `probe analyze X` here

    p = sub.add_parser(
        "representations", help="probes, logit lens, patching and steering on a run of a task that labels its "
                                "items for this study (group identity, framing, stereotyped answer)",
        description="Where does a model turn a cue into a group identity and a stereotyped answer? Reads RUN_DIR, "
                    "a run of a task that labels its items for this study, scored with labelled options and the "
                    "residual stream captured (`probe run configs/representations.yaml`; run without one, the "
                    "study names the task and the command), and writes probes.csv, transfer.csv, plots, "
                    "patching.npz, steering.csv/.md, summary.json and provenance.json into --output.")
    p.add_argument("run_dir", nargs="?", type=Path, default=None, metavar="RUN_DIR")
    p.add_argument("--config", default=None, help=argparse.SUPPRESS)  # the older spelling: a clear error
    p.add_argument("--output", type=Path, default=None, help="output directory (default: RUN_DIR/representations)")
    p.add_argument("--model", default=None, help="model (default: the run's own)")
    p.add_argument("--positions", default="last,mean:context",
                   help="where the probes read, comma-separated (last is the run's own capture; spans of the "
                        "item's context, question and background are re-captured; default last,mean:context)")
    p.add_argument("--layer-stride", type=int, default=2, help="probe every n-th layer, and the last (default 2)")
    p.add_argument("--steps", default="probes,lens,patching,steering",
                   help="comma-separated steps (default probes,lens,patching,steering)")
    p.add_argument("--n-boot", type=int, default=500, help="bootstrap resamples for the CIs (default 500)")
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    p.add_argument("--lens-items", type=int, default=60, help="records read by the logit lens (default 60)")
    p.add_argument("--pairs", type=int, default=3, help="patching pairs per kind and dimension (default 3)")
    p.add_argument("--patch-positions", default="last,span:question",
                   help="single-token positions patched (default last,span:question)")
    p.add_argument("--steer-items", type=int, default=96, help="records re-scored per steering strength (default 96)")
    p.add_argument("--steer-layer", default="best",
                   help="'best' (the most accurate consistency probe at last) or a layer number")
    p.add_argument("--threads", type=bounded_int(1, None), default=None, help="torch CPU threads")
    p.set_defaults(func=run_representations_command)

    register_task_analyses(sub)


def _usage(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def show(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return 2

    return show


def run_representations_command(args: argparse.Namespace) -> int:
    from probe.studies.analyze import open_run
    from probe.runs.provenance import provenance
    from probe.studies.representations import Settings, run_representations

    if args.config is not None or args.run_dir is None:
        raise ProbeError("probe analyze representations reads a run: probe run configs/representations.yaml "
                         "--output RUN_DIR, then probe analyze representations RUN_DIR")
    split = lambda text: tuple(x.strip() for x in text.split(",") if x.strip())  # noqa: E731
    try:
        settings = Settings(positions=split(args.positions), layer_stride=args.layer_stride, n_splits=args.folds,
                            n_boot=args.n_boot, lens_items=args.lens_items, patch_pairs=args.pairs,
                            patch_positions=split(args.patch_positions), steer_items=args.steer_items,
                            steer_layer=args.steer_layer if args.steer_layer == "best" else int(args.steer_layer),
                            steps=split(args.steps))
    except ValueError as exc:
        raise ProbeError(f"probe analyze representations: {exc}") from None
    with open_run(args.run_dir, model=args.model, threads=args.threads) as run:
        out = run_representations(run, args.output or args.run_dir / "representations", settings,
                                  provenance=provenance)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    print(json.dumps({k: summary[k] for k in ("n_records", "timings_s")}, indent=2))
    return 0
