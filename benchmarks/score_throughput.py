"""Throughput of probe's scorer vs a naive loop, on the same requests, in one process.

Naive loop: one full forward per (prompt, option) sequence, no batching, no
prefix sharing, full-vocabulary log_softmax (what a straightforward script
does). probe: ``Scorer`` with batching, deduplication and shared prefixes.
Both compute the same numbers; the script checks that they agree and prints
the speed ratio.

    python benchmarks/score_throughput.py            # demo set, smollm2
    python benchmarks/score_throughput.py --quick    # fewer items
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probe.tasks.demo.data import demo_items  # noqa: E402
from probe.tasks.demo.task import request_for  # noqa: E402
from probe.models import load_model  # noqa: E402
from probe.scoring import ContinuationRequest, LabelRequest, Scorer  # noqa: E402


def labelled_request(item: dict, tokenizer) -> LabelRequest:
    from probe.tasks.demo.task import SYSTEM, user_turn
    from probe.prompts.chat import render_prompt

    choices = "\n".join(f"{l}. {o}" for l, o in zip("ABC", item["options"]))
    user = user_turn(item).removesuffix("Answer:") + f"Options:\n{choices}\n\nAnswer with A, B or C."
    prompt = render_prompt(tokenizer, user, system=SYSTEM, prefill="Answer:")
    return LabelRequest(item["id"] + "-label", prompt, ("A", "B", "C"), group=f"scenario-{item['scenario']}")


@torch.inference_mode()
def naive(lm, scorer: Scorer, requests) -> list[list[float]]:
    """One forward per sequence, full log_softmax; token ids from the same encoder."""
    out = []
    for r in requests:
        enc = scorer.encode(r)
        numbers = []
        for seq in enc.sequences:
            logits = lm.model(torch.tensor([seq.ids])).logits[0].float()
            lp = torch.log_softmax(logits, dim=-1)
            if isinstance(r, LabelRequest):
                numbers += [lp[-1, v[0]].item() for v in enc.label_variants]
            else:
                numbers += [lp[j - 1, seq.ids[j]].item() for j in range(seq.score_from, len(seq.ids))]
        out.append(numbers)
    return out


def flat(res) -> list[float]:
    if hasattr(res, "label_mass"):
        return list(res.logprobs)
    return [x for t in res.token_logprobs for x in t]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--quick", action="store_true", help="16 items instead of all 64")
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()

    lm = load_model(args.model)
    items = demo_items()[:16] if args.quick else demo_items()
    requests = [request_for(it, lm.tokenizer) for it in items] + [labelled_request(it, lm.tokenizer) for it in items]
    scorer = Scorer(lm, batch_size=args.batch_size)
    n_seq = sum(len(scorer.encode(r).sequences) for r in requests)
    scorer.score(requests[:2])  # warm-up (allocator, thread pool)

    t = time.perf_counter()
    ref = naive(lm, scorer, requests)
    t_naive = time.perf_counter() - t

    scorer.engine.reset_counts()
    t = time.perf_counter()
    results = scorer.score(requests)
    t_probe = time.perf_counter() - t

    diff = max(abs(a - b) for res, r in zip(results, ref) for a, b in zip(flat(res), r))
    total_tokens = sum(len(s.ids) for r in requests for s in scorer.encode(r).sequences)
    print(f"machine: {platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}, torch {torch.__version__}")
    print(f"requests: {len(requests)} ({len(items)} demo items x continuation + label), sequences: {n_seq}, tokens: {total_tokens}")
    print(f"naive loop: {t_naive:.2f} s, {len(requests) / t_naive:.2f} items/s, {n_seq} forward passes")
    print(f"probe:      {t_probe:.2f} s, {len(requests) / t_probe:.2f} items/s, {scorer.engine.forward_passes} forward passes, "
          f"{scorer.engine.tokens_run} tokens computed")
    print(f"probe/naive={t_naive / t_probe:.2f} max_abs_diff={diff:.2e}")


if __name__ == "__main__":
    main()
