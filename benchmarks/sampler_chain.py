"""The whole sampler per path: what one step costs, and what the papers' presets change.

Two measurements, one process:

- ``cost``: the time of :func:`probe.scoring.sampler.chain.step_distribution` for
  ``--rows`` paths over a ``--vocab`` vocabulary (random float32 logits), as a
  ratio to :func:`probe.scoring.sampler.sampling.sampling_distribution` on the same
  logits (the per-step distribution ``parse_exact`` uses now), for T / top-p
  alone, for the HBB open-weight chain (top-k 50, repetition penalty 1.2 over a
  ``--history``-token path) and for a chain with every step on; random logits of
  spread ``--scale`` (3: wide nuclei, past the top-256 prefix, the slow case);
- ``effect`` (``--hbb N``): on N HBB MCQ prompts (the task's own, chat template
  on) and the given model, the first generated token's distribution at T = 0.8
  alone (the paper's sampling as the task scores it) against the authors'
  open-weight sampler (preset ``hbb``: T = 0.8, top-k 50, repetition penalty 1.2
  counting the prompt): total variation distance, how often the most probable
  token changes, and the mass on the first tokens of the labels ``a`` / ``b``.

    python benchmarks/sampler_chain.py --threads 1
    python benchmarks/sampler_chain.py --threads 1 --hbb 40 --model smollm2
"""

from __future__ import annotations

import argparse
import statistics
import time


def _time(fn, repeat: int) -> float:
    fn()  # warm up
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def cost(rows: int, vocab: int, history: int, repeat: int, scale: float) -> None:
    import torch

    from probe.scoring.sampler.chain import SamplerChain, TokenHistory, step_distribution
    from probe.scoring.sampler.sampling import SamplingSpec, sampling_distribution

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, vocab, generator=gen) * scale
    h = TokenHistory.from_ids(torch.randint(0, vocab, (rows, history), generator=gen).tolist(),
                              torch.randint(0, vocab, (rows, 8), generator=gen).tolist())
    base = _time(lambda: sampling_distribution(x, SamplingSpec(0.7, 0.9)), repeat)
    print(f"cost: {rows} rows x {vocab} vocabulary, logits N(0, {scale:g}^2); "
          f"sampling_distribution(T 0.7, top-p 0.9) {base * 1e3:.1f} ms")
    for name, chain in (("T 0.7, top-p 0.9", SamplerChain(0.7, top_p=0.9)),
                        ("T 0.8, top-k 50, repetition 1.2", SamplerChain(0.8, top_k=50, repetition_penalty=1.2)),
                        ("every step", SamplerChain(0.7, top_k=50, top_p=0.9, min_p=0.05, repetition_penalty=1.2,
                                                    frequency_penalty=0.6, presence_penalty=0.1))):
        t = _time(lambda: step_distribution(x, chain, h), repeat)
        print(f"cost: step_distribution({name}) {t * 1e3:.1f} ms = {t / base:.2f}x")


def effect(model: str, n: int) -> None:
    import torch

    from probe.data.hbb import unique_questions
    from probe.models import load_model
    from probe.prompts.hbb import mcq_requests
    from probe.scoring.sampler.chain import SamplerChain, TokenHistory, step_distribution
    from probe.scoring.tokens import wants_special_tokens
    from probe.tasks.hbb.task import HBBConfig, HBBTask
    from probe.tasks.paper_samplers import preset

    lm = load_model(model, device="cpu", dtype="float32")
    tok = lm.tokenizer
    reqs = mcq_requests(unique_questions(HBBTask().items(HBBConfig(sample_concepts=n)))[:n], tok)
    plain, authors = SamplerChain(0.8), preset("hbb").chain
    labels = [tok(t, add_special_tokens=False).input_ids[0] for t in ("a", "b")]
    tv, changed, mass_plain, mass_authors = [], 0, [], []
    for r in reqs:
        ids = tok(r.prompt, add_special_tokens=wants_special_tokens(tok, r.prompt)).input_ids
        with torch.no_grad():
            logits = lm.model(torch.tensor([ids])).logits[0, -1]
        p0 = step_distribution(logits, plain).probs[0]
        p1 = step_distribution(logits, authors, TokenHistory.from_ids([ids])).probs[0]
        tv.append(0.5 * float((p0 - p1).abs().sum()))
        changed += int(p0.argmax() != p1.argmax())
        mass_plain.append(float(p0[labels].sum()))
        mass_authors.append(float(p1[labels].sum()))
    print(f"effect: {model}, {len(reqs)} HBB MCQ prompts, first generated token, T = 0.8 alone vs preset hbb "
          f"({authors.describe()})")
    print(f"effect: total variation mean {statistics.mean(tv):.3f}, min {min(tv):.3f}, max {max(tv):.3f}; "
          f"most probable token changed on {changed} of {len(reqs)}")
    print(f"effect: mass on the first tokens of 'a' / 'b': mean {statistics.mean(mass_plain):.3f} at T = 0.8 "
          f"alone, {statistics.mean(mass_authors):.4f} with the authors' sampler")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=49152)  # SmolLM2's
    ap.add_argument("--history", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scale", type=float, default=3.0, help="logit spread: 3 gives wide nuclei (full sorts)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hbb", type=int, default=0, help="also measure the HBB presets' effect on N prompts")
    ap.add_argument("--model", default="smollm2")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    cost(args.rows, args.vocab, args.history, args.repeat, args.scale)
    if args.hbb:
        effect(args.model, args.hbb)


if __name__ == "__main__":
    main()
