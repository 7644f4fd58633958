"""glibc keeping freed blocks (probe.scoring.engine.host_memory) on and off: the same BBQ pass, its time and its scores.

Each setting runs in its own process (the setting is process-wide and set once): the BBQ requests of
``vs_lm_eval.py --quick`` scored ``--calls`` times by one ``Scorer``, after one warm-up call. Printed per
setting: glibc's state, the seconds of each call and a hash of the scores, which must agree.

    python benchmarks/host_memory.py --threads 1
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: setting name -> environment changes (None: the variable removed)
SETTINGS = {
    "off (glibc's defaults)": {"PROBE_KEEP_FREED_MEMORY": "0"},
    "kept (probe's default)": {"PROBE_KEEP_FREED_MEMORY": None},
}


def child(args: argparse.Namespace) -> None:
    """One setting: score the requests ``--calls`` times; print one JSON line."""
    import torch

    sys.path.insert(0, str(HERE))
    import vs_lm_eval as bench

    from probe.models import load_model
    from probe.scoring import Scorer
    from probe.scoring.engine import host_memory

    torch.set_num_threads(args.threads)
    lm = load_model(args.model)
    items = bench.select_items(["Age", "Nationality", "Religion"], args.questions)
    reqs = bench.probe_requests(lm.tokenizer, items)
    scorer = Scorer(lm, batch_size=16)
    scorer.score(reqs[:2])  # warm-up: thread pool, tokenizer caches
    seconds, values = [], []
    for _ in range(args.calls):
        t = time.perf_counter()
        values = bench.probe_values(scorer.score(reqs))
        seconds.append(time.perf_counter() - t)
    digest = hashlib.sha256(struct.pack(f"{len(values)}d", *values)).hexdigest()[:16]
    print(json.dumps({"host_memory": host_memory.state(), "seconds": seconds, "n_scores": len(values),
                      "scores_sha256": digest}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--questions", type=int, default=48, help="BBQ questions (vs_lm_eval.py --quick: 48)")
    ap.add_argument("--calls", type=int, default=3, help="timed score() calls per setting")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    results = {}
    for name, changes in SETTINGS.items():
        env = dict(os.environ)
        for var, value in changes.items():
            if value is None:
                env.pop(var, None)
            else:
                env[var] = value
        cmd = [sys.executable, __file__, "--child", "--model", args.model, "--questions", str(args.questions),
               "--calls", str(args.calls), "--threads", str(args.threads)]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        results[name] = json.loads(out.strip().splitlines()[-1])
        r = results[name]
        print(f"{name:24s} host_memory={r['host_memory']:12s} seconds: "
              f"{', '.join(f'{s:.2f}' for s in r['seconds'])}  scores sha256 {r['scores_sha256']}")
    off, kept = results.values()
    same = off["scores_sha256"] == kept["scores_sha256"]
    print(f"best off / best kept = {min(off['seconds']) / min(kept['seconds']):.2f}x; "
          f"scores {'the same, bit for bit' if same else 'DIFFER'} ({kept['n_scores']} values)")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
