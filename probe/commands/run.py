"""`probe tasks` and `probe run TASK[,TASK...] | CONFIG.yaml`: any installed tasks, through the one runner.

``probe run hbb --model smollm2 --limit 16 --output out`` runs a task with its
default config; ``probe run bbq,crows_pairs --model smollm2,gemma3-270m`` runs every
task on every model (``OUTPUT/<task>/<model>``) and finishes with the combined
report (``OUTPUT/report.html``); ``probe run configs/hbb_quick.yaml`` runs the
config's ``task`` with its settings. A config's keys: ``task``; ``model`` (or
``models: [a, b]``); ``output``; run options (device, dtype, batch_size, ...);
every other key is a field of the task's config. Command-line options override
the config; ``--set key=value`` (repeatable, YAML values) sets any key.
lm-evaluation-harness spellings work too: ``--tasks``, ``--model_args
pretrained=NAME``, ``--output_path``, ``--log_samples``, ``--batch_size``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from probe.commands.common import SHARD_HELP, positive_int, positive_int_or_auto, shard_spec
from probe.errors import ProbeError, did_you_mean
from probe.models.builtins import DEFAULT_MODEL
# The config file's rules live below the CLI (experiments read configs too); re-exported for callers of this module.
from probe.runs.config import COMMAND_LINE_ONLY, RUN_LEVEL_KEYS, read_config, refuse_command_line_only
from probe.tasks import available, get

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.

__all__ = ["COMMAND_LINE_ONLY", "RUN_LEVEL_KEYS", "parse_sets", "read_config", "refuse_command_line_only"]


def register(groups: dict) -> None:
    t = groups[""].add_parser("tasks", help="list the installed tasks (benchmarks), one line each")
    t.add_argument("--verbose", "-v", action="store_true", help="also list each task's config keys and defaults")
    t.set_defaults(func=list_tasks)

    p = groups[""].add_parser(
        "run", help="run a task (probe tasks) or a YAML config naming its task",
        description=__doc__.split("\n\n")[1].replace("``", "'"),
    )
    p.add_argument("target", nargs="?", default=None,
                   help="a task name, several (TASK,TASK), or a YAML config file (see `probe tasks`)")
    p.add_argument("--tasks", dest="tasks", default=None, metavar="TASK[,TASK...]",
                   help="the tasks to run, comma-separated (instead of the positional name; lm-eval's spelling)")
    p.add_argument("--model", "--models", dest="model", default=None, metavar="MODEL[,MODEL...]",
                   help="built-in name, .gguf file, model directory or hub id; several comma-separated "
                   "(default: the config's model, else smollm2). lm-eval's '--model hf' is accepted with --model_args")
    p.add_argument("--model_args", "--model-args", dest="model_args", default=None, metavar="KEY=VALUE,...",
                   help="lm-eval style: pretrained=NAME (the model), dtype=..., trust_remote_code=True, "
                   "device=..., batch_size=...")
    p.add_argument("--limit", type=_limit, default=None, metavar="N|FRACTION",
                   help="score N items, or a fraction of them (0.01 = 1%%, rounded up, as lm-eval's --limit): a "
                   "stratified sample over the task's strata (categories, bias types, dimensions, benchmarks) with "
                   "whole units kept together; the run prints and summary.json records what it covered and left out")
    p.add_argument("--output", "--output_path", "--output-path", dest="output", type=Path, default=None,
                   help="run directory (default: the config's output, else runs/TASK_MODEL; with several tasks or "
                   "models, one directory each below it and the combined report); re-running resumes")
    tmpl = p.add_mutually_exclusive_group()
    tmpl.add_argument("--chat-template", "--apply_chat_template", dest="chat_template", action="store_true",
                      default=None, help="render prompts through the tokenizer's chat template (the tasks' default "
                      "when it has one)")
    tmpl.add_argument("--no-chat-template", dest="chat_template", action="store_false",
                      help="plain text prompts (base models)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="print the whole report (report.md), not only the headline, the warnings and the paths")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="set a task config field or run option (YAML value), e.g. --set threshold=10; repeatable")
    _add_runner_args(p.add_argument_group("model and runner (override the config)"))
    p.set_defaults(func=run)


def _add_runner_args(g: Any) -> None:
    """The run options of ``probe run``, each overriding the config's."""
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
    g.add_argument("--batch-size", "--batch_size", dest="batch_size", type=positive_int_or_auto, default=None,
                   help="most sequences per forward pass, or auto (default: the GPU's token budget decides; CPU 16)")
    g.add_argument("--token-budget", type=positive_int_or_auto, default=None,
                   help="most padded tokens per pass, or auto (default: from free memory and the model's shape; "
                        "CPU at most 8192)")
    g.add_argument("--chunk-size", "--flush-every", dest="chunk_size", type=positive_int, default=None,
                   help="requests per durable chunk (default 1024; see docs/tasks.md)")
    g.add_argument("--score-cache", default=None, metavar="PATH", help="SQLite score cache shared between runs")
    g.add_argument("--threads", type=positive_int, default=None,
                   help="torch CPU threads (default: torch's, one per core; fewer, with a note, when the CPU is busy)")
    g.add_argument("--no-progress", "--quiet", dest="progress", action="store_false", default=None,
                   help="no progress bars")
    g.add_argument("--shard", type=shard_spec, default=None, metavar="I/N", help=SHARD_HELP)
    g.add_argument("--agreement", dest="agreement_tokens", type=int, nargs="?", const=8, default=None, metavar="N",
                   help="greedy agreement: decode N tokens (default 8) after each label prompt and report how often "
                        "the label written is the score argmax (summary.json greedy_agreement)")
    g.add_argument("--capture", nargs="+", default=None, metavar="HOOK@POSITION",
                   help="record activations in the scoring passes, e.g. blocks.5.hook_resid_post@last "
                        "(positions: last, label, span:FIELD, mean:FIELD); stored in OUTPUT/activations keyed by "
                        "record id, resumed with the records; read with probe.activations.load(OUTPUT)")
    g.add_argument("--log-samples", "--log_samples", dest="log_samples", action="store_true", default=None,
                   help="also write OUTPUT/samples.jsonl: per request the exact text given to the tokenizer (after "
                        "the chat template), the scored options with every surface form summed, and any generated "
                        "chain (as lm-evaluation-harness's --log_samples; schema in docs/samples.md); resumed "
                        "like the records")
    g.add_argument("--backend", choices=("hf", "tl"), default=None,
                   help="hf: the Hugging Face module, plain torch hooks (default); tl: the same module wrapped by a "
                        "TransformerLens 4.x TransformerBridge, so --capture hooks are its own hook points "
                        "(e.g. blocks.3.hook_resid_post, blocks.3.ln1.hook_normalized); eager attention")


