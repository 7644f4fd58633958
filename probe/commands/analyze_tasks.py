"""``probe analyze steer|probes|lens|patch``: analyses on a task run (:mod:`probe.studies.analyze`)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from probe.commands.common import bounded_int
from probe.commands.run import parse_sets
from probe.errors import ProbeError
from probe.models.builtins import DEFAULT_MODEL

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.

INPUT = ("RUN_DIR: a run directory of `probe run TASK --output RUN_DIR [--capture ...]` (its model, config and "
         "batching are reused; activations it did not capture are captured by re-scoring). Or, instead of RUN_DIR, "
         "--task TASK [--model M --limit N --set KEY=VALUE]: the task is scored first, through the Runner.")


def register_task_analyses(sub: Any) -> None:
    s = _parser(sub, "steer", "dose-response: the task's bias metric as a function of the steering strength",
                "Adds strength x direction to blocks.L.hook_resid_post at every position and re-scores the "
                "task's requests at each strength; the task's own aggregate gives its metric and clustered CI. "
                "Writes steering.csv (strength, metric, ci_low, ci_high, n), steering_all.csv, steering.png, "
                "steering.json.")
    s.add_argument("--layer", type=int, default=None,
                   help="older spelling of --capture blocks.L.hook_resid_post@POSITION: the block steered (and read)")
    s.add_argument("--direction", required=True, metavar="METHOD:FIELD=A,B",
                   help="mean-diff:FIELD=A,B (mean activation of records with FIELD=A minus FIELD=B) or "
                        "probe:FIELD=A,B (a linear probe's weight); strength 1 = the distance between the means")
    s.add_argument("--strengths", type=_floats, default=[-4.0, -2.0, 0.0, 2.0, 4.0], metavar="S1,S2,...",
                   help="comma-separated strengths (default -4,-2,0,2,4)")
    s.add_argument("--metric", default=None, help="one of the task's bias metrics (default: its first; "
                   "an unknown name lists them)")
    s.set_defaults(func=_steer)

    p = _parser(sub, "probes", "per-layer linear probes for a record field, folds grouped by the task's unit",
                "Cross-validated (GroupKFold over the task's cluster unit: a unit is never split), with a control "
                "task and a shuffled-label baseline. Writes probes.csv and probe_TARGET.png.")
    p.add_argument("--target", required=True, help="record field to predict (e.g. context_kind, "
                   "context_condition, question_polarity)")
    p.add_argument("--layers", type=_ints, default=None, metavar="L1,L2,...",
                   help="older spelling of --capture blocks.L1,L2.hook_resid_post@POSITION (default: every layer)")
    p.add_argument("--control", default=None, metavar="FIELD",
                   help="control task key: each value gets a random class (default: the cluster unit)")
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    p.add_argument("--shuffles", type=int, default=200,
                   help="shuffled-label baselines: the permutation p-value can go no lower than 1/(N+1) (default 200)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for the CIs (default 1000)")
    p.set_defaults(func=_probes)

    p = _parser(sub, "lens", "logit lens over the option labels at the scored position, per layer",
                "Each layer's residual at the last prompt token through the final norm and unembedding; the "
                "labels' probabilities. Writes lens.csv, lens.npz and lens.png.")
    p.add_argument("--layers", type=_ints, default=None, metavar="L1,L2,...",
                   help="older spelling of --capture blocks.L1,L2.hook_resid_post@POSITION (default: every layer)")
    p.set_defaults(func=_lens)

    p = _parser(sub, "patch", "patch the residual between the task's record pairs, per layer",
                "Pairs come from the task (its patch_pairs: e.g. the two name orders of an item, explicit->implicit "
                "framings, question 1 -> question 2 of a pair). Writes patch.csv (per pair and layer: change "
                "of each option's probability) and patch_layers.csv (per kind and layer, with CIs).")
    p.add_argument("--layers", type=_ints, default=None, metavar="L1,L2,...",
                   help="older spelling of --capture blocks.L1,L2.hook_resid_post@POSITION (default: every layer)")
    p.add_argument("--kinds", default=None, help="comma-separated pair kinds (default: all the task has)")
    p.add_argument("--max-pairs", type=int, default=20, help="pairs per kind (default 20)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for the CIs (default 1000)")
    p.set_defaults(func=_patch)


def _parser(sub: Any, name: str, help: str, description: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=f"{description} {INPUT}")
    # `--strengths -4,-2,0` is a value, not an option: let argparse read such lists as negative numbers
    p._negative_number_matcher = re.compile(r"^-\d[\d.,eE+-]*$")
    p.add_argument("run_dir", nargs="?", type=Path, default=None, metavar="RUN_DIR")
    p.add_argument("--task", default=None, help="score this task first instead of reading RUN_DIR")
    p.add_argument("--model", default=None, help="model (default: the run's own; with --task: smollm2)")
    p.add_argument("--limit", type=int, default=None, help="with --task: N items, a stratified sample (as probe run --limit)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="with --task: a task config value (YAML)")
    p.add_argument("--capture", nargs="+", default=None, metavar="HOOK@POSITION",
                   help="the activations read, in probe run --capture's syntax: blocks.L.hook_resid_post@POSITION, "
                        "L = N, a comma list or * (e.g. 'blocks.*.hook_resid_post@last'; default: every layer at "
                        "last; steer: one layer)")
    p.add_argument("--position", default=None,
                   help="older spelling: the POSITION of --capture (default: last prompt token)")
    p.add_argument("--output", type=Path, required=True, help="directory for the analysis outputs")
    p.add_argument("--threads", type=bounded_int(1, None), default=None, help="torch CPU threads")
    p.add_argument("--no-progress", "--quiet", dest="progress", action="store_false", default=True,
                   help="no progress bar")
    return p


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _open(args: argparse.Namespace) -> Any:
    from probe.studies import analyze

    if (args.run_dir is None) == (args.task is None):
        raise ProbeError("give either RUN_DIR or --task TASK")
    if args.run_dir is not None:
        if args.limit is not None or args.sets:
            raise ProbeError("--limit and --set go with --task; a run directory has its own")
        return analyze.open_run(args.run_dir, model=args.model, threads=args.threads)
    from probe.runs.runner import RunOptions

    return analyze.run_for(args.task, args.model or DEFAULT_MODEL, parse_sets(args.sets), limit=args.limit,
                           options=RunOptions(progress=False, threads=args.threads))


def _selection(args: argparse.Namespace, run: Any, one: bool = False) -> tuple[list[int] | None, str]:
    """The layers and position the analysis reads: from ``--capture`` (the one syntax), else from the older
    ``--layers`` / ``--layer`` / ``--position``. ``one``: exactly one layer (steering)."""
    from probe.activations.scoring_capture import expand_keys
    from probe.studies.analyze.run import n_layers

    layers = [args.layer] if getattr(args, "layer", None) is not None else getattr(args, "layers", None)
    if args.capture:
        if layers is not None or args.position is not None:
            raise ProbeError("give --capture HOOK@POSITION, or the older --layer(s)/--position, not both")
        try:
            keys = expand_keys(args.capture, n_layers(run))
        except ValueError as exc:
            raise ProbeError(f"--capture: {exc}") from None
        parsed = [re.fullmatch(r"blocks\.(\d+)\.hook_resid_post@(.+)", k) for k in keys]
        bad = [k for k, m in zip(keys, parsed) if m is None]
        if bad:
            raise ProbeError(f"--capture {bad[0]!r}: these analyses read the residual stream, "
                             "blocks.L.hook_resid_post@POSITION")
        positions = {m.group(2) for m in parsed}
        if len(positions) > 1:
            raise ProbeError(f"--capture: one position for all layers, got {sorted(positions)}")
        layers, position = [int(m.group(1)) for m in parsed], positions.pop()
    else:
        position = args.position or "last"
    if one and (layers is None or len(layers) != 1):
        raise ProbeError("steering reads and steers one layer: --capture blocks.L.hook_resid_post@POSITION "
                         "(or --layer L)")
    return layers, position


def _steer(args: argparse.Namespace) -> int:
    from probe.studies import analyze

    with _open(args) as run:
        layers, position = _selection(args, run, one=True)
        table = analyze.steer(run, layers[0], args.direction, args.strengths, metric=args.metric,
                              position=position, output=args.output, progress=args.progress)
    cols = ["strength", "metric", "ci_low", "ci_high", "n"]
    print(table[cols].to_string(index=False))
    print(f"wrote {args.output / 'steering.csv'}, steering.png", file=sys.stderr)
    return 0


def _probes(args: argparse.Namespace) -> int:
    from probe.studies import analyze

    with _open(args) as run:
        layers, position = _selection(args, run)
        table = analyze.probes(run, args.target, layers, position=position, control=args.control,
                               n_splits=args.folds, n_shuffles=args.shuffles, n_boot=args.n_boot,
                               output=args.output)
    cols = ["layer", "accuracy", "ci_low", "ci_high", "majority", "control_accuracy", "shuffled_accuracy", "n"]
    print(table[[c for c in cols if c in table]].to_string(index=False))
    print(f"wrote {args.output / 'probes.csv'}", file=sys.stderr)
    return 0


def _lens(args: argparse.Namespace) -> int:
    from probe.studies import analyze

    with _open(args) as run:
        layers, position = _selection(args, run)
        if position != "last":
            raise ProbeError("the logit lens reads the scored position (last); another position does not apply")
        table = analyze.lens(run, layers, output=args.output)
    wide = table.pivot(index="layer", columns="label", values="prob")
    print(wide.to_string())
    print(f"wrote {args.output / 'lens.csv'}, lens.npz, lens.png", file=sys.stderr)
    return 0


def _patch(args: argparse.Namespace) -> int:
    from probe.studies import analyze

    kinds = [k.strip() for k in args.kinds.split(",")] if args.kinds else None
    with _open(args) as run:
        layers, position = _selection(args, run)
        _, summary = analyze.patch(run, layers, kinds, position=position, max_pairs=args.max_pairs,
                                   n_boot=args.n_boot, output=args.output, progress=args.progress)
    print(summary.to_string(index=False))
    print(f"wrote {args.output / 'patch.csv'}, patch_layers.csv", file=sys.stderr)
    return 0
