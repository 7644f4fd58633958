"""Cost of the parsed answer computed exactly (parse_exact) against the K samples it replaces, one process.

For the same prompts and the same parser, at each temperature: forward tokens and
process CPU time of ``parse_exact`` (enumeration to ``--residual`` or
``--max-nodes``) and of K seeded samples per prompt through the sampling check's
sampler (the prompt run once, its cache shared by the K rows, ``--max-new`` tokens).

    python benchmarks/parse_exact_cost.py --prompts 24 --threads 1
    python benchmarks/parse_exact_cost.py --prompts 12 --threads 1 --hybrid

``--hybrid``: the parse stage as the tasks run it where the tree does not close: the exact head to half the
K samples' tokens (``K x max_new / 2`` nodes), then tail draws (:mod:`probe.scoring.parse.hybrid`) within the K
samples' forward tokens; its tokens count the head's passes and the draws' (the prompt's vectors are reused).

Prompts: ImplicitBBQ zero-shot one-word prompts (ambiguous and disambiguated,
explicit and implicit), parser ``probe.tasks.implicitbbq.parse.parse_oneword``.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--max-new", type=int, default=10)
    ap.add_argument("--residual", type=float, default=0.01)
    ap.add_argument("--max-nodes", type=int, default=400)
    ap.add_argument("--answer-residual", type=float, default=None,
                    help="also enumerate to this fraction of the parsed mass (ImplicitBBQ uses 0.05)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hybrid", action="store_true", help="the exact head plus sampled tail, within K samples")
    ap.add_argument("--settings", default="0.1:1.0:20,0.7:0.9:20,0.7:0.9:25,0.8:0.9:20",
                    help="T:top_p:K triples")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("PROBE_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
    from probe.models import load_model

    lm = load_model(args.model, device="cpu", dtype="float32")
    preqs = implicitbbq_parse_requests(lm.tokenizer, args.prompts)
    for row in cost_rows(lm, preqs, args.settings, max_new=args.max_new, residual=args.residual,
                         max_nodes=args.max_nodes, answer_residual=args.answer_residual, hybrid=args.hybrid):
        print(json.dumps(row), flush=True)


def implicitbbq_parse_requests(tokenizer, n: int) -> list:
    """``n`` ImplicitBBQ zero-shot one-word parse requests (ambiguous and disambiguated, explicit and implicit)."""
    from probe.tasks import get

    task = get("implicitbbq")
    cfg = task.make_config({"strategies": ["zero_shot"], "context_kinds": ["explicit", "implicit"],
                            "per_cell": {"zero_shot": max(1, n // 24)}, "seed": 0})
    items = task.selection.select(cfg, task.items(cfg), None)
    return task.paper.parse_requests(cfg, items, tokenizer)[:n]


def cost_rows(lm, preqs: list, settings: str, *, max_new: int, residual: float, max_nodes: int,
              sync=lambda: None, answer_residual: float | None = None, hybrid: bool = False) -> list[dict]:
    """parse_exact against K seeded samples per prompt on ``preqs``, for each ``T:top_p:K`` of ``settings``:
    forward tokens, process CPU seconds and wall seconds (``sync`` waits for the device before a clock is read).
    ``hybrid``: the exact head to ``K x max_new / 2`` nodes plus tail draws (the tasks' ``parse_tail: hybrid``)."""
    from probe.tasks.implicitbbq.parse import oneword_decided
    from probe.scoring.generate import sample_shared_prefix
    from probe.scoring.engine import Engine
    from probe.scoring.generate import generation_seed
    from probe.scoring.parse.exact import parse_exact
    from probe.scoring.parse.schema import ParseSettings
    from probe.scoring.sampler.sampling import SamplingSpec

    prompts = [r.prompt for r in preqs]
    parsers = [r.parser for r in preqs]
    tok = lm.tokenizer
    prompt_tokens = sum(len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts)
    counted = {"tokens": 0}
    orig = Engine._decoder

    def counting(self, **kw):  # forward tokens of the enumeration: non-pad input positions of every pass
        mask = kw["attention_mask"]
        if mask.dim() == 4:  # a frontier pass over the store (probe.scoring.engine.tree_cache): one row, no padding
            counted["tokens"] += int(kw["input_ids"].numel())
        else:
            counted["tokens"] += int(mask[:, -kw["input_ids"].shape[1]:].sum())
        return orig(self, **kw)

    Engine._decoder = counting
    rows = []
    done: dict = {}  # the enumeration depends on (T, top_p) only: K = 20 and K = 25 share it
    try:
        for setting in settings.split(","):
            t, p, k = setting.split(":")
            spec = SamplingSpec(float(t), float(p))
            key = (spec, int(k)) if hybrid else spec
            if key not in done:
                counted["tokens"] = 0
                sync()
                c0, w0 = time.process_time(), time.perf_counter()
                if hybrid:
                    dists = _hybrid(lm, preqs, spec, int(k), max_new, residual, answer_residual)
                else:
                    settings = ParseSettings(max_new, residual=residual, max_nodes=max_nodes,
                                             answer_residual=answer_residual)
                    dists = parse_exact(lm, prompts, spec, parsers, settings, decided=oneword_decided)
                sync()
                # the tail draws run on the engine too: their passes are in the count already
                done[key] = (dists, time.process_time() - c0, time.perf_counter() - w0, counted["tokens"])
            dists, pe_cpu, pe_wall, pe_tokens = done[key]
            seeds = [[generation_seed(0, f"{i}#{j}") for j in range(int(k))] for i in range(len(prompts))]
            sync()
            c0, w0 = time.process_time(), time.perf_counter()
            texts = sample_shared_prefix(lm, prompts, seeds, spec.temperature, spec.top_p, max_new)
            sync()
            s_cpu, s_wall = time.process_time() - c0, time.perf_counter() - w0
            # sampling's forward tokens: the prompt once, then every row of K at every step until all end
            s_tokens = prompt_tokens + sum(int(k) * max(1, min(max_new, 1 + max(
                len(tok(x, add_special_tokens=False)["input_ids"]) for x in row))) for row in texts)
            rows.append({"T": spec.temperature, "top_p": spec.top_p, "K": int(k), "prompts": len(prompts), "answer_residual": answer_residual,
                         "parse_exact_tokens": pe_tokens, "parse_exact_nodes": sum(d.nodes for d in dists),
                         "parse_exact_cpu_s": round(pe_cpu, 2), "parse_exact_wall_s": round(pe_wall, 3),
                         "max_residual": max(d.residual for d in dists),
                         "mean_residual": sum(d.residual for d in dists) / len(dists),
                         "mean_rejected": sum(d.rejected for d in dists) / len(dists),
                         **({"mode": "hybrid", "tail_draws": sum(d.hybrid["n_tail"] for d in dists),
                             "tail_tokens": sum(d.hybrid["tokens"] for d in dists),
                             # wall seconds of the batched tail draws inside parse_exact_wall_s
                             "tail_wall_s": round(sum(getattr(d, "tail_seconds", 0.0) for d in dists), 3),
                             "prompts_drawn": sum(1 for d in dists if d.hybrid["n_tail"])} if hybrid else {}),
                         "sampling_tokens": s_tokens, "sampling_cpu_s": round(s_cpu, 2),
                         "sampling_wall_s": round(s_wall, 3),
                         "cpu_ratio_parse_exact_over_sampling": round(pe_cpu / max(s_cpu, 1e-9), 3),
                         "wall_ratio_parse_exact_over_sampling": round(pe_wall / max(s_wall, 1e-9), 3)})
    finally:
        Engine._decoder = orig
    return rows

def _hybrid(lm, preqs: list, spec, k: int, max_new: int, residual: float, answer_residual: float | None) -> list:
    """The tasks' hybrid parse stage on ``preqs`` at ``spec``: the head to ``k x max_new / 2`` nodes, then tail
    draws within ``k x max_new`` forward tokens per prompt (seeded)."""
    import dataclasses

    from probe.scoring.parse.exact import run_parse_requests
    from probe.scoring.parse.schema import TailSpec

    reqs = [dataclasses.replace(r, temperature=spec.temperature, top_p=spec.top_p, max_new_tokens=max_new,
                                residual=residual, answer_residual=answer_residual, max_nodes=k * max_new // 2,
                                tail=TailSpec(k)) for r in preqs]
    return run_parse_requests(lm, reqs)


if __name__ == "__main__":
    main()
