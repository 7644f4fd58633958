"""``probe merge DIR``: fold the finished shard sets of ``--shard`` jobs into their outputs (no model needed).

Every output under DIR (a run directory, a tree of them, or one output file)
with shard files ``OUTPUT.rankI-of-N.jsonl`` from ``--shard I/N`` processes is
folded when all N shards of a set have finished: the records are checked to
come from one model and one input, then appended in one-process order
(byte-identical to a one-process run). Unfinished sets are left alone and
listed. A task's summary and report are then written by the same ``probe run``
command without ``--shard`` (nothing is scored again).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.


def register(groups: dict) -> None:
    p = groups[""].add_parser("merge", help="fold finished --shard I/N job outputs into their run directories",
                              description=__doc__.split("\n\n")[1].replace("``", "'"))
    p.add_argument("path", type=Path, help="a run directory (searched recursively) or one output file")
    p.add_argument("--strict", action="store_true", help="exit 1 when a shard set is unfinished")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from probe.runs.shard_set import fold_tree

    results = fold_tree(args.path)  # a path that is neither there nor an output with shard files: an error
    if not results:
        print(f"probe merge: no shard files under {args.path}", file=sys.stderr)
        return 0
    waiting = False
    for r in results:
        if r.folded:
            print(f"{r.output}: folded shard set(s) of N={', '.join(r.folded)}: {r.added} record(s) added",
                  file=sys.stderr)
        if r.waiting:
            waiting = True
            print(f"{r.output}: not folded, shard(s) {', '.join(r.waiting)} not finished", file=sys.stderr)
    return 1 if waiting and args.strict else 0
