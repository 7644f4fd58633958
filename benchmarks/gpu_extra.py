"""Two parts of ``benchmarks/gpu.py`` kept apart: the out-of-memory back-off and parse_exact's cost.

``oom_part``: the model's BBQ requests scored with a batch far too large for the
memory left to the process (``torch.cuda.set_per_process_memory_fraction``: the
weights plus a small margin), so the first passes fail with
``torch.OutOfMemoryError`` and :meth:`probe.scoring.Scorer._back_off` halves the
rows and tokens per pass until they fit. Compared with the normal run (automatic
batching, no cap): how many results are identical, the largest |delta| of any
log-probability, and the same for a scorer started at the caps the back-off
ended on (on a GPU, different pass shapes can pick different kernels, so the
normal run is not expected to be bit-identical; the same-caps run shows what
the back-off itself changes).

``parse_part``: :func:`benchmarks.parse_exact_cost.cost_rows` on the model in
hand (ImplicitBBQ zero-shot one-word prompts): nodes, forward tokens, wall
seconds of parse_exact against K seeded samples per prompt.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch


def _values(results: list) -> list[float]:
    """Every log-probability a result carries (labels, options or tokens), flattened in a fixed order."""
    return [float(x) for r in results for x in getattr(r, "logprobs", ()) or getattr(r, "token_logprobs", ())]


def _compare(a: list, b: list) -> tuple[int, float]:
    """(requests whose values are all identical, max |delta| over all values)."""
    same, worst = 0, 0.0
    for x, y in zip(a, b):
        vx, vy = _values([x]), _values([y])
        if vx == vy:
            same += 1
        for p, q in zip(vx, vy):
            if math.isfinite(p) and math.isfinite(q):
                worst = max(worst, abs(p - q))
    return same, worst


def oom_part(lm: Any, reqs: list, reference: list, device: str, margin_gib: float = 4.0) -> dict[str, Any]:
    """Score ``reqs`` with 100,000 rows / 50M tokens per pass under a memory cap of what is allocated now (the
    weights, mostly) + ``margin_gib``."""
    if not device.startswith("cuda"):
        return {"skipped": "needs a CUDA device (the cap is torch.cuda.set_per_process_memory_fraction)"}
    from probe.scoring import Scorer

    import gc

    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    weights = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    in_use = torch.cuda.memory_allocated()  # the weights and whatever earlier parts still hold
    cap = (in_use + margin_gib * 2**30) / total
    torch.cuda.set_per_process_memory_fraction(min(cap, 1.0))
    try:
        scorer = Scorer(lm, batch_size=100_000, token_budget=50_000_000)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = scorer.score(reqs)
        back_offs = sum("out of memory" in str(w.message) for w in caught)
        rows, tokens = scorer.driver.row_cap, scorer.driver.budget_cap
        same_caps = Scorer(lm, batch_size=rows, token_budget=tokens).score(reqs)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    # with the cap lifted, the same scorer's caps grow back after a run of good passes (GROW_AFTER)
    try:
        passes_before = scorer.engine.counts().get("forward_passes", 0)
        scorer.score(reqs)
        scorer.score(reqs)
        grown = {"rows": scorer.driver.row_cap, "tokens": scorer.driver.budget_cap,
                 "passes": scorer.engine.counts().get("forward_passes", 0) - passes_before}
    except Exception as exc:  # noqa: BLE001 - report it; the recovery figures above still stand
        grown = {"failed": f"{type(exc).__name__}: {str(exc)[:300]}"}
    identical, diff = _compare(results, reference)
    identical_caps, diff_caps = _compare(results, same_caps)
    return {"memory_cap_gib": round(cap * total / 2**30, 2), "weights_gib": round(weights / 2**30, 2),
            "allocated_before_gib": round(in_use / 2**30, 2),
            "asked_rows": 100_000, "asked_tokens": 50_000_000, "back_offs": back_offs,
            "final_rows": rows, "final_tokens": tokens, "after_cap_lifted": grown, "n": len(reqs), "all_scored": len(results) == len(reqs),
            "identical": identical, "max_abs_diff": diff,
            "identical_same_caps": identical_caps, "max_abs_diff_same_caps": diff_caps,
            "values_compared": len(_values(results))}


def parse_part(lm: Any, args: Any, device: str) -> dict[str, Any]:
    """parse_exact vs K seeded samples on ``args.parse_prompts`` ImplicitBBQ prompts for ``lm``."""
    from parse_exact_cost import cost_rows, implicitbbq_parse_requests

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    preqs = implicitbbq_parse_requests(lm.tokenizer, args.parse_prompts)
    rows = cost_rows(lm, preqs, args.parse_settings, max_new=10, residual=0.01, max_nodes=args.parse_max_nodes,
                     sync=sync)
    return {"prompts": len(preqs), "max_new_tokens": 10, "residual_target": 0.01,
            "max_nodes": args.parse_max_nodes, "rows": rows}


def profile_part(lm: Any, reqs: list, device: str, label: str, packed: bool = True) -> dict[str, Any]:
    """Where the time of scoring ``reqs`` goes: wall seconds against the summed device time of the kernels
    (torch.profiler; device-type events only: an operator's device time repeats its kernels', so summing
    every event counted each kernel twice), and the operators that take the most device and host time.
    ``packed=False``: the level-by-level path (the engine before packed passes)."""
    import time

    from torch.profiler import ProfilerActivity, profile

    from probe.scoring import Scorer

    scorer = Scorer(lm, batch_size="auto", token_budget="auto")
    scorer.packed = packed
    scorer.score(reqs[: min(8, len(reqs))])  # warm-up
    cuda = device.startswith("cuda")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=acts) as prof:
        t = time.perf_counter()
        scorer.score(reqs)
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t
    events = prof.key_averages()

    def dev(e: Any) -> float:
        return float(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0)) or 0.0)

    from torch.autograd import DeviceType

    kernels = [e for e in events if getattr(e, "device_type", None) == DeviceType.CUDA]
    kernel_s = sum(dev(e) for e in kernels) / 1e6
    top_dev = sorted(kernels, key=dev, reverse=True)[:8]
    top_cpu = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:8]
    return {"label": label, "packed": packed, "requests": len(reqs), "wall_s": wall, "device_kernel_s": kernel_s,
            "device_busy_share": kernel_s / wall if wall else None,
            "top_device_ops": [(e.key, round(dev(e) / 1e6, 4), e.count) for e in top_dev],
            "top_host_ops": [(e.key, round(e.self_cpu_time_total / 1e6, 4), e.count) for e in top_cpu]}