def _limit(text: str) -> int | float:
    """argparse type of ``--limit``: an item count or a fraction in (0, 1) (:func:`probe.runs.limit.check_limit`)."""
    # from its light module: probe.runs.task_run loads torch, 20-40 s of silence while the arguments are read
    from probe.runs.limit import check_limit

    try:
        return check_limit(text)
    except ProbeError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("limit must be", "expected")) from None


def list_tasks(args: argparse.Namespace) -> int:
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


def _model_args(text: str | None) -> dict[str, Any]:
    """lm-eval's ``--model_args pretrained=NAME,dtype=float32,...`` as a dict (YAML values)."""
    import yaml

    out: dict[str, Any] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ProbeError(f"--model_args {text!r}: expected KEY=VALUE[,KEY=VALUE...], e.g. pretrained=smollm2")
        out[key.strip()] = yaml.safe_load(value)
    return out


#: --model_args keys -> probe's run options (the rest are an error naming these)
MODEL_ARGS = {"pretrained": "model", "dtype": "dtype", "device": "device", "batch_size": "batch_size",
              "trust_remote_code": "trust_remote_code", "device_map": "device_map",
              "load_in_8bit": "load_in_8bit", "load_in_4bit": "load_in_4bit"}


def _split(text: str) -> list[str]:
    return [t.strip() for t in str(text).split(",") if t.strip()]


