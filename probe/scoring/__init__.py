"""Exact scoring: next-token labels, continuation log-likelihoods, perplexities."""

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
    "Scorer",
    "softmax",
]
