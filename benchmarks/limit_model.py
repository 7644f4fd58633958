"""Limit model for the scorer: how close is probe to the machine's float32 matrix-multiply peak?

Three pieces, used by ``benchmarks/vs_lm_eval.py`` (and runnable alone):

- :func:`gemm_peak` measures the float32 GEMM rate of this machine, now, with
  the current torch thread count: ``torch.matmul`` of two n x n matrices,
  best of several repetitions, ``2 n^3`` FLOPs each.
- :func:`flops_estimate` turns the scorer's count of tokens actually computed
  (``scorer.engine.tokens_run``: unique tokens after deduplication and prefix
  sharing) into FLOPs: ``2 x n_parameters`` per token (the usual dense
  forward-pass estimate), and a tighter variant that charges the output
  embedding only at the scored positions (probe unembeds nothing else).
  Attention-score FLOPs (``~4 x layers x d_model x context`` per token, a few
  per cent at BBQ prompt lengths) are left out of both, so both are lower
  bounds on the work done.
- :func:`variant_scaling` scores one question with 1, 2, 4, ... demographic
  variants in one group (a shared prefix) and records tokens computed,
  forward passes and wall time: the cost of each extra variant.

    python benchmarks/limit_model.py            # GEMM peak only, a few seconds
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any, Sequence

import torch


@dataclass(frozen=True)
class GemmPeak:
    n: int
    reps: int
    best_s: float
    median_s: float
    threads: int

    @property
    def flops(self) -> float:
        return 2.0 * self.n**3

    @property
    def peak_flops_per_s(self) -> float:
        """Best repetition: the machine's attainable float32 rate right now."""
        return self.flops / self.best_s


def gemm_peak(n: int = 2048, reps: int = 8, warmup: int = 2) -> GemmPeak:
    """float32 ``torch.matmul`` rate of an ``n x n`` by ``n x n`` product (best of ``reps``)."""
    if n < 1 or reps < 1:
        raise ValueError("n and reps must be positive")
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen, dtype=torch.float32)
    b = torch.randn(n, n, generator=gen, dtype=torch.float32)
    out = torch.empty(n, n, dtype=torch.float32)
    for _ in range(warmup):  # thread pool start-up and first-touch page faults
        torch.matmul(a, b, out=out)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        torch.matmul(a, b, out=out)
        times.append(time.perf_counter() - t)
    times.sort()
    return GemmPeak(n=n, reps=reps, best_s=times[0], median_s=times[len(times) // 2], threads=torch.get_num_threads())


@dataclass(frozen=True)
class FlopsEstimate:
    tokens_run: int
    scored_positions: int
    n_parameters: int
    n_output_embedding: int  # d_model x vocab: applied by probe only at scored positions

    @property
    def dense(self) -> float:
        """``2 x n_parameters x tokens_run`` (the brief's formula; charges the head at every token)."""
        return 2.0 * self.n_parameters * self.tokens_run

    @property
    def tight(self) -> float:
        """Body at every computed token, output head only where a log-probability is read."""
        body = self.n_parameters - self.n_output_embedding
        return 2.0 * body * self.tokens_run + 2.0 * self.n_output_embedding * self.scored_positions


def cpu_model(name: str, threads: int | None = None) -> Any:
    """``name`` (a probe model name) loaded on the CPU in float32, after setting torch's threads (None:
    torch's choice)."""
    from probe.models import load_model

    if threads:
        torch.set_num_threads(threads)
    return load_model(name, device="cpu", dtype="float32")


def output_embedding_size(model: Any) -> int:
    """Parameters of the unembedding matrix (counted once in ``n_parameters`` when tied)."""
    head = model.get_output_embeddings()
    return int(head.weight.numel()) if head is not None else 0


def flops_estimate(model: Any, tokens_run: int, scored_positions: int) -> FlopsEstimate:
    # parameters() yields a tied weight once, so the embedding is counted once.
    n = sum(p.numel() for p in model.parameters())
    return FlopsEstimate(tokens_run, scored_positions, n, output_embedding_size(model))


def scored_positions(scorer: Any, requests: Sequence[Any]) -> int:
    """Positions whose hidden state goes through the head, over the unique sequences of ``requests``."""
    seen: set[tuple[tuple[int, ...], int]] = set()
    total = 0
    for r in requests:
        for s in scorer.encode(r).sequences:
            if (s.ids, s.score_from) in seen:
                continue
            seen.add((s.ids, s.score_from))
            total += 1 if s.label_ids else len(s.ids) - s.score_from
    return total


@dataclass(frozen=True)
class VariantPoint:
    k: int
    tokens_run: int
    forward_passes: int
    seconds: float  # best of the repetitions
    unshared_tokens: int  # what a loop over the sequences without sharing computes


def variant_scaling(
    scorer: Any, variants: Sequence[Any], ks: Sequence[int] = (1, 2, 4, 8, 16), reps: int = 3
) -> list[VariantPoint]:
    """Score the first ``k`` requests of ``variants`` (one question's demographic variants,
    already in one ``group``) for each ``k``; the requests must share their group key."""
    points = []
    for k in ks:
        if k > len(variants):
            break
        reqs = list(variants[:k])
        unshared = sum(len(s.ids) for r in reqs for s in scorer.encode(r).sequences)
        best = float("inf")
        for _ in range(reps):
            scorer.engine.reset_counts()
            t = time.perf_counter()
            scorer.score(reqs)
            best = min(best, time.perf_counter() - t)
        points.append(VariantPoint(k, scorer.engine.tokens_run, scorer.engine.forward_passes, best, unshared))
    return points


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    p = gemm_peak(args.n, args.reps)
    print(f"float32 GEMM {p.n}x{p.n}, {p.threads} threads: best {p.best_s * 1e3:.1f} ms "
          f"({p.peak_flops_per_s / 1e9:.1f} GFLOP/s), median {p.median_s * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
