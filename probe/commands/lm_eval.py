"""`probe lm-eval`: lm-evaluation-harness tasks, probe's Scorer as the model.

The arguments are lm-eval's own (``lm-eval run``: ``--tasks``, ``--limit``,
``--num_fewshot``, ``--include_path``, ``--output_path``, ``--log_samples``,
``--model_args``, ...), parsed by lm-eval's parser, with one change: ``--model``
names the model probe loads (a built-in name, a ``.gguf`` file, a model
directory, a hub id), not an lm-eval backend; the backend is always
``probe`` (:class:`probe.integrations.lm_eval.ProbeLM`). Results are lm-eval's
results JSON, written by lm-eval under ``--output_path``. ``docs/lm_eval.md``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
from pathlib import Path
from typing import Any

from probe.errors import ProbeError
from probe.io import check_links, check_output
from probe.models import DEFAULT_MODEL


# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.

HELP = "run lm-evaluation-harness tasks with probe's scorer as the model (needs the lm-eval extra)"
USAGE = ("probe lm-eval --model MODEL --tasks TASK [TASK ...] [--limit N] [--include_path DIR] "
         "[--output_path DIR] [--model_args score_cache=PATH ...] [any `lm-eval run` option]")
DESCRIPTION = (
    "Evaluate MODEL (a built-in name such as smollm2, a .gguf file, a model directory or a hub id) on lm-eval tasks. "
    "Log-likelihoods come from probe's Scorer (one prefix tree over all requests: shared prompt prefixes run once) "
    "and equal lm-eval's `--model hf` on the same tokens; generation is lm-eval's Hugging Face loop. "
    "Every other option is lm-eval's own (`lm-eval run --help`); probe's model options go in --model_args: "
    "device, dtype, score_cache, score_batch_size, token_budget, load_in_8bit, load_in_4bit, device_map, "
    "trust_remote_code. Offline use: HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 and local task files (docs/lm_eval.md)."
)


class _AsProbeCommand:
    """Hands lm-eval's `run` parser to probe's command list under the name `lm-eval`."""

    def __init__(self, subparsers: Any) -> None:
        self.subparsers = subparsers

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs.update(help=HELP, usage=USAGE, description=DESCRIPTION, epilog=None)
        return self.subparsers.add_parser("lm-eval", **kwargs)


def register(groups: dict) -> None:
    top = groups[""]
    try:
        from lm_eval._cli.run import Run
    except ImportError:
        # without the extra the command still exists and says how to get it; '+' as the option prefix
        # lets it take any lm-eval arguments without argparse rejecting them first
        p = top.add_parser("lm-eval", help=HELP + " [not installed]", prefix_chars="+", add_help=False)
        p.add_argument("lm_eval_args", nargs="*")
        p.set_defaults(func=_not_installed)
        return
    parser = Run(_AsProbeCommand(top))._parser
    for action in parser._actions:  # lm-eval's --model picks a backend; here it names the model probe loads
        if action.dest == "model":
            action.help = "model probe loads: built-in name (smollm2, gemma3-270m), .gguf file, model directory, hub id"
        elif action.dest == "device":
            action.help = "device for the model (default: auto = cuda when visible, else cpu)"
    parser.set_defaults(func=run_lm_eval)


def _not_installed(args: argparse.Namespace) -> int:
    try:
        found = f"lm-eval {importlib.metadata.version('lm_eval')} is installed, without the `lm_eval._cli` parser"
    except importlib.metadata.PackageNotFoundError:
        found = "lm-eval is not installed"
    raise ProbeError(f"`probe lm-eval` needs lm-evaluation-harness >= 0.4.13, < 0.5 ({found}): "
                     "pip install 'probe[lm-eval]'")


def lm_eval_namespace(args: argparse.Namespace) -> argparse.Namespace:
    """lm-eval's arguments with the backend set to ``probe`` and ``--model`` moved to ``pretrained``."""

    model_args = dict(getattr(args, "model_args", None) or {})
    name = args.model or model_args.get("pretrained") or DEFAULT_MODEL
    if "pretrained" in model_args and str(model_args["pretrained"]) != str(name):
        raise ProbeError(f"--model {name!r} and --model_args pretrained={model_args['pretrained']!r} disagree; give one")
    model_args["pretrained"] = name
    check_output_path(getattr(args, "output_path", None))
    args.model = "probe"
    args.model_args = model_args
    if not getattr(args, "device", None):
        args.device = "auto"  # lm-eval's default is cuda:0, which fails on a machine without a GPU
    return args


def check_output_path(path: Any) -> None:
    """lm-eval's ``--output_path``, before the model loads: no link at it or inside it (lm-eval would write
    through one), nothing under /proc, /sys or /dev; a ``.json`` path is a file, anything else a folder."""
    if not path:
        return

    path = Path(path)
    folder = path.suffix != ".json" or path.is_dir()
    check_output(path, folder=folder)
    if folder:
        check_links(path, recursive=True)


def run_lm_eval(args: argparse.Namespace) -> int:
    from lm_eval._cli.run import Run
    from lm_eval.utils import setup_logging

    import probe.integrations.lm_eval as backend

    backend.register()
    setup_logging(getattr(args, "verbosity", None) or "INFO")
    Run._execute(lm_eval_namespace(args))
    return 0
