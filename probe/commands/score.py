"""`probe score` and `probe perplexity`."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from probe.commands.common import (add_input_limit_args, add_model_args, add_prompt_args, add_sampling_args,
                                   add_shard_arg, add_threads_arg, input_limits, run_options)
from probe.errors import InputError, ProbeError
from probe.io import (OutputLock, check_links, check_lock_free, check_locks, check_output, check_records, read_records,
    write_json_atomic)
from probe.prompts.items import PromptStyle, read_perplexity_items, read_score_items

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.


def register(groups: dict) -> None:
    p = groups[""].add_parser(
        "score",
        help="score label / continuation items by exact log-probabilities",
        description="Each input line: {id, prompt | messages, options, kind: label|continuation, group?}. "
        "Output lines (one record each, docs/tasks.md): task, id, model, kind, options, logprobs, probs, pred_index, "
        "mass, finite, n_prompt_tokens, meta, plus label_mass and token_ids (label) or token_counts (continuation), "
        "and with --temperature a sampling list. Re-running with the same --output resumes.",
    )
    p.add_argument("--input", required=True, type=Path)
    p.add_argument("--output", required=True, type=Path)
    add_overwrite_arg(p)
    add_input_limit_args(p)
    add_model_args(p)
    add_threads_arg(p)
    add_prompt_args(p)
    add_sampling_args(p)
    add_shard_arg(p)
    p.set_defaults(func=run_score)

    q = groups[""].add_parser(
        "perplexity",
        help="perplexity of texts, optionally after an unscored prefix",
        description="Input lines {id, text, prefix?}; output records with ppl, nll, n_tokens. Resumable.",
    )
    q.add_argument("--input", required=True, type=Path)
    q.add_argument("--output", required=True, type=Path)
    add_overwrite_arg(q)
    add_input_limit_args(q)
    add_model_args(q)
    add_threads_arg(q)
    add_shard_arg(q)
    q.set_defaults(func=run_perplexity)


def add_overwrite_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --output file (and its .input.json and .provenance.json) instead of "
                   "resuming it; without it, a file that is not this command's records is refused, untouched")


def run_score(args: argparse.Namespace) -> int:
    _check_output(args, "score")
    # every line's JSON and fields are checked before the model loads (plain text: no tokenizer needed);
    # the rendering through the chat template and the token counts are checked once it is loaded
    limits = input_limits(args)
    if not read_score_items(args.input, None, PromptStyle(chat_template=False, system=args.system,
                                                          prefill=args.prefill), **limits):
        raise InputError(args.input, None, None, "no items (the file is empty)")
    runner = _runner(args)
    style = PromptStyle(chat_template=args.chat_template, system=args.system, prefill=args.prefill)
    items = read_score_items(args.input, runner.lm.tokenizer, style, **limits)
    if not items:
        raise InputError(args.input, None, None, "no items (the file is empty)")
    requests = [req for _, req in items]
    for n, r in enumerate(requests, 1):  # tokenize everything first: a too-long prompt fails before any work
        try:
            runner.scorer.encode(r)
        except ValueError as exc:
            raise InputError(args.input, n, "prompt", str(exc)) from None
    return _score_file(args, runner, requests, "score", "item(s)")


def run_perplexity(args: argparse.Namespace) -> int:
    _check_output(args, "perplexity")
    lines: list[int] = []
    requests = read_perplexity_items(args.input, lines, **input_limits(args))
    if not requests:
        raise InputError(args.input, None, None, "no texts (the file is empty)")
    runner = _runner(args)
    for n, r in zip(lines, requests):  # tokenize everything first: a text past the context fails before any work
        try:
            runner.scorer.encode(r)
        except ValueError as exc:
            raise InputError(args.input, n, "text", str(exc)) from None
    return _score_file(args, runner, requests, "perplexity", "text(s)")


def _check_output(args: argparse.Namespace, command: str) -> None:
    """Refused before the input is read or the model loads, the file untouched: an output that is not this
    command's records (the user's own file, another command's; unless ``--overwrite``), a link at the output, its
    sidecars, shards or locks, a path under /proc, /sys or /dev, or this run's lock held by another process."""
    from probe.runs.shard import detect

    output = args.output
    if args.overwrite and getattr(args, "shard", None) is not None:
        raise ProbeError("--overwrite replaces the output of a whole run; run it without --shard (then shard)")
    if args.overwrite:
        check_output(output)
    else:
        check_records(output, command, hint="choose another --output, move the file away, or pass --overwrite "
                      "to replace it")
    check_links(output.parent, output.name + ".")
    check_locks(output.parent, output.name + ".")
    shard = getattr(args, "shard", None)
    if detect().is_main:  # the process that takes the lock (as _score_file below)
        suffix = f".shard-{str(shard).replace('/', '-of-')}" if shard is not None else ""
        check_lock_free(output.with_name(output.name + suffix + ".lock"), str(output) + suffix)


