"""Runner overhead: one benchmark end to end through the runner vs ``Scorer.score`` on the same requests.

Both sides score exactly the requests the task builds. The baseline is one
``Scorer.score`` call over all of them (the scorer's whole prefix tree, no
files). The runner side is ``probe.runs.task_run.run_task`` into a fresh
directory: item building, request building, chunking, the input check,
crash-safe records, aggregation with bootstrap CIs, tables, provenance.
Each side runs ``--repeats`` times, alternating, in one process; the script
prints the median times, the overhead ratio and the largest difference
between the two sides' log-probabilities (they must agree).

    python benchmarks/runner_overhead.py                         # hbb (sg_n 1), 48 instances, smollm2
    python benchmarks/runner_overhead.py --task bbq --limit 96
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from probe.models import load_model
from probe.runs.runner import RunOptions, Runner
from probe.runs.task_run import run_task
from probe.scoring import Scorer
from probe.tasks import get


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="hbb")
    ap.add_argument("--limit", type=int, default=48)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs of each side first (allocator, caches)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from probe.commands.run import parse_sets

    task = get(args.task)
    values = parse_sets(args.sets)
    if args.task == "hbb":
        # generated HBB-SG variations are a generation step, not scoring: compare scoring on the originals
        values.setdefault("sg_n", 1)
    config = task.make_config(values)
    lm = load_model(args.model)
    options = RunOptions(batch_size=args.batch_size, progress=False)
    items = task.selection.select(config, task.items(config), args.limit)
    requests = task.requests(config, items, lm.tokenizer, None)
    n_tokens = sum(len(s.ids) for r in requests for s in Scorer(lm).encode(r).sequences)
    print(f"{args.task}: {len(items)} items -> {len(requests)} requests ({n_tokens:,} tokens unshared); "
          f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads", file=sys.stderr)

    scorer = Scorer(lm, batch_size=args.batch_size)
    runner = Runner(lm, options)
    base_times, run_times = [], []
    base = evaluation = None
    for i in range(args.warmup + args.repeats):
        t0 = time.perf_counter()
        base = scorer.score(requests)
        t_base = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            evaluation = run_task(task, config, lm, output=Path(tmp) / "run", limit=args.limit, runner=runner)
            t_run = time.perf_counter() - t0
        if i >= args.warmup:
            base_times.append(t_base)
            run_times.append(t_run)
    by_id = {r.id: r for r in base}
    diff = 0.0
    for rec in evaluation.records.itertuples():
        ref = by_id[rec.id]
        want = (-ref.nll,) if rec.kind == "perplexity" else ref.logprobs
        diff = max([diff] + [abs(a - b) for a, b in zip(rec.logprobs, want)])
    b, r = statistics.median(base_times), statistics.median(run_times)
    print(f"Scorer.score: {b:.2f} s   runner end to end: {r:.2f} s   (medians of {args.repeats}; "
          f"all: {[round(x, 2) for x in base_times]} vs {[round(x, 2) for x in run_times]})")
    print(f"runner_overhead={r / b - 1:+.1%} max_abs_diff={diff:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
