"""Old (level-by-level KV-cache path) vs new (packed passes) engine on one device, in one process.

    python benchmarks/gpu_engine.py --device cuda --tokenizer DIR --json out.json   # the 8B shape, bf16
    python benchmarks/gpu_engine.py --device cpu --shape tiny --limit 8              # a dry run here

For BBQ (``--limit`` items, text + letters) and HBB-SG (``--concepts`` pairs,
``--sg-n`` variations) on a random-weight model of ``--shape`` with
``batch_size="auto"``, ``token_budget="auto"``, each engine: seconds, forward
passes, the engine's counts (computed, padded, attended tokens, KV bytes
copied, host-device copies), model FLOPs on unique tokens as a share of the
measured bf16 GEMM peak, the profiler's device busy share (device-type events
only), the host-device synchronisations of one ``score()`` call
(``torch.cuda.set_sync_debug_mode("warn")``, one warning each), and max
|delta| new vs old. Then the OOM back-off of the new engine under a memory cap
(``gpu_extra.oom_part``).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu  # noqa: E402  (sets sys.path, PROBE_DATA)
import torch  # noqa: E402

from probe.scoring import Scorer  # noqa: E402


def syncs(scorer: Scorer, reqs: list, device: str) -> int | None:
    """Host-device synchronisations of one score() call (CUDA only: each raises a sync warning)."""
    if not device.startswith("cuda"):
        return None
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scorer.score(reqs)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return sum("synchroniz" in str(w.message).lower() for w in caught)


def engine_row(lm: Any, reqs: list, device: str, packed: bool, peak: dict, label: str) -> dict[str, Any]:
    from gpu_extra import profile_part

    scorer = Scorer(lm, batch_size="auto", token_budget="auto")
    scorer.packed = packed
    m = gpu.measure(lm, reqs, device, scorer=scorer)
    c0 = dict(scorer.engine.counts())
    results = m.pop("_results")
    m.pop("_scorer")
    row = {"engine": "new" if packed else "old", **m, "counts": c0, **gpu.flops_share(lm, m, peak)}
    row["syncs_per_call"] = syncs(scorer, reqs, device)
    row["profile"] = profile_part(lm, reqs, device, label, packed=packed)
    return row, results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = gpu.workload_parser(__doc__, concepts=2, sg_n=3)
    ap.add_argument("--gemm-n", type=int, default=8192)
    ap.add_argument("--no-oom", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    tok = gpu.load_tokenizer(args.tokenizer)
    peak = gpu.gemm_peak(args.device, getattr(torch, args.dtype), args.gemm_n if args.device.startswith("cuda") else 256)
    lm = gpu.build_random(args.shape, tok, args.device, args.dtype)
    bbq, _ = gpu.bbq_workload(tok, args.limit, "Age,Nationality,Religion")
    sg = gpu.hbb_workload(tok, args.concepts, args.sg_n)["sg"]
    out: dict[str, Any] = {"shape": args.shape, "dtype": args.dtype, "device": args.device, "gemm_peak": peak,
                           "environment": gpu.environment(args.device)}
    for label, reqs in (("bbq", bbq), ("hbb_sg", sg)):
        try:
            old, old_res = engine_row(lm, reqs, args.device, False, peak, label)
            new, new_res = engine_row(lm, reqs, args.device, True, peak, label)
        except Exception as exc:  # noqa: BLE001 - the traceback is the figure; the next parts still run
            import traceback

            traceback.print_exc()
            out[label] = {"failed": f"{type(exc).__name__}: {str(exc)[:500]}"}
            gpu.release()
            continue
        a = [x for r in old_res for x in (getattr(r, "logprobs", ()) or [r.nll])]
        b = [x for r in new_res for x in (getattr(r, "logprobs", ()) or [r.nll])]
        out[label] = {"old": old, "new": new, "speedup": old["seconds"] / new["seconds"],
                      "max_abs_delta": max(abs(x - y) for x, y in zip(a, b))}
        print(label, json.dumps({k: {e: {f: out[label][e][f] for f in ("seconds", "forward_passes",
                                                                       "share_of_gemm_peak", "syncs_per_call")}
                                      for e in ("old", "new")} for k in [label]}, default=str), flush=True)
        print(" busy share old/new:", out[label]["old"]["profile"]["device_busy_share"],
              out[label]["new"]["profile"]["device_busy_share"], "speedup", out[label]["speedup"],
              "max|delta|", out[label]["max_abs_delta"], flush=True)
        if args.json:  # what is measured so far survives a time limit
            Path(args.json).with_suffix(".partial.json").write_text(json.dumps(gpu.public(out), indent=1, default=str))
    if not args.no_oom:
        from gpu_extra import oom_part

        ref = Scorer(lm, batch_size="auto", token_budget="auto").score(bbq)
        out["oom"] = oom_part(lm, bbq, ref, args.device)
        print("oom", json.dumps(out["oom"], default=str), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(gpu.public(out), indent=1, default=str))
    return out


if __name__ == "__main__":
    main()
