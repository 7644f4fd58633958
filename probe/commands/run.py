"""`probe run CONFIG.yaml`: run any experiment from its YAML config.

The experiment is named by ``--experiment`` or inferred from the config's file
name (``configs/hbb_quick.yaml`` -> ``hbb``). Experiments live in the
repository's ``experiments/`` package (thin scripts: a config in, the runner and
reports out); the command finds it beside the config's ``configs/`` directory
or in the current directory, and passes the config and any extra arguments on.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from probe.errors import ProbeError

EXPERIMENTS = ("implicitbbq", "hbb", "crows_pairs", "cmp_iso", "representations")


def register(groups: dict) -> None:
    p = groups[""].add_parser("run", help="run an experiment from a YAML config (configs/*.yaml)")
    p.add_argument("config", type=Path)
    p.add_argument("--experiment", choices=EXPERIMENTS, default=None,
                   help="which experiment (default: inferred from the config file name)")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="further arguments for the experiment")
    p.set_defaults(func=run)


def infer_experiment(config: Path) -> str:
    stem = config.stem
    for name in sorted(EXPERIMENTS, key=len, reverse=True):
        if stem == name or stem.startswith(name + "_"):
            return name
    raise ProbeError(f"cannot tell the experiment from {config.name!r}; pass --experiment ({', '.join(EXPERIMENTS)})")


def run(args: argparse.Namespace) -> int:
    if not args.config.is_file():
        raise ProbeError(f"config not found: {args.config}")
    name = args.experiment or infer_experiment(args.config)
    for root in (args.config.resolve().parent.parent, Path.cwd()):
        if (root / "experiments" / f"{name}.py").is_file():
            if str(root) not in sys.path:
                sys.path.insert(0, str(root))
            break
    else:
        raise ProbeError(f"experiments/{name}.py not found next to {args.config.parent} or in {Path.cwd()}")
    module = importlib.import_module(f"experiments.{name}")
    return int(module.main(["--config", str(args.config), *args.extra]) or 0)
