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
from probe.scoring.engine import PACKED_SDPA_BACKENDS  # noqa: E402


def backends() -> dict[str, Any]:
    """SDPA backend choices to compare: PyTorch's own dispatch and the memory-efficient kernel alone."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return {"default": contextlib.nullcontext, "efficient": lambda: sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION])}


#: the engine's packed-pass preference (None: PyTorch's own dispatch, cuDNN first on Hopper)
POLICIES = {"pytorch_default": None, "efficient_first": PACKED_SDPA_BACKENDS, "flex": "flex"}


def chunked(lm: Any, workloads: dict[str, tuple[list, tuple]], device: str, peak: dict, policy: Any,
            chunk: int) -> dict[str, Any]:
    """Each workload scored as the Runner does, ``chunk`` requests per call, with a fresh Scorer under
    ``policy``: every call's pass shape is new, as in a real run."""
    scorer = Scorer(lm, batch_size="auto", token_budget="auto")
    if policy == "flex":  # FlexAttention with the block mask (compiled on first use: in the first calls' time)
        scorer.engine.attention_kernel = "flex"
    else:
        scorer.engine.attention_backends = policy
    scorer.score(workloads["bbq"][0][:8])  # warm-up: kernels load, allocator warms
    out: dict[str, Any] = {}
    for label, (reqs, sampling) in workloads.items():
        scorer.engine.reset_counts()
        parts = [reqs[i:i + chunk] for i in range(0, len(reqs), chunk)]
        got, seconds = gpu.timed(device, lambda: [scorer.score(x, sampling=sampling) for x in parts])
        m = {"unique_tokens": scorer.engine.tokens_run, "scored_positions": limit_model.scored_positions(scorer, reqs),
             "seconds": seconds}
        out[label] = {"calls": len(parts), "seconds": seconds, "forward_passes": scorer.engine.forward_passes,
                      "unique_tokens": m["unique_tokens"], **gpu.flops_share(lm, m, peak)}
        print(" ", label, json.dumps(out[label], default=str), flush=True)
        out[label]["_values"] = [x for part in got for r in part for x in (getattr(r, "logprobs", ()) or [r.nll])]
    return out


def repeats(lm: Any, reqs: list, device: str, peak: dict, context: Any, n: int = 3) -> dict[str, Any]:
    scorer = Scorer(lm, batch_size="auto", token_budget="auto")
    scorer.engine.attention_backends = None  # the context decides
    with context():
        scorer.score(reqs[: min(8, len(reqs))])  # warm-up on another shape: kernels load, allocator warms
        positions = limit_model.scored_positions(scorer, reqs)
        times, shares = [], []
        for _ in range(n):
            scorer.engine.reset_counts()
            results, seconds = gpu.timed(device, lambda: scorer.score(reqs))
            m = {"unique_tokens": scorer.engine.tokens_run, "scored_positions": positions, "seconds": seconds}
            times.append(seconds)
            shares.append(gpu.flops_share(lm, m, peak)["share_of_gemm_peak"])
    return {"seconds": times, "share_of_gemm_peak": shares, "unique_tokens": scorer.engine.tokens_run,
            "forward_passes": scorer.engine.forward_passes, "_results": results}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = gpu.workload_parser(__doc__, concepts=6, sg_n=10)
    ap.add_argument("--oom-requests", type=int, default=2000)
    ap.add_argument("--oom-margin-gib", type=float, default=4.0)
    ap.add_argument("--gemm-n", type=int, default=8192)
    ap.add_argument("--chunk", type=int, default=0, help="also score each workload in calls of this many "
                    "requests (the Runner's chunk_size is 1024) under PyTorch's and the engine's attention choice")
    ap.add_argument("--policies", default="pytorch_default,efficient_first",
                    help="attention choices of --chunk, comma-separated: pytorch_default, efficient_first, flex")
    ap.add_argument("--skip-repeats", action="store_true")
    ap.add_argument("--skip-oom", action="store_true")
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

    if args.chunk:
        workloads = {"bbq": (bbq, ()), "hbb_mcq": (hbb["mcq"], hbb["sampling"]), "hbb_sg": (hbb["sg"], ())}
        out["chunked"] = {"chunk": args.chunk}
        for name, policy in POLICIES.items():
            if name not in args.policies.split(","):
                continue
            print("chunked", name, flush=True)
            try:
                got = out["chunked"][name] = chunked(lm, workloads, args.device, peak, policy, args.chunk)
                per_instance = (got["hbb_mcq"]["seconds"] + got["hbb_sg"]["seconds"]) / hbb["instances"]
                got["hbb_projection_minutes"] = per_instance * gpu.FULL_HBB_INSTANCES / 60
                print("  full HBB projected:", round(got["hbb_projection_minutes"], 1), "min", flush=True)
            except Exception as exc:  # noqa: BLE001
                out["chunked"][name] = {"failed": f"{type(exc).__name__}: {str(exc)[:400]}"}
                print("  failed", out["chunked"][name], flush=True)
            gpu.release()
            save()
        a, b = (out["chunked"].get(n, {}) for n in args.policies.split(",")[:2])
        if "bbq" in a and "bbq" in b:
            for label in ("bbq", "hbb_sg"):
                out["chunked"][f"max_abs_delta_{label}"] = max(
                    abs(x - y) for x, y in zip(a[label]["_values"], b[label]["_values"]))
            print("max |delta| between the two attention choices:",
                  {k: v for k, v in out["chunked"].items() if k.startswith("max_abs")}, flush=True)
        if cuda:
            from gpu_extra import profile_part

            out["profile_sg_chunk"] = profile_part(lm, hbb["sg"][: args.chunk], args.device, "hbb_sg")
            prof = out["profile_sg_chunk"]
            print("profile", json.dumps({k: prof[k] for k in ("wall_s", "device_kernel_s", "device_busy_share")}),
                  flush=True)
            for row in prof["top_device_ops"]:
                print("   dev", str(row[0])[:90], row[1:], flush=True)
            save()
    for label, reqs, sampling in (("bbq", bbq, ()), ("hbb_mcq", hbb["mcq"], hbb["sampling"]),
                                  ("hbb_sg", hbb["sg"], ())):
        if args.skip_repeats:
            break
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
    if cuda and not args.skip_oom:
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
