"""Where the packed pass's GPU time goes: attention kernel, first call of a shape vs repeats, and the
out-of-memory back-off on a workload that must back off. One process, one random-weight model.

    python benchmarks/gpu_attention.py --device cuda --tokenizer DIR --json out.json   # the 8B shape, bf16
    python benchmarks/gpu_attention.py --device cpu --shape tiny --limit 8 --concepts 1 --sg-n 2  # a dry run

For BBQ (``--limit`` questions) and HBB-SG (``--concepts`` pairs, ``--sg-n`` variations), the packed engine
scores the same requests three times in a row under each SDPA backend choice (PyTorch's default, which picks
cuDNN's attention on Hopper when a mask is given, and the memory-efficient kernel alone): the first call of a
new pass shape pays for building the kernel's plan, the repeats do not. Each time is also a share of the
measured bf16 GEMM peak (model FLOPs on unique tokens). Then the OOM back-off on HBB-SG under a memory cap of
what is allocated + ``--oom-margin-gib``, asked for 100,000 rows / 50M tokens per pass.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu  # noqa: E402  (sets sys.path, PROBE_DATA)
import limit_model  # noqa: E402
import torch  # noqa: E402

from probe.scoring import Scorer  # noqa: E402


def backends() -> dict[str, Any]:
    """SDPA backend choices to compare: the default dispatch and the memory-efficient kernel alone."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return {"default": contextlib.nullcontext, "efficient": lambda: sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION])}


def repeats(lm: Any, reqs: list, device: str, peak: dict, context: Any, n: int = 3) -> dict[str, Any]:
    scorer = Scorer(lm, batch_size="auto", token_budget="auto")
    with context():
        scorer.score(reqs[: min(8, len(reqs))])  # warm-up on another shape: kernels load, allocator warms
        positions = limit_model.scored_positions(scorer, reqs)
        times, shares = [], []
        for _ in range(n):
            scorer.engine.tokens_run = scorer.engine.forward_passes = 0
            results, seconds = gpu.timed(device, lambda: scorer.score(reqs))
            m = {"unique_tokens": scorer.engine.tokens_run, "scored_positions": positions, "seconds": seconds}
            times.append(seconds)
            shares.append(gpu.flops_share(lm, m, peak)["share_of_gemm_peak"])
    return {"seconds": times, "share_of_gemm_peak": shares, "unique_tokens": scorer.engine.tokens_run,
            "forward_passes": scorer.engine.forward_passes, "_results": results}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shape", default="llama-3.1-8b", choices=sorted(gpu.SHAPES))
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--tokenizer", default="smollm2")
    ap.add_argument("--limit", type=int, default=192)
    ap.add_argument("--concepts", type=int, default=6)
    ap.add_argument("--sg-n", type=int, default=10)
    ap.add_argument("--oom-requests", type=int, default=2000)
    ap.add_argument("--oom-margin-gib", type=float, default=4.0)
    ap.add_argument("--gemm-n", type=int, default=8192)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    tok = gpu.load_tokenizer(args.tokenizer)
    cuda = args.device.startswith("cuda")
    peak = gpu.gemm_peak(args.device, getattr(torch, args.dtype), args.gemm_n if cuda else 256)
    lm = gpu.build_random(args.shape, tok, args.device, args.dtype)
    bbq, _ = gpu.bbq_workload(tok, args.limit, "Age,Nationality,Religion")
    hbb = gpu.hbb_workload(tok, args.concepts, args.sg_n)
    out: dict[str, Any] = {"shape": args.shape, "dtype": args.dtype, "gemm_peak": peak,
                           "environment": gpu.environment(args.device), "hbb_instances": hbb["instances"]}

    def save() -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(gpu.public(out), indent=1, default=str))

    for label, reqs, sampling in (("bbq", bbq, ()), ("hbb_mcq", hbb["mcq"], hbb["sampling"]),
                                  ("hbb_sg", hbb["sg"], ())):
        out[label] = {}
        for name, context in backends().items():
            if sampling and name != "default":
                continue
            try:
                if sampling:  # MCQ carries its sampling specs: time it through gpu.measure's path
                    m = gpu.measure(lm, reqs, args.device, sampling=sampling)
                    m2 = gpu.measure(lm, reqs, args.device, sampling=sampling, scorer=m["_scorer"])
                    out[label][name] = {"seconds": [m["seconds"], m2["seconds"]],
                                        "share_of_gemm_peak": [gpu.flops_share(lm, x, peak)["share_of_gemm_peak"]
                                                               for x in (m, m2)]}
                else:
                    out[label][name] = repeats(lm, reqs, args.device, peak, context)
            except Exception as exc:  # noqa: BLE001 - the failure is the figure; the next parts still run
                out[label][name] = {"failed": f"{type(exc).__name__}: {str(exc)[:400]}"}
            print(label, name, json.dumps(gpu.public(out[label][name]), default=str), flush=True)
            gpu.release()
        save()
    seconds = {k: min(v.get("default", {}).get("seconds", [float("nan")])) for k, v in out.items()
               if k in ("hbb_mcq", "hbb_sg")}
    if len(seconds) == 2:
        per_instance = sum(seconds.values()) / hbb["instances"]
        out["hbb_projection_minutes_warm"] = per_instance * gpu.FULL_HBB_INSTANCES / 60
        print("full HBB projected (warm shapes):", round(out["hbb_projection_minutes_warm"], 1), "min", flush=True)
    if cuda:
        from gpu_extra import oom_part

        sub = hbb["sg"][: args.oom_requests]
        ref = Scorer(lm, batch_size="auto", token_budget="auto").score(sub)
        try:
            out["oom"] = oom_part(lm, sub, ref, args.device, margin_gib=args.oom_margin_gib)
        except Exception as exc:  # noqa: BLE001
            out["oom"] = {"failed": f"{type(exc).__name__}: {str(exc)[:400]}"}
        print("oom", json.dumps(out["oom"], default=str), flush=True)
    save()
    return out


if __name__ == "__main__":
    main()
