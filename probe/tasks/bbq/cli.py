"""``probe data build bbq`` (BBQ / BharatBBQ items in probe's item schema) and ``probe metrics bbq``."""

from __future__ import annotations

import argparse
import json
import sys

from probe.errors import InputError
from probe.io import dumps, iter_jsonl


# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.


def register(groups: dict[str, argparse._SubParsersAction]) -> None:
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


def run_build_bbq(args: argparse.Namespace) -> int:
    from probe.tasks.bbq.data import load_bbq_jsonl
    from probe.tasks.bbq.templates import expand_templates
    from probe.tasks.bbq.bharatbbq import expand_bharatbbq_templates, load_bharatbbq_examples
    from probe.tasks.bbq.items import write_items

    if args.source == "jsonl":
        items = [it for c in args.categories for it in load_bbq_jsonl(c)]
    elif args.source == "templates":
        items = [it for c in args.categories for it in expand_templates(c, lexical=args.lexical)]
    elif args.source == "bharatbbq":
        items = load_bharatbbq_examples()
    else:
        items = expand_bharatbbq_templates(lexical=args.lexical)
    write_items(items, args.output)
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
    from probe.tasks.bbq.metrics import grouped_bbq_metrics, validate_record

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
