"""`probe score` and `probe perplexity`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from probe.commands.common import add_model_args, add_prompt_args, load_from_args, score_to_file


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
    from probe.runs.records import write_json_atomic
    from probe.scoring import Scorer
    from probe.scoring.items import PromptStyle, read_score_items

    lm = load_from_args(args)
    style = PromptStyle(chat_template=args.chat_template, system=args.system, prefill=args.prefill)
    items = read_score_items(args.input, lm.tokenizer, style)
    if not items:
        from probe.errors import InputError

        raise InputError(args.input, None, None, "no items (the file is empty)")
    scorer = Scorer(lm, batch_size=args.batch_size, token_budget=args.token_budget)
    requests = [req for _, req in items]
    for r in requests:  # tokenize everything first: a too-long prompt fails before any work
        try:
            scorer.encode(r)
        except ValueError as exc:
            from probe.errors import InputError

            line = next(i for i, (_, q) in enumerate(items, 1) if q.id == r.id)
            raise InputError(args.input, line, "prompt", str(exc)) from None
    prov = _drop_provenance(args.output)
    n = score_to_file(scorer, requests, args.output, chunk=args.flush_every)
    write_json_atomic(
        prov,
        provenance(lm, config={"command": "score", **{k: str(v) for k, v in vars(args).items() if k != "func"}}, data_files=[args.input]),
    )
    print(f"scored {n} new item(s); {len(requests)} in {args.output}", file=sys.stderr)
    return 0


def run_perplexity(args: argparse.Namespace) -> int:
    from probe.runs.provenance import provenance
    from probe.runs.records import write_json_atomic
    from probe.scoring import Scorer
    from probe.scoring.items import read_perplexity_items

    requests = read_perplexity_items(args.input)
    if not requests:
        from probe.errors import InputError

        raise InputError(args.input, None, None, "no texts (the file is empty)")
    lm = load_from_args(args)
    scorer = Scorer(lm, batch_size=args.batch_size, token_budget=args.token_budget)
    prov = _drop_provenance(args.output)
    n = score_to_file(scorer, requests, args.output, chunk=args.flush_every)
    write_json_atomic(
        prov,
        provenance(lm, config={"command": "perplexity", "input": str(args.input)}, data_files=[args.input]),
    )
    print(f"scored {n} new text(s); {len(requests)} in {args.output}", file=sys.stderr)
    return 0


def _drop_provenance(output: Path) -> Path:
    """Remove ``<output>.provenance.json`` before scoring; it is rewritten after the last record.

    Its presence thus always means "this output is complete for the input it
    names", also when a re-run with more items is interrupted.
    """
    prov = output.with_name(output.name + ".provenance.json")
    prov.unlink(missing_ok=True)
    return prov
