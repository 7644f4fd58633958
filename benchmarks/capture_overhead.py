"""Cost of recording activations in the scoring passes (issue #18, part 5).

On the BBQ requests of ``benchmarks/vs_lm_eval.py`` (each question as three
answer texts and as A/B/C letters, pair groups), times four runs of the same
requests on one model object:

- ``score``: ``Scorer.score(reqs)``, prefix sharing on (the baseline);
- ``capture``: ``Scorer.score(reqs, capture=spec)``, prefix sharing on;
- ``capture_unshared``: the same with ``share_prefixes=False``, which is what
  capture cost before (``scoring_capture`` turned sharing off for it);
- ``score_unshared``: scoring alone without sharing, for reference.

``spec`` defaults to ``resid_post`` of every layer at the last prompt token
(``probe activations``' default). Runs are interleaved and repeated; the median
is reported, for wall time and for the process's CPU time (steadier on a
shared machine: with one thread it does not count time spent waiting for a
core). The captured vectors of the shared and unshared runs are compared.

    python benchmarks/capture_overhead.py --limit 16 --threads 1 --repeats 3

The last line is ``capture/score=X.XX unshared_capture/score=Y.YY (CPU time: x, y) max_rel_diff=Z``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PROBE_DATA", str((ROOT.parent / "shared" / "data").resolve()))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from vs_lm_eval import probe_requests, select_items  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--limit", type=int, default=16, help="BBQ questions (each gives 2 requests)")
    ap.add_argument("--categories", default="Age,Nationality,Religion")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--layers", default="all", help="layers captured (resid_post at the last prompt token)")
    ap.add_argument("--positions", default="last")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from probe.activations.hooks import discover, hook_names
    from probe.activations.scoring_capture import CaptureSpec
    from probe.models import load_model
    from probe.scoring import Scorer

    lm = load_model(args.model, device=args.device, dtype=args.dtype)
    items = select_items(args.categories.split(","), args.limit)
    reqs = probe_requests(lm.tokenizer, items)
    spec = CaptureSpec(tuple(hook_names(discover(lm.model), args.layers, ["resid_post"])), args.positions)
    shared = Scorer(lm, batch_size=args.batch_size)
    unshared = Scorer(lm, batch_size=args.batch_size, share_prefixes=False)
    runs = {
        "score": lambda: shared.score(reqs),
        "capture": lambda: shared.score(reqs, capture=spec),
        "capture_unshared": lambda: unshared.score(reqs, capture=spec),
        "score_unshared": lambda: unshared.score(reqs),
    }
    shared.score(reqs[:2], capture=spec)  # warm-up (thread pools, allocator, tokenizer memo), not timed
    times: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}  # process CPU seconds: robust on a shared machine
    outs: dict[str, list] = {}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.process_time()
            outs[name] = fn()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    med = {k: statistics.median(v) for k, v in times.items()}
    cmed = {k: statistics.median(v) for k, v in cpu.items()}
    worst = 0.0
    for a, b in zip(outs["capture"], outs["capture_unshared"]):
        for k in spec.keys:
            x, y = a.activations[k], b.activations[k]
            worst = max(worst, float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-30)))
    score_diff = max(abs(x - y) for a, b in zip(outs["capture"], outs["score"]) for x, y in zip(a.logprobs, b.logprobs))
    result = {
        "model": args.model, "device": args.device, "dtype": args.dtype, "threads": torch.get_num_threads(),
        "machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores".strip(),
        "questions": len(items), "requests": len(reqs), "keys": len(spec.keys), "repeats": args.repeats,
        "seconds_median": {k: round(v, 3) for k, v in med.items()},
        "seconds_all": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "cpu_seconds_median": {k: round(v, 3) for k, v in cmed.items()},
        "capture_over_score": round(med["capture"] / med["score"], 3),
        "unshared_capture_over_score": round(med["capture_unshared"] / med["score"], 3),
        "cpu_capture_over_score": round(cmed["capture"] / cmed["score"], 3),
        "cpu_unshared_capture_over_score": round(cmed["capture_unshared"] / cmed["score"], 3),
        "max_rel_diff_shared_vs_unshared": worst,
        "max_abs_score_diff_capture_vs_score": score_diff,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"capture/score={result['capture_over_score']:.2f} "
          f"unshared_capture/score={result['unshared_capture_over_score']:.2f} "
          f"(CPU time: {result['cpu_capture_over_score']:.2f}, {result['cpu_unshared_capture_over_score']:.2f}) "
          f"max_rel_diff={worst:.1e}")


if __name__ == "__main__":
    main()