def run(args: argparse.Namespace) -> int:
    from probe.progress import stage

    with stage("probe: loading torch, transformers and the tasks", announce_after=2.0):  # 10-20 s on a busy CPU
        from probe.runs.multi import run_many, slug, task_configs
        from probe.runs.runner import options_from
        from probe.api import split_options

    values, source = _values(args)
    task_value = values.pop("task")
    task_names = [str(t) for t in task_value] if isinstance(task_value, list) else _split(str(task_value))

    for name in task_names:
        get(name)  # an unknown name fails here, with a did-you-mean, before any model loads
    if args.chat_template is not None:
        values["chat_template"] = args.chat_template
    names = _model_names(args, values, source) or [DEFAULT_MODEL]
    output = values.pop("output", None)
    run_values, task_values = split_options(values)
    configs = task_configs(task_names, task_values, source=source)
    options = options_from(run_values)
    base = args.output or (Path(output) if output else None)
    many = len(names) > 1 or len(task_names) > 1
    if base is None:
        base = Path("runs") / (f"{task_names[0]}_{slug(names[0])}" if not many else "_".join(task_names))
    done: list = []

    def report(evaluation: Any) -> None:
        done.append(evaluation)
        if not many and evaluation.output is not None:
            from probe.runs.results import print_run

            print_run(evaluation, args.verbose)
        also = ", samples.jsonl" if options.log_samples else ""
        print(f"wrote {evaluation.output}/records.jsonl{also}, summary.json, results.csv, report.md, report.html",
              file=sys.stderr)

    result = run_many(task_names, names, limit=args.limit, output=base, options=options, configs=configs,
                      on_run=report)
    if result.report is not None:
        _print_combined(done, result.report, args.verbose)
        print(f"wrote the combined report: {result.report}/report.html, report.md, results.csv", file=sys.stderr)
    return 0


def _values(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The run's settings, later ones overriding: the config file (or the task named), ``--set``, lm-eval's
    ``--model_args`` (its ``pretrained`` kept as ``_pretrained``), the command line's run options; and what
    to name them by in errors."""
    from probe.runs.runner import RUN_KEYS

    if args.target and args.tasks:
        raise ProbeError("name the task(s) once: positionally (probe run TASK,TASK) or with --tasks, not both")
    target = args.target or args.tasks
    if not target:
        raise ProbeError("name a task (probe run TASK), several (probe run TASK,TASK) or a YAML config; "
                         "`probe tasks` lists the tasks")
    # a task name is a task, also when a file of that name lies in the working directory
    is_config = target.endswith((".yaml", ".yml")) or (Path(target).is_file() and target not in available())
    values: dict[str, Any] = read_config(Path(target)) if is_config else {"task": target}
    source = target if is_config else f"task {target!r}"
    values.update(parse_sets(args.sets))
    margs = _model_args(args.model_args)
    bad = [k for k in margs if k not in MODEL_ARGS]
    if bad:
        raise ProbeError(f"--model_args: unknown key(s) {', '.join(bad)}"
                         + "".join(did_you_mean(k, MODEL_ARGS) for k in bad)
                         + f"; known: {', '.join(MODEL_ARGS)}")
    values["_pretrained"] = margs.pop("pretrained", None)
    values.update({MODEL_ARGS[k]: v for k, v in margs.items()})
    values.update({k: v for k, v in vars(args).items() if v is not None and k in RUN_KEYS})
    return values, source


def _model_names(args: argparse.Namespace, values: dict[str, Any], source: str) -> list[str] | None:
    """The models to run (popped from ``values``): ``--model`` (lm-eval's ``--model hf`` with ``pretrained``
    names none), ``--model_args pretrained=``, else the config's ``model`` or ``models``; None: the default."""
    pretrained = values.pop("_pretrained", None)
    models = values.pop("models", None)
    model = values.pop("model", None)
    if args.model and not (args.model in ("hf", "huggingface", "probe") and pretrained):
        models, model = _split(args.model), None
    if pretrained:
        models, model = [str(pretrained)], None
    if models is not None and model is not None:
        raise ProbeError(f"{source}: give `model` or `models`, not both")
    if models is not None and (not isinstance(models, list) or not models):
        raise ProbeError(f"{source}: `models` must be a non-empty list")
    if models is not None:
        return [str(m) for m in models]
    return [str(model)] if model else None


def _print_combined(runs: list, where: Path, verbose: bool) -> None:
    """Many runs on the terminal: the combined ``report.md`` (``--verbose``), else one headline of every run,
    each warning once with the runs it holds for, and the report's paths."""
    from probe.reports.terminal import terminal_text
    from probe.runs.results import grouped_warnings, headline_table, run_headline

    if verbose:
        print((where / "report.md").read_text(encoding="utf-8"))
        return
    rows: list = []
    named: list = []
    for e in runs:
        mine, warnings = run_headline(get(e.task), e.config, e.summary)
        rows += mine
        named += [(f"{e.task}, {e.summary.get('model', '')}", w) for w in warnings]
    print(terminal_text(headline_table(rows), grouped_warnings(named), [str(where / "report.html"),
                                                                         str(where / "report.md")]) + "\n")
