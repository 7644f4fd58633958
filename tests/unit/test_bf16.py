"""bfloat16 scores against a float32 reference, within the tolerance stated in ``docs/scoring.md``.

The same weights are scored in float32 and cast to bfloat16 (bfloat16 matrix
products run on the CPU). Stated tolerance (docs/scoring.md, "Precision"):

- label probabilities: |delta p| <= 0.05;
- continuation log-likelihoods: |delta| <= 0.2 nats per token of the option;
- an argmax may differ only where the float32 top two are closer than the
  two tolerances together (a near tie), never otherwise.

Measured: tiny models here up to 0.023 (probabilities) and 0.058 nats/token;
SmolLM2-135M on 96 BBQ questions 0.038 and 0.141 nats/token, argmax agreement
92/96 (letters) and 94/96 (answer texts) (``benchmarks/bf16_numerics.py``,
``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

from probe.models import LoadedModel
from probe.scoring import ContinuationRequest, LabelRequest, Scorer
from probe.scoring.requests import ContinuationResult, LabelResult

LABEL_PROB_TOL = 0.05
CONT_LL_PER_TOKEN_TOL = 0.2

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def _bf16(lm: LoadedModel) -> LoadedModel:
    return LoadedModel(model=copy.deepcopy(lm.model).to(torch.bfloat16), tokenizer=lm.tokenizer, name=lm.name,
                       source=lm.source, dtype="bfloat16")


def _requests(labels: tuple[str, ...] = ("A", "B", "C")) -> list:
    out: list = []
    for i in range(30):
        out.append(LabelRequest(f"l{i}", f"Person A has item {i}. Person B has smooth skin. Who was not comfortable? "
                                         "Answer:", labels, group=f"g{i % 5}"))
        out.append(ContinuationRequest(f"c{i}", f"The grandfather and the grandson {i} tried to book a cab. Answer:",
                                       ("Person A", "the grandson", "Not enough information"), group=f"g{i % 5}"))
    return out


def _argmax(xs) -> int:
    return max(range(len(xs)), key=lambda i: (xs[i], -i))


def _check(ref: list, low: list) -> dict:
    """Assert the stated tolerance; return the agreement counts."""
    counts = {"label": [0, 0], "continuation": [0, 0]}
    for r, s in zip(ref, low):
        assert r.id == s.id and s.finite
        if isinstance(r, LabelResult):
            for a, b in zip(r.probs, s.probs):
                assert abs(a - b) <= LABEL_PROB_TOL, (r.id, a, b)
            top = sorted(r.probs, reverse=True)
            if _argmax(r.probs) != _argmax(s.probs):
                assert top[0] - top[1] <= 2 * LABEL_PROB_TOL, (r.id, r.probs, s.probs)  # only a near tie flips
            counts["label"][0] += _argmax(r.probs) == _argmax(s.probs)
            counts["label"][1] += 1
        elif isinstance(r, ContinuationResult):
            for a, b, n in zip(r.logprobs, s.logprobs, r.token_counts):
                assert abs(a - b) <= CONT_LL_PER_TOKEN_TOL * n, (r.id, a, b, n)
            i, j = _argmax(r.logprobs), _argmax(s.logprobs)
            if i != j:
                bound = CONT_LL_PER_TOKEN_TOL * (r.token_counts[i] + r.token_counts[j])
                assert r.logprobs[i] - r.logprobs[j] <= bound, (r.id, r.logprobs, s.logprobs)
            counts["continuation"][0] += i == j
            counts["continuation"][1] += 1
    return counts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bf16_within_tolerance_on_the_tiny_llama(seed):
    from tests.tiny import tiny_lm

    lm = tiny_lm(seed=seed)
    reqs = _requests()
    counts = _check(Scorer(lm).score(reqs), Scorer(_bf16(lm)).score(reqs))
    assert counts["label"][1] == counts["continuation"][1] == 30
    # measured on these seeds: 30/30, 30/30, 29/30 letters; 30/30 answer texts
    assert counts["label"][0] >= 28 and counts["continuation"][0] >= 28


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_bf16_within_tolerance_on_the_activation_tiny_models(attn):
    from tests.unit._tiny_models import tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer()
    lm = LoadedModel(model=tiny_llama(tok, attn=attn), tokenizer=tok, name="tiny", source="tests")
    reqs = _requests()
    counts = _check(Scorer(lm).score(reqs), Scorer(_bf16(lm)).score(reqs))
    # weights x 8 (large activations): letters flip more often, but only at near ties (checked above)
    assert counts["label"][1] == counts["continuation"][1] == 30


def test_bf16_scores_are_the_same_with_and_without_prefix_sharing():
    """Sharing adds no bfloat16 error of its own: within the tolerance of the unshared computation."""
    from tests.tiny import tiny_lm

    low = _bf16(tiny_lm())
    reqs = _requests()
    _check(Scorer(low, share_prefixes=False).score(reqs), Scorer(low).score(reqs))


def test_the_benchmark_comparison_counts_flips_and_near_ties():
    """benchmarks/bf16_numerics.compare on hand-made results."""
    from bf16_numerics import compare

    def lab(i, probs):
        return LabelResult(id=i, labels=("A", "B"), logprobs=tuple(float(torch.tensor(p).log()) for p in probs),
                           probs=probs, label_mass=1.0, token_ids=((1,), (2,)), n_prompt_tokens=3)

    ref = [lab("a", (0.7, 0.3)), lab("b", (0.504, 0.496))]
    low = [lab("a", (0.69, 0.31)), lab("b", (0.49, 0.51))]
    c = compare(ref, low)["label"]
    assert (c["n"], c["agree"], c["near_ties"], c["flips_at_near_ties"]) == (2, 1, 1, 1)
    assert c["max_abs_dp"] == pytest.approx(0.014)
