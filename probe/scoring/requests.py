"""The three request kinds the scorer understands, and their results.

A request carries a fully rendered prompt string (see :mod:`probe.prompts.chat`
for chat templates, system messages and prefills). The scorer tokenizes it, so
every number is tied to exact token ids, never to strings alone.

Requests with the same ``group`` (e.g. the paired demographic variants of one
question) are always scored in the same batch, and share the forward pass of
their longest common token prefix.

>>> r = LabelRequest(id="q1", prompt="Question: 2+2=4? Answer:", labels=("Yes", "No"))
>>> r.kind
'label'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Union

#: How a label or continuation is joined to its prompt (see ``docs/scoring.md``):
#: ``auto``  - prepend a space unless the prompt already ends in whitespace
#:             (the lm-evaluation-harness convention: "Answer:" + " A");
#: ``space`` - always prepend a space; ``none`` - never;
#: ``both``  - labels only: sum the probability of the bare and the spaced token.
SpaceRule = Literal["auto", "space", "none", "both"]


@dataclass(frozen=True)
class LabelRequest:
    """Next-token label scoring: P(first token of each label | prompt)."""

    id: str
    prompt: str
    labels: tuple[str, ...]
    group: str | None = None
    space: SpaceRule = "auto"
    add_special_tokens: bool | None = None  # None: BOS for raw prompts only
    kind: Literal["label"] = field(default="label", init=False)
    #: Item fields carried through to the result and the record (category, setting, ...);
    #: never used for scoring. Not hashed (a mapping), but compared.
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False)
    #: Optional surface forms per label (same order as ``labels``), e.g. ``(("Yes", " yes", "YES"), ...)``:
    #: a label's probability is then the sum over the distinct tokens of those forms that encode to ONE
    #: token on their own (no joining rule, ``space`` unused); other forms are skipped. Empty: the label
    #: itself under the joining rule.
    forms: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        _check_common(self.id, self.prompt)
        if len(self.labels) < 1:
            raise ValueError(f"request {self.id!r}: field 'labels' is empty")
        if any(not isinstance(x, str) or not x.strip() for x in self.labels):
            raise ValueError(f"request {self.id!r}: field 'labels' has an empty or non-string label")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(f"request {self.id!r}: field 'labels' has duplicates: {list(self.labels)}")
        if self.forms:
            forms = tuple((f,) if isinstance(f, str) else tuple(f) for f in self.forms)
            if len(forms) != len(self.labels):
                raise ValueError(f"request {self.id!r}: field 'forms' needs one tuple of forms per label "
                                 f"({len(self.labels)}), got {len(forms)}")
            if any(not f or any(not isinstance(x, str) or not x for x in f) for f in forms):
                raise ValueError(f"request {self.id!r}: field 'forms' has an empty tuple or a non-string form")
            object.__setattr__(self, "forms", forms)  # lists from YAML/JSON become hashable tuples


@dataclass(frozen=True)
class ContinuationRequest:
    """Log-likelihood of each option text as the continuation of the prompt."""

    id: str
    prompt: str
    options: tuple[str, ...]
    group: str | None = None
    space: SpaceRule = "auto"
    add_special_tokens: bool | None = None
    kind: Literal["continuation"] = field(default="continuation", init=False)
    #: Item fields carried through to the result and the record (category, setting, ...);
    #: never used for scoring. Not hashed (a mapping), but compared.
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        _check_common(self.id, self.prompt)
        if len(self.options) < 1:
            raise ValueError(f"request {self.id!r}: field 'options' is empty")
        if any(not isinstance(x, str) or x == "" for x in self.options):
            raise ValueError(f"request {self.id!r}: field 'options' has an empty or non-string option")
        if self.space == "both":
            raise ValueError(f"request {self.id!r}: space='both' applies to label requests only")


@dataclass(frozen=True)
class PerplexityRequest:
    """Perplexity of ``text``, optionally conditioned on an unscored ``prefix``."""

    id: str
    text: str
    prefix: str = ""
    group: str | None = None
    space: SpaceRule = "none"
    add_special_tokens: bool | None = None
    kind: Literal["perplexity"] = field(default="perplexity", init=False)
    #: Item fields carried through to the result and the record (category, setting, ...);
    #: never used for scoring. Not hashed (a mapping), but compared.
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError("request has an empty or non-string 'id'")
        if not isinstance(self.text, str) or not self.text:
            raise ValueError(f"request {self.id!r}: field 'text' is empty")
        if not isinstance(self.prefix, str):
            raise ValueError(f"request {self.id!r}: field 'prefix' is not a string")


Request = Union[LabelRequest, ContinuationRequest, PerplexityRequest]


@dataclass(frozen=True)
class LabelResult:
    id: str
    labels: tuple[str, ...]
    logprobs: tuple[float, ...]  # raw log P(label token | prompt), full-vocabulary softmax
    probs: tuple[float, ...]  # softmax over the labels only (sums to 1)
    label_mass: float  # total probability the labels carry in the full distribution
    token_ids: tuple[tuple[int, ...], ...]  # the token id(s) counted for each label
    n_prompt_tokens: int
    finite: bool = True  # False when the logits held NaN/inf: never average such a result
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    #: per requested SamplingSpec, a probe.scoring.sampler.sampling.SampledLabel (empty: exact scores only)
    sampling: tuple[Any, ...] = ()
    #: with ``Scorer.score(capture=...)``: ``{'{hook}@{position}': float32 [d_model]}`` (else empty)
    activations: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)

    @property
    def argmax(self) -> int:
        return max(range(len(self.probs)), key=lambda i: (self.probs[i], -i))


@dataclass(frozen=True)
class ContinuationResult:
    id: str
    options: tuple[str, ...]
    logprobs: tuple[float, ...]  # summed log-likelihood of each option
    token_logprobs: tuple[tuple[float, ...], ...]
    token_counts: tuple[int, ...]
    byte_counts: tuple[int, ...]  # UTF-8 bytes of the option text as scored (with its joining space)
    n_prompt_tokens: int
    finite: bool = True
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    #: per requested SamplingSpec, a probe.scoring.sampler.sampling.SampledContinuation (empty: exact scores only)
    sampling: tuple[Any, ...] = ()
    #: with ``Scorer.score(capture=...)``: ``{'{hook}@{position}': float32 [d_model]}`` (else empty)
    activations: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)

    @property
    def mean_logprobs(self) -> tuple[float, ...]:
        return tuple(lp / n for lp, n in zip(self.logprobs, self.token_counts))

    @property
    def per_byte_logprobs(self) -> tuple[float, ...]:
        return tuple(lp / max(b, 1) for lp, b in zip(self.logprobs, self.byte_counts))

    def probs(self, normalization: Literal["sum", "mean", "byte"] = "sum") -> tuple[float, ...]:
        """Softmax over the options of the chosen log-likelihood (sum, per token, per byte)."""
        scores = {"sum": self.logprobs, "mean": self.mean_logprobs, "byte": self.per_byte_logprobs}[normalization]
        return softmax(scores)


@dataclass(frozen=True)
class PerplexityResult:
    id: str
    ppl: float
    nll: float  # summed negative log-likelihood of the scored tokens
    n_tokens: int
    token_logprobs: tuple[float, ...]
    finite: bool = True
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    # with capture: '{hook}@last' at the text's last token
    activations: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)


Result = Union[LabelResult, ContinuationResult, PerplexityResult]


def softmax(scores: tuple[float, ...] | list[float]) -> tuple[float, ...]:
    """Numerically stable softmax of a few floats (-inf allowed; all -inf gives NaNs)."""
    m = max(scores)
    if m == -math.inf or math.isnan(m):
        return tuple(math.nan for _ in scores)
    exps = [math.exp(s - m) for s in scores]
    total = sum(exps)
    return tuple(e / total for e in exps)


def _check_common(request_id: object, prompt: object) -> None:
    if not isinstance(request_id, str) or not request_id:
        raise ValueError("request has an empty or non-string 'id'")
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"request {request_id!r}: field 'prompt' is empty or not a string")


def check_prompt_request(kind: str, request_id: Any, prompt: Any, max_new_tokens: Any) -> None:
    """The checks every request that generates after a prompt shares (parse and generation requests): a
    non-empty string id and prompt, at least one new token; a ValueError naming the request and field.

    >>> check_prompt_request("generation", "q1", "Q:", 0)
    Traceback (most recent call last):
    ValueError: generation request 'q1': max_new_tokens must be >= 1
    """
    if not isinstance(request_id, str) or not request_id:
        raise ValueError(f"{kind} request has an empty or non-string 'id'")
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"{kind} request {request_id!r}: field 'prompt' is empty")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"{kind} request {request_id!r}: max_new_tokens must be >= 1")
