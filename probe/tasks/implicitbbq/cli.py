"""``probe data build implicitbbq``: the ImplicitBBQ items, their counts beside the paper's."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from probe.io import write_atomic

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.


def register(groups: dict[str, argparse._SubParsersAction]) -> None:
    p = groups["data build"].add_parser(
        "implicitbbq", help="build ImplicitBBQ items (explicit, implicit and control contexts; 12 settings)",
        description="Write one JSON line per ImplicitBBQ instance (id, dimension, setting, context, background, "
                    "question, options, label, target_index, unknown_index, ...) and print (and write to "
                    "OUTPUT-stem.counts.md / .counts.json) the records (context x question) per condition of each "
                    "dimension, beside the paper's 760 / ~8k / ~8.5k.")
    p.add_argument("--output", required=True, help="output JSONL file")
    p.add_argument("--dimensions", nargs="+", default=None,
                   help="subset of: age gender region religion ses caste (default: all)")
    p.add_argument("--lexical", choices=["first", "all"], default="first",
                   help="{{WORD}} variants: the first of each (default) or every combination")
    p.add_argument("--no-controls", action="store_true", help="leave out the neutral and no-characteristics controls")
    p.add_argument("--explicit-set", choices=["matched", "full"], default="matched",
                   help="matched (default): explicit records sampled so that each (dimension, template) weighs as "
                        "in the implicit set; full: every explicit filling once")
    p.add_argument("--explicit-records", type=int, default=None, metavar="N",
                   help="size of the matched explicit set, in records (context x question) per condition "
                        "(default: as many as the implicit set; the paper has ~8500)")
    p.add_argument("--seed", type=int, default=0, help="seed of the matched explicit sample (default 0)")
    p.set_defaults(func=run_build_implicitbbq)


def run_build_implicitbbq(args: argparse.Namespace) -> int:
    from probe.tasks.bbq.items import write_items
    from probe.tasks.implicitbbq.data import build_implicitbbq
    from probe.tasks.implicitbbq.match import PAPER_RECORDS, format_record_counts, match_explicit, record_counts

    if args.explicit_records is not None and args.explicit_records < 2:
        raise SystemExit("--explicit-records must be >= 2 (records per condition; each explicit context gives 2)")
    stats: dict = {}
    full = build_implicitbbq(args.dimensions, lexical=args.lexical, controls=not args.no_controls, stats=stats,
                             explicit_set="full")
    match: dict = {}
    items = full if args.explicit_set == "full" else match_explicit(full, args.explicit_records, args.seed, match)
    write_items(items, args.output)
    matched = args.explicit_set == "matched"
    counts = record_counts(items, full if matched else None)
    table = format_record_counts(counts, matched)
    note = (f"Records = context x question, per condition (ambiguous; disambiguated is the same). Explicit set: "
            f"{args.explicit_set}" + (f", seed {args.seed}, {match['distinct']} distinct explicit contexts, "
                                      f"{match['repeated']} used more than once" if match else "") + ".")
    print(table + "\n\n" + note)
    stem = Path(args.output).with_suffix("")  # items.jsonl -> items.counts.md beside it
    write_atomic(f"{stem}.counts.md", table + "\n\n" + note + "\n")
    write_atomic(f"{stem}.counts.json", json.dumps(
        {"unit": "records (context x question) per condition", "explicit_set": args.explicit_set,
         "seed": args.seed, "explicit_records": args.explicit_records, "lexical": args.lexical,
         "match": match, "counts": counts,
         "paper": PAPER_RECORDS}, indent=2) + "\n")
    # What the faithfulness rules left out (docs/implicitbbq.md, "The ImplicitBBQ builder").
    print("\n| dimension | cue combinations excluded | templates removed whole | duplicate contexts dropped "
          "| slot-bound templates without implicit form |\n|---|---|---|---|---|")
    for dim, st in stats.items():
        print(f"| {dim} | {st['combos_excluded']} | {', '.join('Q' + q for q in st['templates_excluded']) or '-'} | "
              f"{st['duplicate_contexts']} | {', '.join('Q' + q for q in st['bound_implicit_excluded']) or '-'} |")
    print(f"\nwrote {len(items)} instances to {args.output} (counts: {stem}.counts.md, .counts.json)",
          file=sys.stderr)
    return 0
