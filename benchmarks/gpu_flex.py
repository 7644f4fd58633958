"""The packed pass's attention as FlexAttention with a block mask, against SDPA with the dense 4-D mask.

    python benchmarks/gpu_flex.py --device cuda --tokenizer DIR --json out.json   # the 8B shape, bf16
    python benchmarks/gpu_flex.py --device cpu --shape tiny --limit 8 --concepts 1 --sg-n 2   # a dry run

A packed row's tree mask hides most (query, key) pairs, but SDPA with a dense mask computes them all.
FlexAttention's ``BlockMask`` skips the 128 x 128 tiles the mask hides whole. For the passes the packed
engine plans for BBQ and one Runner chunk of HBB-SG (1,024 requests), the decoder runs once per variant
on the same ``[rows, width]`` inputs: SDPA with the additive mask (PyTorch's kernel choice), then
FlexAttention (transformers' ``flex_attention`` implementation, compiled on first use). Reported per
variant: the first call (plan build or compilation) and the median of three more, the mask's build
time, the share of tiles computed, and the last hidden states' largest difference at real tokens.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu  # noqa: E402  (sets sys.path, PROBE_DATA)
import torch  # noqa: E402

from probe.scoring import Scorer  # noqa: E402
from probe.scoring.engine import Engine  # noqa: E402


def planned_passes(lm: Any, reqs: list) -> list[tuple]:
    """The packed passes a normal score() call runs for ``reqs``: their device inputs, recorded."""
    seen: list[tuple] = []
    original = Engine.run_packed

    def record(self: Engine, ids, pos, pre, end, max_position):  # noqa: ANN001
        seen.append((ids, pos, pre, end, max_position))
        return original(self, ids, pos, pre, end, max_position)

    Engine.run_packed = record
    try:
        Scorer(lm, batch_size="auto", token_budget="auto").score(reqs)
    finally:
        Engine.run_packed = original
    return seen


def block_mask(pre: torch.Tensor, end: torch.Tensor) -> Any:
    """The tree mask as a FlexAttention ``BlockMask``: key j is seen by query i when j is not later in the
    row and j's node is i's or an ancestor of it (as ``probe.scoring.engine.attention.tree_mask``)."""
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b, h, q, kv):  # noqa: ANN001, ANN202
        return (kv <= q) & (pre[b, kv] <= pre[b, q]) & (pre[b, q] < end[b, kv])

    rows, width = pre.shape
    return create_block_mask(mask_mod, rows, None, width, width, device=pre.device)


def timed_calls(device: str, fn: Any, n: int = 3) -> dict[str, Any]:
    out, first = gpu.timed(device, fn)
    rest = [gpu.timed(device, fn)[1] for _ in range(n)]
    return {"first_s": first, "median_s": statistics.median(rest), "repeats_s": rest, "_out": out}


def compare(lm: Any, label: str, passes: list[tuple], device: str) -> dict[str, Any]:
    engine = Engine(lm.model, lm.tokenizer.pad_token_id or 0)
    ids, pos, pre, end, max_position = passes[0]
    real = pre < (1 << 40)
    row: dict[str, Any] = {"passes": len(passes), "rows": int(ids.shape[0]), "width": int(ids.shape[1]),
                           "tokens": int(real.sum())}
    lm.model.set_attn_implementation("sdpa")
    sdpa = timed_calls(device, lambda: engine.run_packed(ids, pos, pre, end, max_position))
    bm, mask_s = gpu.timed(device, lambda: block_mask(pre, end))
    row["block_mask_s"] = mask_s
    row["tiles_computed_share"] = float(bm.sparsity() and (100.0 - bm.sparsity()) / 100.0)
    lm.model.set_attn_implementation("flex_attention")
    torch._dynamo.reset()  # each workload compiles for its own shape (no dynamic-shape recompilation)
    try:
        flex = timed_calls(device, lambda: engine._decoder(input_ids=ids, attention_mask=bm, position_ids=pos,
                                                           use_cache=False).last_hidden_state)
    finally:
        lm.model.set_attn_implementation("sdpa")
    a, b = sdpa.pop("_out")[real].float(), flex.pop("_out")[real].float()
    row["sdpa"], row["flex"] = sdpa, flex
    row["max_abs_delta_hidden"] = float((a - b).abs().max())
    row["relative_delta_hidden"] = float((a - b).norm() / a.norm())
    row["flex_speedup_warm"] = sdpa["median_s"] / flex["median_s"]
    print(label, json.dumps(row, default=str), flush=True)
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = gpu.workload_parser(__doc__, concepts=6, sg_n=10)
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    tok = gpu.load_tokenizer(args.tokenizer)
    lm = gpu.build_random(args.shape, tok, args.device, args.dtype)
    bbq, _ = gpu.bbq_workload(tok, args.limit, "Age,Nationality,Religion")
    sg = gpu.hbb_workload(tok, args.concepts, args.sg_n)["sg"][: args.chunk]
    out: dict[str, Any] = {"shape": args.shape, "dtype": args.dtype, "environment": gpu.environment(args.device)}
    for label, reqs in (("bbq", bbq), ("hbb_sg_chunk", sg)):
        try:
            out[label] = compare(lm, label, planned_passes(lm, reqs), args.device)
        except Exception as exc:  # noqa: BLE001 - the failure is the figure
            import traceback

            traceback.print_exc()
            out[label] = {"failed": f"{type(exc).__name__}: {str(exc)[:500]}"}
        gpu.release()
        if args.json:
            Path(args.json).write_text(json.dumps(gpu.public(out), indent=1, default=str))
    return out


if __name__ == "__main__":
    main()
