"""``probe analyze ANALYSIS``: analyses of a model's internals (a subcommand group).

``probe analyze representations --config configs/representations.yaml`` runs
the representations study (probes, logit lens, patching, steering on an
ImplicitBBQ sample; :mod:`probe.analysis.representations`). ``--model`` and
``--output`` override the config's ``model`` and ``output_dir``.

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
from typing import Callable


def register(groups: dict) -> None:
    analyze = groups[""].add_parser("analyze", help="analyses of a model's internals (representations, ...)",
                                    description=__doc__.splitlines()[0].replace("``", "'"))
    sub = analyze.add_subparsers(dest="analysis", metavar="ANALYSIS")
    analyze.set_defaults(func=_usage(analyze))
    groups["analyze"] = sub  # later command modules may add `probe analyze X` here

    p = sub.add_parser(
        "representations", help="probes, logit lens, patching and steering on an ImplicitBBQ sample",
        description="Where does a model turn an implicit cue into a group identity and a stereotyped answer? "
                    "Writes items, activations, probes.csv, transfer.csv, plots, patching.npz, steering.csv/.md, "
                    "summary.json and provenance.json into the output directory (re-running reuses the items "
                    "and the activation store).")
    p.add_argument("--config", default="configs/representations.yaml",
                   help="YAML config (keys: see probe.analysis.representations.RepresentationsConfig)")
    p.add_argument("--model", default=None, help="built-in name, .gguf file, model directory or hub id "
                   "(default: the config's model)")
    p.add_argument("--output", default=None, help="output directory (default: the config's output_dir)")
    p.set_defaults(func=run_representations_command)
    from probe.commands.analyze_tasks import register_task_analyses

    register_task_analyses(sub)


def _usage(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def show(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return 2

    return show


def run_representations_command(args: argparse.Namespace) -> int:
    from probe.analysis.representations import load_config, run_representations
    from probe.runs.provenance import provenance

    cfg = load_config(args.config, {"model": args.model, "output_dir": args.output})
    out = run_representations(cfg, provenance=provenance)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    print(json.dumps({k: summary[k] for k in ("n_items", "timings_s")}, indent=2))
    return 0
