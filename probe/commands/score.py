"""`probe score` and `probe perplexity`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from probe.commands.common import add_model_args, add_prompt_args, load_from_args, open_score_cache, score_to_file


def register(groups: dict) -> None:
    p = groups[""].add_parser(
        "score",
        help="score label / continuation items by exact log-probabilities",
        description="Each input line: {id, prompt | messages, options, kind: label|continuation, group?}. "
        "Output lines: id, logprobs, probs, pred_index, label_mass (label) or token_counts (continuation). "
        "Re-running with the same --output resumes.",
    )
    p.add_argument("--input", required=True, type=Path)
    p.add_argument("--output", required=True, type=Path)
    add_model_args(p)
    add_prompt_args(p)
    p.set_defaults(func=run_score)

    q = groups[""].add_parser(
        "perplexity",
        help="perplexity of texts, optionally after an unscored prefix",
        description="Input lines {id, text, prefix?}; output lines {id, ppl, nll, n_tokens}. Resumable.",
    )
    q.add_argument("--input", required=True, type=Path)
    q.add_argument("--output", required=True, type=Path)
    add_model_args(q)
    q.set_defaults(func=run_perplexity)


def run_score(args: argparse.Namespace) -> int:
    from probe.runs.provenance import provenance
    from probe.io import write_json_atomic
    from probe.scoring import Scorer
    from probe.scoring.items import PromptStyle, read_score_items

    procs = _processes(args)
    lm = load_from_args(args)
    style = PromptStyle(chat_template=args.chat_template, system=args.system, prefill=args.prefill)
    items = read_score_items(args.input, lm.tokenizer, style)
    if not items:
        from probe.errors import InputError

        raise InputError(args.input, None, None, "no items (the file is empty)")
    scorer = Scorer(lm, batch_size=args.batch_size, token_budget=args.token_budget, cache=open_score_cache(args, lm))
    requests = [req for _, req in items]
    for r in requests:  # tokenize everything first: a too-long prompt fails before any work
        try:
            scorer.encode(r)
        except ValueError as exc:
            from probe.errors import InputError

            line = next(i for i, (_, q) in enumerate(items, 1) if q.id == r.id)
            raise InputError(args.input, line, "prompt", str(exc)) from None
    prov = _drop_provenance(args.output) if procs.is_main else None
    n = _score(scorer, requests, args.output, args.flush_every, procs)
    if not procs.is_main:  # rank 0 merged the shards; it alone writes provenance and reports
        return 0
    write_json_atomic(
        prov,
        provenance(lm, config={"command": "score", **{k: str(v) for k, v in vars(args).items() if k != "func"}},
                   data_files=[args.input], world_size=procs.world_size),
    )
    print(f"scored {n} new item(s); {len(requests)} in {args.output}{_cache_note(scorer)}", file=sys.stderr)
    return 0


def run_perplexity(args: argparse.Namespace) -> int:
    from probe.runs.provenance import provenance
    from probe.io import write_json_atomic
    from probe.scoring import Scorer
    from probe.scoring.items import read_perplexity_items

    requests = read_perplexity_items(args.input)
    if not requests:
        from probe.errors import InputError

        raise InputError(args.input, None, None, "no texts (the file is empty)")
    procs = _processes(args)
    lm = load_from_args(args)
    scorer = Scorer(lm, batch_size=args.batch_size, token_budget=args.token_budget, cache=open_score_cache(args, lm))
    prov = _drop_provenance(args.output) if procs.is_main else None
    n = _score(scorer, requests, args.output, args.flush_every, procs)
    if not procs.is_main:
        return 0
    write_json_atomic(
        prov,
        provenance(lm, config={"command": "perplexity", "input": str(args.input)}, data_files=[args.input],
                   world_size=procs.world_size),
    )
    print(f"scored {n} new text(s); {len(requests)} in {args.output}{_cache_note(scorer)}", file=sys.stderr)
    return 0


def _cache_note(scorer) -> str:
    """Closes the score cache (if any) and says what it saved."""
    if scorer.cache is None:
        return ""
    stats = scorer.cache.stats
    scorer.cache.close()
    return f" (score cache: {stats.hits} sequence(s) read, {stats.writes} written)"


def _processes(args: argparse.Namespace):
    """This process's rank under ``accelerate launch`` / ``torchrun`` (world size 1 otherwise).

    Under several processes each loads its own model copy: ``--device cuda``
    (or ``auto``) becomes one GPU per process, ``cuda:LOCAL_RANK``.
    """
    from probe.errors import ProbeError
    from probe.runs.shard import detect

    procs = detect()
    if procs.distributed:
        if args.device_map is not None:
            raise ProbeError("--device-map spreads one model over all GPUs and cannot be combined with "
                             f"{procs.world_size} processes; use one process for --device-map, or one GPU per process")
        args.device = procs.device(args.device)
    return procs


def _score(scorer, requests, output: Path, chunk: int, procs) -> int:
    """Score into ``output``: sharded across the process group, or in this process alone."""
    from probe.runs.shard import merge_shards, process_group, recorded_ids, score_sharded, shard_files

    if procs.distributed:
        with process_group(procs):
            return score_sharded(scorer, requests, output, procs, chunk=chunk)
    merged = 0
    if shard_files(output):
        # shards left by an interrupted multi-process run are folded in first, so their
        # work is kept; checked first, so records of another model or input are not
        from probe.commands.common import check_input

        check_input(output, recorded_ids(output), requests, scorer.lm, write=False)
        merged = merge_shards(output, requests)
    return merged + score_to_file(scorer, requests, output, chunk=chunk)


def _drop_provenance(output: Path) -> Path:
    """Remove ``<output>.provenance.json`` before scoring; it is rewritten after the last record.

    Its presence thus always means "this output is complete for the input it
    names", also when a re-run with more items is interrupted.
    """
    prov = output.with_name(output.name + ".provenance.json")
    prov.unlink(missing_ok=True)
    return prov
