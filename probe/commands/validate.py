"""`probe validate sampling TASK`: the exact paper-equivalent estimate against the paper's sampling procedure.

For a stratified sample of TASK's prompts, samples K generations per prompt
with transformers' own generate at the paper's sampler as its authors ran it
(temperature, top-p, top-k, repetition penalty) with fixed seeds, parses them
with the paper's extraction rule, and compares per prompt and in aggregate
with the task's exact paper-equivalent estimate, run with the published
configuration (probe.studies.sampling_check). The verdict: every metric's
sampled value inside the range the exact side predicts on the same prompts.
Tasks: those that declare the paper's procedure (hbb, implicitbbq, cmp_iso).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from probe.commands.common import add_model_args, add_threads_arg, bounded_int, run_options
from probe.io import check_owned_dir, json_has, write_atomic, write_json_atomic
from probe.tasks import modules_beside

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.

#: the largest sample the check takes (prompts, and generations per prompt): K x N generations are run, and a
#: larger number is more often a typo than a plan
MAX_PROMPTS = 10_000
MAX_K = 10_000


def register(groups: dict) -> None:
    v = groups[""].add_parser("validate", help="check probe's exact estimates against the papers' procedures")
    sub = v.add_subparsers(dest="validate_command", metavar="CHECK")
    v.set_defaults(func=lambda _a: (v.print_help(sys.stderr), 2)[1])
    p = sub.add_parser("sampling", help="sample K generations per prompt at the paper's settings, parse them with "
                       "the paper's rule, compare with the exact paper-equivalent estimate",
                       description=__doc__.split("\n\n")[1])
    # run_check checks the name (each task declares its own check; importing every task to list them here
    # would slow down every `probe` command); the metavar shows the tasks with a paper_check module

    p.add_argument("task", metavar="{" + ",".join(modules_beside("paper_check")) + "}", help="the paper's task")
    p.add_argument("--n-prompts", type=bounded_int(1, MAX_PROMPTS), default=100,
                   help=f"prompts in the stratified sample (about; default 100, at most {MAX_PROMPTS:,})")
    p.add_argument("--k", type=bounded_int(1, MAX_K), default=20,
                   help=f"generations sampled per prompt (default 20, at most {MAX_K:,})")
    p.add_argument("--seed", type=bounded_int(0, 2**32 - 1), default=0,
                   help="seed of the sample, the generations and the bootstrap (0 to 2**32 - 1; default 0)")
    p.add_argument("--max-new-tokens", type=bounded_int(1, None), default=None,
                   help="the answer length both sides read: the generation budget, and the exact side's parse "
                   "budget (default: the published estimate's, the task config's parse_max_new_tokens or, where "
                   "its hybrid tail reads further, the tail's; the report states it)")
    p.add_argument("--gen-batch-size", type=bounded_int(1, None), default=32,
                   help="unused: each prompt's K samples are one generate call (kept for old command lines)")
    p.add_argument("--prompts-per-call", type=bounded_int(1, MAX_PROMPTS), default=1,
                   help="prompts sharing one generate call on the sampled side (default 1: each prompt's samples "
                   "depend on it alone). On a GPU a call's rows cost about as much as one, so long answers need "
                   "more (e.g. 64 for 2048-token answers); the samples are as random, but not the same ones")
    p.add_argument("--n-boot", type=bounded_int(1, None), default=1000,
                   help="bootstrap draws for the sampled 95%% interval (default 1000)")
    add_threads_arg(p)
    p.add_argument("--output", "-o", type=Path, required=True,
                   help="directory: check.json (everything, generations included), prompts.csv, report.md")
    add_model_args(p)
    p.set_defaults(func=run)


#: the files the check writes into ``--output``
CHECK_FILES = ("check.json", "prompts.csv", "report.md")


def check_output_dir(out: Path) -> None:
    """``--output`` can take the check (before the model loads): absent, or a directory holding none of its files
    or an earlier check's; no file or link at it or at its files, no file above it, nothing under /proc, /sys, /dev."""

    check_owned_dir(out, CHECK_FILES, lambda d: json_has(d / "check.json", "task", "settings", "prompts", "aggregate"),
                    "the output of an earlier probe validate sampling")


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from probe.runs.runner import Runner, load
    from probe.studies.sampling_check import paper_check_of, report_markdown, run_check

    paper_check_of(args.task)  # an unknown task fails before the model loads
    options = dataclasses.replace(run_options(args), progress=False)  # every option checked before the model loads
    check_output_dir(args.output)
    runner = Runner(load(args.model, options), options)
    check = run_check(args.task, runner, n_prompts=args.n_prompts, k=args.k, seed=args.seed,
                      max_new_tokens=args.max_new_tokens, batch_size=args.gen_batch_size, n_boot=args.n_boot,
                      prompts_per_call=args.prompts_per_call)
    check.model = str(args.model)
    out = args.output
    check_output_dir(out)  # again: the folder may have changed during the check
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "check.json", check.to_dict())
    cols = ["id", "unit", "accepted_share", "counted_share", "exact_counted_share", "accepted_not_counted",
            "counted_not_accepted", "abs_delta", "noise_delta", "sampled_probs", "exact_probs"]
    write_atomic(out / "prompts.csv", pd.DataFrame([{c: r[c] for c in cols} for r in check.prompts]).to_csv(index=False))
    md = report_markdown(check)
    write_atomic(out / "report.md", md)
    print(md)
    return 0
