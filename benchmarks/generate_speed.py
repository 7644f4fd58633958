"""Batched generation's CPU time and texts: ``greedy_generate`` and ``sample_generate`` on a few chat prompts.

Prints CPU seconds per run and a digest of every text, so two trees can be compared one after the other
(``PYTHONPATH=<tree> python benchmarks/generate_speed.py``): same digest, same texts.

    python benchmarks/generate_speed.py --threads 1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

QUESTIONS = ["Why is the sky blue? Think step by step.", "Explain photosynthesis in detail.",
             "Tell me a long story about a cat.", "List ten facts about the moon."]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    from limit_model import cpu_model
    from probe.scoring.generate import greedy_generate, sample_generate

    lm = cpu_model(args.model, args.threads)
    prompts = [lm.tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                                add_generation_prompt=True) for q in QUESTIONS]
    greedy_generate(lm, prompts[:1], max_new_tokens=4)  # warm-up
    texts: list[list[str]] = []
    for _ in range(args.repeats):
        t = time.process_time()
        greedy = greedy_generate(lm, prompts, max_new_tokens=args.max_new_tokens, batch_size=len(prompts))
        t_greedy = time.process_time() - t
        t = time.process_time()
        sampled = sample_generate(lm, prompts, list(range(1, len(prompts) + 1)), 0.7, 0.9,
                                  max_new_tokens=args.max_new_tokens, batch_size=len(prompts))
        t_sampled = time.process_time() - t
        print(f"greedy {t_greedy:.2f} s, sampled {t_sampled:.2f} s CPU", flush=True)
        texts = texts or [greedy, sampled]
    print("digest", hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:16])


if __name__ == "__main__":
    main()
