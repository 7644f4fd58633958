"""The hybrid's tail draws over one key/value store against a cache per row, one process.

The same hybrid parse stage (``benchmarks/parse_exact_cost.py --hybrid``: ImplicitBBQ zero-shot prompts, the
exact head to ``K x max_new / 2`` nodes, then tail draws within the K samples' tokens) runs twice per repeat,
in turns: with the tail's draws over one store (``Engine.tree_store_of``, the default where the model allows)
and with a cache per row (the store switched off). The head is the same in both. Per run: the tail's wall
and CPU seconds, its forward tokens and passes, process CPU seconds of the whole stage, and whether the draws' answers
are the same.

    python benchmarks/tail_store.py --prompts 12 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--max-new", type=int, default=10)
    ap.add_argument("--setting", default="0.7:0.9:20", help="T:top_p:K")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("PROBE_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
    sys.path.insert(0, os.path.dirname(__file__))
    from parse_exact_cost import _hybrid, implicitbbq_parse_requests

    from probe.models import load_model
    from probe.scoring.engine import Engine
    from probe.scoring.sampler.sampling import SamplingSpec

    lm = load_model(args.model, device="cpu", dtype="float32")
    preqs = implicitbbq_parse_requests(lm.tokenizer, args.prompts)
    t, p, k = args.setting.split(":")
    spec = SamplingSpec(float(t), float(p))
    import probe.scoring.parse.hybrid as hybrid

    store_of, fits = Engine.tree_store_of, Engine.tree_fits
    complete_tails = hybrid.complete_tails
    tail_cpu, tail_passes, in_tail = [0.0], [0], [False]
    decoder = Engine._decoder

    def counting(self, **kw):  # the tail's forward passes
        tail_passes[0] += in_tail[0]
        return decoder(self, **kw)

    def timed(*a, **kw):  # the tail's own process CPU seconds (tail_seconds is wall time)
        c = time.process_time()
        in_tail[0] = True
        try:
            return complete_tails(*a, **kw)
        finally:
            in_tail[0] = False
            tail_cpu[0] += time.process_time() - c

    Engine._decoder = counting

    hybrid.complete_tails = timed
    tails = {}
    for rep in range(args.repeats):
        for mode in ("store", "rows"):
            if mode == "rows":  # the per-row caches as a model without the store runs them (64 rows a pass)
                Engine.tree_store_of = lambda self, blocks, longest: None
                Engine.tree_fits = lambda self, longest: False
            try:
                c0, tail_cpu[0], tail_passes[0] = time.process_time(), 0.0, 0
                dists = _hybrid(lm, preqs, spec, int(k), args.max_new, 0.01, None)
                cpu = time.process_time() - c0
            finally:
                Engine.tree_store_of, Engine.tree_fits = store_of, fits
            tails[mode] = [d.hybrid["tail"] for d in dists]
            print(json.dumps({"repeat": rep, "mode": mode, "T": spec.temperature, "top_p": spec.top_p, "K": int(k),
                              "prompts": len(dists), "tail_draws": sum(d.hybrid["n_tail"] for d in dists),
                              "tail_tokens": sum(d.hybrid["tokens"] for d in dists), "tail_passes": tail_passes[0],
                              "tail_wall_s": round(sum(getattr(d, "tail_seconds", 0.0) for d in dists), 3),
                              "tail_cpu_s": round(tail_cpu[0], 2), "stage_cpu_s": round(cpu, 2),
                              **({"same_answers_as_rows": tails["store"] == tails["rows"]} if mode == "rows" else {})}),
                  flush=True)


if __name__ == "__main__":
    main()
