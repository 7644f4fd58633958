"""`probe tasks` and `probe run TASK | CONFIG.yaml`: any installed task, through the one runner.

``probe run hbb --model smollm2 --limit 16 --output out`` runs a task with its
default config; ``probe run configs/hbb_quick.yaml`` runs the config's ``task`` with
its settings. A config's keys: ``task``; ``model`` (or ``models: [a, b]``: each
model runs into ``OUTPUT/<model>``); ``output``; run options (device, dtype,
batch_size, ...); every other key is a field of the task's config. Command-line
options override the config; ``--set key=value`` (repeatable, YAML values)
sets any key. Works from any directory after a plain ``pip install``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from probe.commands.common import SHARD_HELP, positive_int_or_auto, shard_spec
from probe.errors import ProbeError

#: config keys that are neither run options nor task fields
RUN_LEVEL_KEYS = ("task", "model", "models", "output")

#: keys only the command line (or the Python call) may set: a config file or --set is data, and data
#: must not decide to run code shipped with a model folder
COMMAND_LINE_ONLY = ("trust_remote_code", "allow_pickle_weights")


def refuse_command_line_only(values: dict[str, Any], where: str) -> None:
    """A :class:`ProbeError` when ``values`` (a config or ``--set``) holds a key only the command line may set."""
    for key in COMMAND_LINE_ONLY:
        if key in values:
            flag = "--" + key.replace("_", "-")
            raise ProbeError(f"{where}: {key} cannot be set here (running code shipped with a model folder must be "
                             f"asked for on the command line); remove it and pass {flag} to `probe run` if you trust "
                             "that code")


def register(groups: dict) -> None:
    t = groups[""].add_parser("tasks", help="list the installed tasks (benchmarks), one line each")
    t.add_argument("--verbose", "-v", action="store_true", help="also list each task's config keys and defaults")
    t.set_defaults(func=list_tasks)

    p = groups[""].add_parser(
        "run", help="run a task (probe tasks) or a YAML config naming its task",
        description=__doc__.split("\n\n")[1].replace("``", "'"),
    )
    p.add_argument("target", help="a task name (see `probe tasks`) or a YAML config file")
    p.add_argument("--model", default=None, help="built-in name, .gguf file, model directory or hub id "
                   "(default: the config's model, else smollm2)")
    p.add_argument("--limit", type=_positive, default=None, help="score only the first N items of the task")
    p.add_argument("--output", type=Path, default=None,
                   help="run directory (default: the config's output, else runs/TASK_MODEL); re-running resumes")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="set a task config field or run option (YAML value), e.g. --set threshold=10; repeatable")
    g = p.add_argument_group("model and runner (override the config)")
    g.add_argument("--device", default=None,
                   help="auto, cpu, cuda, cuda:N or mps (default: auto = the GPU when one is visible, else the CPU)")
    g.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16", "auto"],
                   help="default: auto = bfloat16 on a GPU that supports it, else float32")
    g.add_argument("--load-in-8bit", action="store_true", default=None, help="bitsandbytes 8-bit (GPU)")
    g.add_argument("--load-in-4bit", action="store_true", default=None, help="bitsandbytes 4-bit (GPU)")
    g.add_argument("--device-map", default=None, help="accelerate device map, e.g. auto")
    g.add_argument("--trust-remote-code", action="store_true", default=None,
                   help="run code shipped with the model folder (command line only: never from a config or --set)")
    g.add_argument("--allow-pickle-weights", action="store_true", default=None,
                   help="read pickle weights (pytorch_model.bin) when a model has no safetensors (command line only)")
    g.add_argument("--batch-size", type=positive_int_or_auto, default=None,
                   help="most sequences per forward pass, or auto (default: the GPU's token budget decides; CPU 16)")
    g.add_argument("--token-budget", type=positive_int_or_auto, default=None,
                   help="most padded tokens per pass, or auto (default: from free memory and the model's shape; "
                        "CPU at most 8192)")
    g.add_argument("--chunk-size", type=_positive, default=None,
                   help="requests per durable chunk (default 1024; see docs/tasks.md)")
    g.add_argument("--score-cache", default=None, metavar="PATH", help="SQLite score cache shared between runs")
    g.add_argument("--threads", type=_positive, default=None, help="torch CPU threads")
    g.add_argument("--no-progress", dest="progress", action="store_false", default=None)
    g.add_argument("--shard", type=shard_spec, default=None, metavar="I/N", help=SHARD_HELP)
    g.add_argument("--agreement", dest="agreement_tokens", type=int, nargs="?", const=8, default=None, metavar="N",
                   help="greedy agreement: decode N tokens (default 8) after each label prompt and report how often "
                        "the label written is the score argmax (summary.json greedy_agreement)")
    g.add_argument("--capture", nargs="+", default=None, metavar="HOOK@POSITION",
                   help="record activations in the scoring passes, e.g. blocks.5.hook_resid_post@last "
                        "(positions: last, label, span:FIELD, mean:FIELD); stored in OUTPUT/activations keyed by "
                        "record id, resumed with the records; read with probe.activations.load(OUTPUT)")
    g.add_argument("--log-samples", dest="log_samples", action="store_true", default=None,
                   help="also write OUTPUT/samples.jsonl: per request the exact text given to the tokenizer (after "
                        "the chat template), the scored options with every surface form summed, and any generated "
                        "chain (as lm-evaluation-harness's --log_samples; schema in docs/samples.md); resumed "
                        "like the records")
    g.add_argument("--backend", choices=("hf", "tl"), default=None,
                   help="hf: the Hugging Face module, plain torch hooks (default); tl: the same module wrapped by a "
                        "TransformerLens 4.x TransformerBridge, so --capture hooks are its own hook points "
                        "(e.g. blocks.3.hook_resid_post, blocks.3.ln1.hook_normalized); eager attention")
    p.set_defaults(func=run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def list_tasks(args: argparse.Namespace) -> int:
    import dataclasses

    from probe.tasks import available, get

    for name in available():
        try:
            task = get(name)
        except Exception as exc:  # a broken third-party task must not hide the others
            print(f"{name:14s} (cannot be loaded: {exc})")
            continue
        print(f"{name:14s} {task.description}")
        if args.verbose:
            for f in dataclasses.fields(task.Config):
                default = f.default if f.default is not dataclasses.MISSING else (
                    f.default_factory() if f.default_factory is not dataclasses.MISSING else "(required)")
                print(f"{'':16s}{f.name} = {default!r}")
    return 0


def parse_sets(sets: list[str]) -> dict[str, Any]:
    """``["a=1", "b=[x, y]"]`` -> ``{"a": 1, "b": ["x", "y"]}`` (values read as YAML)."""
    import yaml

    out: dict[str, Any] = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ProbeError(f"--set {item!r}: expected KEY=VALUE")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError as exc:
            raise ProbeError(f"--set {item!r}: the value is not valid YAML ({exc})") from None
    refuse_command_line_only(out, "--set")
    return out


def read_config(path: Path) -> dict[str, Any]:
    import yaml

    if not path.is_file():
        raise ProbeError(f"config not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8-sig")) or {}
    except yaml.YAMLError as exc:
        raise ProbeError(f"{path}: not valid YAML ({exc})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProbeError(f"{path}: cannot read the config ({exc})") from None
    if not isinstance(data, dict):
        raise ProbeError(f"{path}: a config is a mapping of keys to values, got {type(data).__name__}")
    refuse_command_line_only(data, str(path))
    if "task" not in data:
        raise ProbeError(f"{path}: the config names no task; add e.g. `task: hbb` (tasks: `probe tasks`)")
    return data


def run(args: argparse.Namespace) -> int:
    from probe.api import split_options
    from probe.models.builtins import DEFAULT_MODEL
    from probe.runs.runner import options_from
    from probe.runs.shard_set import ShardDone
    from probe.runs.task_run import run_task
    from probe.tasks import get

    target = args.target
    from probe.tasks import available

    # a task name is a task, also when a file of that name lies in the working directory
    is_config = target.endswith((".yaml", ".yml")) or (Path(target).is_file() and target not in available())
    values: dict[str, Any] = read_config(Path(target)) if is_config else {"task": target}
    source = target if is_config else f"task {target!r}"
    values.update(parse_sets(args.sets))
    cli = {k: v for k, v in vars(args).items() if v is not None and k in (
        "device", "dtype", "load_in_8bit", "load_in_4bit", "device_map", "trust_remote_code", "batch_size",
        "token_budget", "chunk_size", "score_cache", "threads", "progress", "agreement_tokens", "capture",
        "backend", "log_samples", "allow_pickle_weights", "shard")}
    values.update(cli)
    task = get(str(values.pop("task")))
    models = values.pop("models", None)
    model = values.pop("model", None)
    output = values.pop("output", None)
    if args.model:
        models, model = None, args.model
    if models is not None and model is not None:
        raise ProbeError(f"{source}: give `model` or `models`, not both")
    if models is not None and (not isinstance(models, list) or not models):
        raise ProbeError(f"{source}: `models` must be a non-empty list")
    run_values, task_values = split_options(values)
    config = task.make_config(task_values, source=source)
    options = options_from(run_values)
    names = [str(m) for m in models] if models is not None else [str(model or DEFAULT_MODEL)]
    base = args.output or (Path(output) if output else None)
    for name in names:
        if base is None:
            out = Path("runs") / f"{task.name}_{_slug(name)}"
        else:
            out = base / _slug(name) if len(names) > 1 else base
        try:
            evaluation = run_task(task, config, name, output=out, limit=args.limit, options=options)
        except ShardDone as done:  # this model's shard is written; the next model's shard follows
            print(f"probe: {done}", file=sys.stderr)
            continue
        if evaluation.output is not None and (evaluation.output / "report.md").is_file():
            print((evaluation.output / "report.md").read_text(encoding="utf-8"))
        also = ", samples.jsonl" if options.log_samples else ""
        print(f"wrote {out}/records.jsonl{also}, summary.json, provenance.json", file=sys.stderr)
    return 0


def _slug(name: str) -> str:
    """A model name or path as a directory name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", Path(name).name if "/" in name and Path(name).exists() else name).strip("_")
