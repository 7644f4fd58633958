"""``probe data build cmp_iso`` (the converters) and ``probe metrics cmp-iso``: Parity Gap of iso and cmp outputs made anywhere (iso/cmp paper).

Input: JSONL, one line per prompt::

    {"context_pair_id": 17, "task_type": "iso", "target": "t", "probs": {"Yes": 0.7, "No": 0.3}}
    {"context_pair_id": 17, "task_type": "cmp", "order": "t_prime_first", "answers": ["A", "B", "A", "x", "A"]}

``target`` (iso) is the target the prompt asks about (``t`` = stereotypical or
advantaged); ``order`` (cmp) says which target is option A. ``probs`` holds
label probabilities (``Yes/No[/Skip]`` or ``A/B[/C]``); ``answers`` holds sampled
labels, mapped as the task and the authors' parser map them: any case ("a" is
"A"), and for iso the one-letter answers y / n / s (Yes / No / Skip); anything
else, and a neutral label that was not offered, counts as invalid and is
excluded. A prompt without any valid answer is kept (iso affirmation 0, cmp
order 0.5: iso/cmp paper, appendix B) and counted (``n_no_valid``). The neutral label
counts as offered in a paradigm when some line of it lists it in ``options``
(the labels offered) or chose it; otherwise its neutral share is NaN (no
neutral option), not 0. The ``records.jsonl`` of a ``cmp_iso`` task run is read
as is (its ``meta`` fields and ``options``/``probs``; records with non-finite
scores are skipped and counted; a CoT chain record without a valid boxed answer,
``boxed_found`` false, is a prompt answer with no valid label, as the task
counts it); use ``--where setting=direct --where benchmark=bbq`` to pick one
cell (on a sampled-CoT run also ``--where chain=0``). Output: JSON with
``iso.pg``, ``cmp.pg`` (with bootstrap CIs), ``n_context_pairs``, the neutral
shares, the cmp-vs-iso gap and its randomization test.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from probe.errors import InputError
from probe.io import dumps, iter_jsonl

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.


def register(groups: dict[str, argparse._SubParsersAction]) -> None:
    b = groups["data build"].add_parser(
        "cmp_iso", help="build iso/cmp prompts of another category from the original benchmark (iso/cmp paper App. C)",
        description="Convert an original benchmark (BBQ, CrowS-Pairs, StereoSet, a RedditBias-style pair CSV, "
                    "WinoBias) into the iso/cmp context pairs with the authors' task bodies and write them in the "
                    "released CSV layout as OUTPUT/<benchmark>_<category>_cot_gen.csv, which the cmp_iso task reads "
                    "with 'category: <category>'. Prints the conversion counts (pairs, skipped by reason).")
    b.add_argument("--benchmark", required=True, action="append",
                   choices=("bbq", "crows_pairs", "stereoset", "redditbias", "winobias"),
                   help="benchmark to build (repeatable)")
    b.add_argument("--category", required=True, choices=("gender", "race", "religion"))
    b.add_argument("--from", dest="source", default=None,
                   help="original data (file or directory; default: the data set's dataset_dir; "
                        "required for redditbias and winobias)")
    b.add_argument("--output", required=True, help="directory to write the CSV(s) into (e.g. a copy of the "
                                                   "cmp_iso data directory, then data_dir: in the task config)")
    b.add_argument("--disambig", action="store_true", help="BBQ: disambiguated contexts instead of ambiguous ones")
    b.set_defaults(func=run_build)

    p = groups["metrics"].add_parser(
        "cmp-iso",
        help="Parity Gap of iso/cmp outputs (JSONL with probs or sampled answers)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--input", required=True, help="JSONL file, one line per prompt (see above)")
    p.add_argument("--mode", choices=("expected", "argmax"), default="expected",
                   help="probs as expected counts (default) or the argmax label as one answer")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples for the 95%% CIs")
    p.add_argument("--n-iter", type=int, default=10000, help="randomization-test iterations (cmp vs iso)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--where", action="append", default=[], metavar="FIELD=VALUE",
                   help="keep only lines whose FIELD equals VALUE (repeatable), e.g. to read one model, "
                        "setting and benchmark out of a cmp_iso run's records.jsonl")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="skip (and list) pairs missing one of their paired prompts instead of failing")
    p.set_defaults(func=run)


def run_build(args: argparse.Namespace) -> int:
    from probe.tasks.cmp_iso.data import benchmark_file
    from probe.tasks.cmp_iso.convert import write_csv
    from probe.tasks.cmp_iso.sources import build_benchmark

    if args.source and len(args.benchmark) > 1:
        raise SystemExit("--from applies to one --benchmark at a time")
    report = {}
    for bench in args.benchmark:
        conditions = ("disambig",) if args.disambig else ("ambig",)
        pairs, stats = build_benchmark(bench, args.category, args.source, bbq_conditions=conditions)
        if not pairs:
            raise SystemExit(f"{bench} {args.category}: no context pairs built ({stats.as_dict()})")
        name = benchmark_file(bench, args.category)
        if args.disambig:
            name = name.replace("_cot_gen", "_disamb_cot_gen")
        out = write_csv(pairs, Path(args.output) / name)
        report[bench] = {"file": str(out), **stats.as_dict()}
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    return 0


def run(args: argparse.Namespace) -> int:
    from probe.tasks.cmp_iso.metrics import analyze, neutral_offered, observation_from_dict

    where = []
    for w in args.where:
        if "=" not in w:
            raise InputError("--where", None, None, f"expected FIELD=VALUE, got {w!r}")
        where.append(tuple(w.split("=", 1)))
    lines = []
    skipped = 0
    for line, d in iter_jsonl(args.input):
        if isinstance(d.get("meta"), dict) and "options" in d:  # a cmp_iso task record
            if not d.get("finite", True):
                skipped += 1  # non-finite scores never count as an answer
                continue
            if d["meta"].get("boxed_found") is False:  # a CoT chain without a valid boxed answer: none, as the task
                d = {**d["meta"], "answers": [], "options": list(d["options"])}
            else:
                d = {**d["meta"], "probs": dict(zip(d["options"], d.get("probs") or []))}
        if any(str(d.get(k)) != v for k, v in where):
            continue
        lines.append((line, d))
    # the neutral option is a property of the run: offered in a paradigm if any of its lines shows it
    offered = {tt: any(neutral_offered(d) for _, d in lines if d.get("task_type") == tt) for tt in ("iso", "cmp")}
    obs = []
    seen: dict[tuple, int] = {}
    for line, d in lines:
        try:
            o = observation_from_dict(d, args.mode, neutral=offered.get(d.get("task_type")))
        except ValueError as exc:
            msg = str(exc)
            field = msg.split("'")[1] if msg.startswith("field '") else None
            raise InputError(args.input, line, field, msg.split(": ", 1)[-1] if field else msg) from None
        key = (str(o.context_pair_id), o.task_type, o.target if o.task_type == "iso" else o.order)
        if key in seen:
            raise InputError(args.input, line, "context_pair_id",
                             f"duplicate {o.task_type} prompt for pair {o.context_pair_id!r} (first on line {seen[key]})")
        seen[key] = line
        obs.append(o)
    if not obs:
        raise InputError(args.input, None, None, "no records")
    try:
        res = analyze(obs, n_boot=args.n_boot, n_iter=args.n_iter, seed=args.seed, allow_incomplete=args.allow_incomplete)
    except ValueError as exc:  # a pair lacking one of its prompts
        raise InputError(args.input, None, "context_pair_id", f"{exc} (use --allow-incomplete to skip such pairs)") from None
    res["neutral_share"] = {"iso": res["iso"]["neutral_share"], "cmp": res["cmp"]["neutral_share"]}
    res["mode"] = args.mode
    res["n_nonfinite_skipped"] = skipped
    sys.stdout.write(json.dumps(json.loads(dumps(res)), indent=2) + "\n")
    return 0
