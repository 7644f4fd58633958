"""Exact scoring: next-token labels, continuation log-likelihoods, perplexities.

The request schema (:mod:`probe.scoring.requests`) and the tokenization rules
(:mod:`probe.scoring.tokens`) need no torch, so the layers that build requests
(prompts, tasks) import them without loading it; :class:`Scorer` (torch) loads
on first use.
"""

from typing import TYPE_CHECKING, Any

from probe.scoring.requests import (
    ContinuationRequest,
    ContinuationResult,
    LabelRequest,
    LabelResult,
    PerplexityRequest,
    PerplexityResult,
    Request,
    Result,
    softmax,
)
from probe.scoring.sampler.sampling import SampledContinuation, SampledLabel, SamplingSpec

if TYPE_CHECKING:
    from probe.scoring.scorer import Scorer

__all__ = [
    "ContinuationRequest",
    "ContinuationResult",
    "LabelRequest",
    "LabelResult",
    "PerplexityRequest",
    "PerplexityResult",
    "Request",
    "Result",
    "SampledContinuation",
    "SampledLabel",
    "SamplingSpec",
    "Scorer",
    "softmax",
]


def __getattr__(name: str) -> Any:
    # PEP 562: importing the package (e.g. for the request classes) must not load torch.
    if name == "Scorer":
        from probe.scoring.scorer import Scorer

        return Scorer
    raise AttributeError(f"module 'probe.scoring' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"Scorer"})