def _runner(args: argparse.Namespace):
    from probe.runs.resume import check_model_before_load
    from probe.runs.runner import Runner, load

    options = run_options(args)
    if not args.overwrite:  # another model's output: refused before this one loads (--overwrite replaces it)
        check_model_before_load(args.output, args.model)
    return Runner(load(args.model, options), options)


def _score_file(args: argparse.Namespace, runner, requests, command: str, noun: str) -> int:
    """Score into ``--output`` through the runner (resume, input check, cache, shards), then provenance."""

    from probe.runs.provenance import provenance

    # a --shard job writes only its own shard file: it holds that shard's lock, the folding run the output's
    shard = f".shard-{str(runner.shard).replace('/', '-of-')}" if runner.shard is not None else ""
    lock = (OutputLock(args.output.with_name(args.output.name + shard + ".lock"), str(args.output) + shard)
            if runner.procs.is_main else contextlib.nullcontext())
    with runner, lock:  # one writer per output, from the first record to the provenance
        if args.overwrite and runner.procs.is_main:
            _remove_output(args.output)
        prov = _drop_provenance(args.output) if runner.procs.is_main else None
        before = _count(args.output)
        from probe.runs.sharding import ShardPending

        done = runner.score(requests, args.output, task=command)
        if runner.shard is not None:  # this shard's share is written; a plain run folds the complete set
            print(f"probe: {done}" if isinstance(done, ShardPending) else
                  f"probe: every shard of {args.output} has finished; run the same command without --shard "
                  "(or `probe merge`) to fold them in", file=sys.stderr)
            return 0
        if not runner.procs.is_main:  # rank 0 merged the shards; it alone writes provenance and reports
            return 0
        write_json_atomic(prov, provenance(
            runner.lm, config={"command": command, **{k: str(v) for k, v in vars(args).items() if k != "func"}},
            data_files=[args.input], world_size=runner.procs.world_size,
            scoring=runner.scorer.batching.as_dict(), work=runner.work()))
        n_new = _count(args.output) - before
        print(f"scored {n_new} new {noun}; {len(requests)} in {args.output}{runner.cache_note()}", file=sys.stderr)
    return 0


def _count(path: Path) -> int:
    return len(read_records(path)[0]) if path.is_file() else 0


def _remove_output(output: Path) -> None:
    """``--overwrite``: the output and its input check go (a link there was refused before the model loaded)."""
    from probe.runs.resume import input_sidecar

    for path in (output, input_sidecar(output)):
        check_output(path).unlink(missing_ok=True)


def _drop_provenance(output: Path) -> Path:
    """Remove ``<output>.provenance.json`` before scoring; it is rewritten after the last record.

    Its presence thus always means "this output is complete for the input it
    names", also when a re-run with more items is interrupted.
    """
    prov = output.with_name(output.name + ".provenance.json")
    prov.unlink(missing_ok=True)
    return prov
