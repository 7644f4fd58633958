"""The packed pass's attention on a CPU: whole rows under the dense tree mask vs block by block.

One process, one model, the BBQ requests of ``vs_lm_eval.py`` (48 questions with
``--quick``): the same ``Scorer`` scores them with ``Engine.attention_kernel =
"sdpa"`` (SDPA over each whole row, every masked pair computed) and ``"blocks"``
(SDPA per subtree against its own keys and the stems above it:
``probe.scoring.engine.attention.block_attention``), alternating, ``--repeats`` times each.
Prints CPU seconds per run, the pass's shape and blocks, and the largest
difference between the two kernels' log-likelihoods.

    python benchmarks/attention_blocks.py --quick --threads 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_lm_eval  # noqa: E402  (its import sets the offline environment, PROBE_DATA and the package path)
import limit_model  # noqa: E402
import torch  # noqa: E402

from probe.scoring import Scorer  # noqa: E402
from probe.scoring.engine import packed  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--quick", action="store_true", help="48 BBQ questions (else 192)")
    ap.add_argument("--limit", type=int, default=None, help="BBQ questions (overrides --quick)")
    ap.add_argument("--categories", default="Age,Nationality,Religion")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    lm = limit_model.cpu_model(args.model, args.threads)
    items = vs_lm_eval.select_items(args.categories.split(","), args.limit or (48 if args.quick else 192))
    reqs = vs_lm_eval.probe_requests(lm.tokenizer, items)
    shapes: list[tuple] = []
    stage = packed.arrays

    def spy(p, pad_id):  # the pass's shape and blocks, as the scorer stages it
        a = stage(p, pad_id)
        shapes.append((a.ids.shape, sum(len(b) for b in a.blocks), a.computed))
        return a

    import probe.scoring.engine.driver as scorer_module

    scorer_module.arrays = spy
    scorer = Scorer(lm, batch_size=16)
    scorer.score(reqs[:2])  # warm-up
    cpu: dict[str, list[float]] = {"sdpa": [], "blocks": []}
    values: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for kernel in cpu:
            scorer.engine.attention_kernel = kernel
            t = time.process_time()
            out = scorer.score(reqs)
            cpu[kernel].append(time.process_time() - t)
            values.setdefault(kernel, vs_lm_eval.probe_values(out))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, model {lm.name}; {len(items)} BBQ questions, "
          f"{len(reqs)} requests; last pass: rows x width {tuple(shapes[-1][0])}, {shapes[-1][1]} blocks, "
          f"{shapes[-1][2]} tokens")
    for kernel, runs in cpu.items():
        print(f"  {kernel:7s} CPU s: " + ", ".join(f"{t:.2f}" for t in runs))
    diff = max(abs(a - b) for a, b in zip(values["sdpa"], values["blocks"]))
    print(f"blocks/sdpa={min(cpu['blocks']) / min(cpu['sdpa']):.2f} max_abs_diff={diff:.2e}")


if __name__ == "__main__":
    with torch.inference_mode():
        main()
