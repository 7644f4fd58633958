"""``probe data build implicitbbq|bbq`` and ``probe metrics bbq``."""

from __future__ import annotations

import argparse
import sys


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

    b = groups["data build"].add_parser(
        "bbq", help="BBQ / BharatBBQ items in probe's item schema (from JSONL, templates or BharatBBQ)",
        description="Load BBQ's generated JSONL, expand BBQ template CSVs, or load BharatBBQ, and write "
                    "one BBQItem JSON line per instance.")
    b.add_argument("--output", required=True, help="output JSONL file")
    b.add_argument("--source", choices=["jsonl", "templates", "bharatbbq", "bharatbbq-templates"], default="jsonl",
                   help="BBQ generated JSONL (default), BBQ templates expanded, BharatBBQ examples or templates")
    b.add_argument("--categories", nargs="+", default=["Age", "Nationality", "Religion"],
                   help="BBQ categories (jsonl/templates sources)")
    b.add_argument("--lexical", choices=["first", "all"], default="all", help="{{WORD}} variants when expanding")
    b.set_defaults(func=run_build_bbq)

    m = groups["metrics"].add_parser(
        "bbq", help="BBQ accuracy and bias scores from predictions (pred_index or probs per line)",
        description="Each input line is a BBQ record (its original fields: ans0-2, label, answer_info, "
                    "additional_metadata.stereotyped_groups, context_condition, question_polarity, category; or "
                    "probe's target_index/unknown_index) plus pred_index (0-2) or probs ([p0, p1, p2]). Prints "
                    "JSON: per category, acc_amb, acc_dis, bias_amb, bias_dis and their counts (argmax and expected), "
                    "plus n_skipped and skipped (the lines left out). Upstream rows whose stereotyped target is not "
                    "exactly one named answer (BBQ's older releases tag both 'tattoos' and 'no tattoos' with one "
                    "group) are skipped with a warning naming each line; --strict makes them an error.")
    m.add_argument("--input", required=True, help="predictions JSONL")
    m.add_argument("--by", nargs="+", default=["category"], help="fields to group by (default: category)")
    m.add_argument("--ci", action="store_true", help="add bootstrap 95%% CIs")
    m.add_argument("--n-boot", type=int, default=1000)
    m.add_argument("--strict", action="store_true",
                   help="fail on a row whose stereotyped target is not exactly one answer (default: skip and warn)")
    m.set_defaults(func=run_metrics_bbq)


def _write_items(items, output: str) -> None:
    from probe.io import write_atomic

    lines = []
    for it in items:
        d = it.to_dict()
        d["dimension"] = it.category
        lines.append(__import__("json").dumps(d, ensure_ascii=False) + "\n")
    write_atomic(output, "".join(lines))


def run_build_implicitbbq(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from probe.tasks.implicitbbq.data import build_implicitbbq
    from probe.tasks.implicitbbq.match import PAPER_RECORDS, format_record_counts, match_explicit, record_counts
    from probe.io import write_atomic

    if args.explicit_records is not None and args.explicit_records < 2:
        raise SystemExit("--explicit-records must be >= 2 (records per condition; each explicit context gives 2)")
    stats: dict = {}
    full = build_implicitbbq(args.dimensions, lexical=args.lexical, controls=not args.no_controls, stats=stats,
                             explicit_set="full")
    match: dict = {}
    items = full if args.explicit_set == "full" else match_explicit(full, args.explicit_records, args.seed, match)
    _write_items(items, args.output)
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


def run_build_bbq(args: argparse.Namespace) -> int:
    from probe.tasks.bbq.data import load_bbq_jsonl
    from probe.tasks.bbq.templates import expand_templates
    from probe.tasks.implicitbbq.bharatbbq import expand_bharatbbq_templates, load_bharatbbq_examples

    if args.source == "jsonl":
        items = [it for c in args.categories for it in load_bbq_jsonl(c)]
    elif args.source == "templates":
        items = [it for c in args.categories for it in expand_templates(c, lexical=args.lexical)]
    elif args.source == "bharatbbq":
        items = load_bharatbbq_examples()
    else:
        items = expand_bharatbbq_templates(lexical=args.lexical)
    _write_items(items, args.output)
    print(f"wrote {len(items)} instances to {args.output}", file=sys.stderr)
    return 0


class UntargetedRow(ValueError):
    """The row's stereotyped target is not exactly one named answer (an upstream quirk, skipped by default)."""


def metric_record(rec: dict, where: str) -> dict:
    """A BBQ prediction line -> the fields probe.tasks.bbq.metrics needs (target/unknown from answer_info)."""
    from probe.tasks.bbq.data import find_target_index, group_key

    out = dict(rec)
    if "target_index" not in rec or "unknown_index" not in rec:
        info = rec.get("answer_info")
        stereo = (rec.get("additional_metadata") or {}).get("stereotyped_groups", rec.get("stereotyped_groups"))
        if not isinstance(info, dict) or stereo is None:
            raise ValueError(f"{where}: needs target_index/unknown_index, or answer_info and "
                             f"additional_metadata.stereotyped_groups")
        groups = [info.get(f"ans{i}", ["", ""]) for i in range(3)]
        unknown = [i for i, g in enumerate(groups) if group_key(g[1]) == "unknown"]
        target = find_target_index(groups, stereo)
        if len(unknown) != 1:
            raise ValueError(f"{where}: cannot identify the Unknown answer from answer_info (needs exactly one)")
        if target is None:
            raise UntargetedRow(f"{where}: no single answer matches stereotyped_groups {list(stereo)} in {groups}")
        out["unknown_index"], out["target_index"] = unknown[0], target
    return out


def run_metrics_bbq(args: argparse.Namespace) -> int:
    import json

    from probe.errors import InputError
    from probe.tasks.bbq.metrics import grouped_bbq_metrics, validate_record
    from probe.io import dumps, iter_jsonl

    records, skipped = [], []
    for line_no, rec in iter_jsonl(args.input, required=("context_condition", "question_polarity", "label")):
        try:
            r = metric_record(rec, "record")
            validate_record(r, "record")
        except UntargetedRow as exc:
            if args.strict:
                raise InputError(args.input, line_no, "additional_metadata.stereotyped_groups",
                                 str(exc).removeprefix("record: ") + " (drop --strict to skip such rows)") from None
            skipped.append({"line": line_no, "reason": str(exc).removeprefix("record: ")})
            continue
        except ValueError as exc:
            raise InputError(args.input, line_no, None, str(exc).removeprefix("record: ")) from None
        records.append(r)
    if not records and not skipped:
        raise InputError(args.input, None, None, "no records (the file is empty)")
    if skipped:
        lines = ", ".join(str(s["line"]) for s in skipped[:20]) + (" ..." if len(skipped) > 20 else "")
        print(f"warning: {args.input}: skipped {len(skipped)} row(s) whose stereotyped target is not exactly one "
              f"named answer (lines {lines}); --strict makes this an error", file=sys.stderr)
    result = grouped_bbq_metrics(records, by=args.by, ci=args.ci, n_boot=args.n_boot)
    result["n_skipped"] = len(skipped)  # type: ignore[assignment]
    result["skipped"] = skipped  # type: ignore[assignment]
    print(json.dumps(json.loads(dumps(result)), indent=2, sort_keys=True))
    return 0
