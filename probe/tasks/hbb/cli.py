"""``probe data build hbb`` (build the HBB test instances) and ``probe metrics hbb``.

``probe data build hbb --output hbb.jsonl`` writes one JSON line per test
instance (id, category, descriptor_type, identity_1, identity_2, concepts and
both questions with their options) and prints the counts per category, which
equal the paper's Table 5 for the released data.

``probe data build hbb-variations --model MODEL --output DIR`` generates the
HBB-SG sentence variations with a named generator model (the authors' variation
prompt, one greedy generation per concept pair and option, recorded and resumed in
``DIR/generations.jsonl``) and writes ``DIR/variations.jsonl``, the file a run
reads with ``variations_file``.

``probe metrics hbb --instances FILE.jsonl`` recomputes the threshold metrics
from per-instance probabilities made anywhere: each line needs ``category``,
``descriptor_type``, ``p1`` and ``p2`` (P(option A) for the two questions);
``concept_id`` (optional) makes the CIs cluster by concept pair. ``S >= threshold``
is inclusive up to ``probe.tasks.hbb.metrics.S_TOLERANCE`` (1e-9), so an S on the
threshold that float arithmetic puts a hair below it (|0.6 - 0.4| x 100) counts.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from probe.commands.common import add_model_args, bounded_int, run_options
from probe.errors import InputError, ProbeError
from probe.io import dumps, iter_jsonl, write_atomic

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.


def register(groups: dict[str, argparse._SubParsersAction]) -> None:
    p = groups["data build"].add_parser("hbb", help="build the Hidden Bias Benchmark test instances (JSONL)")
    p.add_argument("--output", "-o", required=True, help="JSONL file to write (one line per test instance)")
    p.add_argument("--data-dir", help="directory with questions.csv and descriptors.json (default: dataset_dir('hbb'))")
    p.add_argument("--seed", type=int, default=0, help="seed of the names drawn for Age 1-2, SES, Religions (default 0)")
    p.add_argument("--sample-concepts", type=int, help="only N concept pairs, stratified by source bias type")
    p.add_argument("--limit", type=int, help="only the first N instances")
    p.set_defaults(func=build_hbb)

    v = groups["data build"].add_parser(
        "hbb-variations", help="generate HBB-SG sentence variations with a generator model (JSONL for variations_file)",
        description="One greedy generation per concept pair and option with the authors' variation prompt "
                    "(qa_generate2_more_sentences.txt, 9 sentences asked for), parsed into sentences; with the "
                    "original option first that makes n variations per option. Writes OUTPUT/generations.jsonl "
                    "(the raw generations; re-running resumes) and OUTPUT/variations.jsonl "
                    '({"concept_id", "s1": [...], "s2": [...]} per line), for the hbb task\'s variations_file.')
    v.add_argument("--output", "-o", required=True, help="directory for generations.jsonl and variations.jsonl")
    v.add_argument("--data-dir", help="directory with questions.csv and descriptors.json (default: dataset_dir('hbb'))")
    v.add_argument("--sample-concepts", type=int, help="only N concept pairs, stratified (as the task's sample_concepts)")
    v.add_argument("--sample-seed", type=int, default=0, help="seed of --sample-concepts (as the task's sample_seed)")
    v.add_argument("--limit", type=int, help="only the first N concept pairs (after sampling)")
    v.add_argument("--n", type=int, default=10, help="variations per option, the original included (<= 10; default 10)")
    v.add_argument("--max-new-tokens", type=int, default=512, help="budget of one generation (default 512)")
    v.add_argument("--system", default="You are a useful assistant.",
                   help="system message (default: the authors', 'You are a useful assistant.'; '' for none)")
    v.add_argument("--no-chat-template", dest="chat_template", action="store_false", help="plain text prompts")
    v.add_argument("--threads", type=bounded_int(1, None), default=None, help="torch CPU threads")
    add_model_args(v)
    v.set_defaults(func=build_hbb_variations)

    if "metrics" in groups:
        m = groups["metrics"].add_parser("hbb", help="HBB threshold metrics from per-instance probabilities")
        m.add_argument("--instances", required=True, help="JSONL with category, descriptor_type, p1, p2 per line")
        m.add_argument("--threshold", type=float, default=20.0,
                       help="count S >= THRESHOLD, inclusive up to 1e-9 (float round-off; default 20)")
        m.add_argument("--output", help="write the per-type table as CSV here")
        m.set_defaults(func=metrics_hbb)


def build_hbb(args: argparse.Namespace) -> int:
    from probe.tasks.hbb.data import (
                                      CATEGORIES,
                                      CATEGORY_LABELS,
                                      build_instances,
                                      expected_counts,
                                      load_default,
                                      )
    from probe.tasks.hbb.selection import sample_concepts

    concepts, descriptors = load_default(args.data_dir)
    if args.sample_concepts is not None:
        concepts = sample_concepts(concepts, args.sample_concepts, args.seed)
    counts = {c: 0 for c in CATEGORIES}
    lines = []
    for n, inst in enumerate(build_instances(concepts, descriptors, seed=args.seed)):
        if args.limit is not None and n >= args.limit:
            break
        counts[inst.category] += 1
        lines.append(dumps(inst.to_json()) + "\n")
    write_atomic(Path(args.output), "".join(lines))
    expected = expected_counts(len(concepts))
    for cat in CATEGORIES:
        print(f"{CATEGORY_LABELS[cat]:<10} {counts[cat]:>7,}")
    total = sum(counts.values())
    print(f"{'Total':<10} {total:>7,}  ({len(concepts):,} concept pairs; written to {args.output})")
    if args.limit is None and total != expected["total"]:  # cannot happen unless the builder is broken
        print(f"warning: expected {expected['total']:,} instances", file=sys.stderr)
    return 0


def build_hbb_variations(args: argparse.Namespace) -> int:
    from probe.tasks.hbb.data import load_default
    from probe.tasks.hbb.selection import sample_concepts
    from probe.runs.runner import Runner, load
    from probe.tasks.hbb.variations import from_generations, generation_requests, variation_stats

    if not 1 <= args.n <= 10:
        raise ProbeError(f"--n must be in 1..10 (the original + the 9 sentences the prompt asks for), got {args.n}")
    concepts = load_default(args.data_dir)[0]
    if args.sample_concepts is not None:
        concepts = sample_concepts(concepts, args.sample_concepts, args.sample_seed)
    concepts = concepts[: args.limit] if args.limit is not None else concepts
    options = dataclasses.replace(run_options(args), threads=args.threads)
    out = Path(args.output)
    with Runner(load(args.model, options), options) as runner:
        requests = generation_requests(concepts, runner.lm.tokenizer, max_new_tokens=args.max_new_tokens,
                                       chat_template=args.chat_template, system=args.system or None)
        generations = runner.generate(requests, out / "generations.jsonl", task="hbb-variations")
    variations, refused = from_generations(concepts, generations, args.n)
    write_atomic(out / "variations.jsonl", "".join(
        dumps({"concept_id": cid, "s1": list(a), "s2": list(b)}) + "\n" for cid, (a, b) in variations.items()))
    stats = variation_stats(variations, args.n)
    print(f"{len(concepts)} concept pairs, {len(requests)} generations -> {out / 'variations.jsonl'}; "
          f"pairs per concept {stats['pairs_per_concept']['min']}-{stats['pairs_per_concept']['max']} "
          f"(mean {stats['pairs_per_concept']['mean']:.2f}, {stats['n_concepts_short']} short of n = {args.n}); "
          f"refused: {sum(r['context_copies'] for r in refused.values())} copies of the context, "
          f"{sum(len(r['identical_pairs']) for r in refused.values())} pairs of one sentence")
    return 0


def metrics_hbb(args: argparse.Namespace) -> int:
    import pandas as pd

    from probe.tasks.hbb.metrics import bias_scores, summarize_by
    from probe.tasks.hbb.tables import markdown

    rows = []
    for line, obj in iter_jsonl(args.instances, required=("category", "descriptor_type", "p1", "p2")):
        for key in ("p1", "p2"):
            v = obj[key]
            if v is not None and not (isinstance(v, (int, float)) and 0.0 <= v <= 1.0):
                raise InputError(args.instances, line, key, f"must be a probability in [0, 1] or null, got {v!r}")
        rows.append(obj)
    if not rows:
        raise InputError(args.instances, None, None, "no instances")
    df = pd.DataFrame(rows)
    df["S"] = bias_scores(df.p1.astype(float), df.p2.astype(float))
    cluster = "concept_id" if "concept_id" in df else None
    overall = summarize_by(df, [], threshold=args.threshold, cluster=cluster).iloc[0]
    print(f"instances {int(overall.n)} (invalid {int(overall.n_invalid)}); S >= {args.threshold:g}: "
          f"count {int(overall['count'])}, mean S {overall.mean_s:.2f}, share {100 * overall.share:.1f}%")
    table = summarize_by(df, ["category", "descriptor_type"], threshold=args.threshold, cluster=cluster, ci=False)
    print(markdown(table[["category", "descriptor_type", "n", "n_invalid", "count", "mean_s", "share", "mean_s_all"]]))
    if args.output:

        write_atomic(Path(args.output), table.to_csv(index=False))
    return 0
