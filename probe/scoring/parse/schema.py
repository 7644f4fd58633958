"""The parse stage's schema: :class:`ParseRequest` (a prompt whose parsed answer under sampling a task
needs) and :class:`ParseDistribution` (that answer's certified distribution). No torch; the
enumeration is :func:`probe.scoring.parse.exact.parse_exact`, which re-exports both.

>>> d = ParseDistribution({"A": 0.6, "B": 0.3}, rejected=0.05, residual=0.05, nodes=12, prompt_tokens=30)
>>> [round(x, 4) for x in d.normalized(["A", "B"])]
[0.6667, 0.3333]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Hashable, Sequence

from probe.scoring.requests import check_prompt_request

__all__ = ["ParseDistribution", "ParseRequest", "ParseSettings", "TailSpec", "check_parse_settings"]


@dataclass(frozen=True)
class ParseSettings:
    """How far :func:`~probe.scoring.parse.exact.parse_exact` enumerates, and how it batches.

    ``max_new_tokens``: the generation budget. ``residual``: stop a prompt once the mass not enumerated is at
    most this. ``max_nodes``: most forward tokens per prompt (None: no limit). ``answer_residual``: also go on
    until the residual is at most this fraction of the prompt's parsed mass (``sum(probs)``), so the answer
    *given* that the parser returned one is certified to about this precision (a paper that samples until an
    answer parses reads that conditional, about which an absolute ``residual`` says little where few
    generations parse); never below ``residual * answer_residual`` (nor past ``max_nodes``). ``prune``:
    children below this path mass are not expanded and count as residual (None: the smallest stopping
    residual / 1000). ``batch_size``: nodes per forward pass; ``prompt_batch``: prompts enumerated together
    (their caches held at once); ``top``: most probable generations kept per prompt. ``frontier``: also give
    each result the tail it left (:func:`~probe.scoring.parse.tree.frontier_of`), for the hybrid estimator;
    ``open_at_budget``: a branch reaching ``max_new_tokens`` undecided is not parsed but left open (residual,
    in the frontier), for a tail sampled to a longer budget. ``progress``: a bar over the prompts.
    ``tail_batch``: most rows a pass of the hybrid's tail draws where each row needs its own cache.

    >>> ParseSettings(8, residual=0.01).pruning()
    1e-05
    >>> ParseSettings(0)
    Traceback (most recent call last):
    ValueError: parse_exact: max_new_tokens must be >= 1, got 0
    """

    max_new_tokens: int
    residual: float = 0.01
    max_nodes: int | None = None
    answer_residual: float | None = None
    prune: float | None = None
    batch_size: int = 32
    prompt_batch: int = 16
    top: int = 10
    frontier: bool = False
    open_at_budget: bool = False
    progress: bool = False
    tail_batch: int = 64

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"parse_exact: max_new_tokens must be >= 1, got {self.max_new_tokens!r}")
        if not 0 <= self.residual < 1:
            raise ValueError(f"parse_exact: residual must be in [0, 1), got {self.residual!r}")
        if self.answer_residual is not None and not 0 < self.answer_residual <= 1:
            raise ValueError(f"parse_exact: answer_residual must be in (0, 1], got {self.answer_residual!r}")

    def pruning(self) -> float:
        """The pruning mass: ``prune``, else the smallest stopping residual / 1000 (children below it are not
        worth a pass)."""
        if self.prune is not None:
            return float(self.prune)
        smallest = self.residual * self.answer_residual if self.answer_residual is not None else self.residual
        return smallest / 1000


@dataclass(frozen=True)
class TailSpec:
    """The hybrid estimator's sampled tail for one parse request (:mod:`probe.scoring.parse.hybrid`).

    ``samples``: the K samples the paper draws per prompt; a prompt whose residual ``r`` is above its target
    draws ``ceil(K x r)`` tail generations (:func:`~probe.scoring.parse.hybrid.tail_budget`): its interval no
    wider than the paper's K-sample share's, at most the paper's K generations. ``max_new_tokens``: the tail's generation budget when it is longer
    than the enumeration's (HBB: the authors' 2048): a branch the enumeration cut at its own budget is then
    not parsed but left to the tail (None: the enumeration's budget). ``seed``: the draws' seed (with the
    request id).
    """

    samples: int
    max_new_tokens: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 1:
            raise ValueError(f"the hybrid tail needs samples >= 1, got {self.samples!r}")
        if self.max_new_tokens is not None and (not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1):
            raise ValueError(f"the hybrid tail's max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")


@dataclass
class ParseDistribution:
    """The parser's answer under sampling, for one prompt.

    ``probs``: answer -> mass of the enumerated generations parsed to it;
    ``rejected``: mass of enumerated generations parsed to None; ``residual``:
    mass not enumerated (an upper bound on what any answer may still gain);
    ``nodes``: forward tokens spent on generated positions; ``prompt_tokens``:
    the prompt's own tokens (run once); ``top``: the most probable enumerated
    generations, ``(text, mass, answer)``, best first.
    """

    probs: dict[Any, float]
    rejected: float
    residual: float
    nodes: int
    prompt_tokens: int = 0
    top: list[tuple[str, float, Any]] = field(default_factory=list)
    #: the tail the enumeration left, ``(mass, (path, below))`` (only when asked for; never serialised)
    frontier: list = field(default_factory=list, repr=False, compare=False)
    #: the hybrid estimate (exact head + sampled tail, :meth:`probe.scoring.parse.hybrid.HybridEstimate.to_dict`),
    #: only for a request with a :class:`TailSpec`
    hybrid: dict | None = field(default=None, repr=False, compare=False)
    #: the prompt's key / value vectors and next-token logits, kept with the frontier for the tail's draws
    prompt_cache: Any = field(default=None, repr=False, compare=False)

    def total(self) -> float:
        """``sum(probs) + rejected + residual`` (1 up to float rounding)."""
        return math.fsum(self.probs.values()) + self.rejected + self.residual

    def bounds(self, answer: Hashable) -> tuple[float, float]:
        """The certified interval of ``P(answer)``."""
        p = self.probs.get(answer, 0.0)
        return p, min(1.0, p + self.residual)

    def accepted(self) -> float:
        """Mass of enumerated generations the parser gives an answer."""
        return math.fsum(self.probs.values())

    def normalized(self, answers: Sequence[Hashable]) -> list[float] | None:
        """``P(answer | the parser accepts the generation)`` over ``answers``, from the enumerated mass
        (None when nothing enumerated is accepted). Answers outside ``answers`` count as accepted too."""
        acc = self.accepted()
        if acc <= 0:
            return None
        return [self.probs.get(a, 0.0) / acc for a in answers]

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        """JSON-ready: answers become strings; ``top`` limits the listed generations."""
        gens = self.top if top is None else self.top[:top]
        out = {"probs": {str(k): v for k, v in self.probs.items()}, "rejected": self.rejected,
               "residual": self.residual, "nodes": self.nodes, "prompt_tokens": self.prompt_tokens,
               "top": [{"text": t, "mass": m, "answer": None if a is None else str(a)} for t, m, a in gens]}
        if self.hybrid is not None:
            out["hybrid"] = self.hybrid
        return out


@dataclass(frozen=True)
class ParseRequest:
    """One prompt whose parsed answer under sampling a task needs (the runner's parse stage).

    ``parser`` / ``decided``: the callables :func:`parse_exact` applies; they are
    not part of the request's digest, ``parser_name`` is: name the rule and
    everything it depends on (e.g. ``"implicitbbq-oneword/2:" + the answers``),
    so a changed parser is a changed request on resume. ``meta``: fields the
    task's aggregate reads back; ``record_id``: the scored record this
    distribution belongs to (default: ``id``). ``sampler``: the paper's whole
    sampler (a :class:`~probe.scoring.sampler.chain.SamplerChain` whose
    temperature and top-p are the request's), None for temperature / top-p only.
    ``tail``: the hybrid estimator's sampled tail (:class:`TailSpec`), None: exact only.
    """

    id: str
    prompt: str
    max_new_tokens: int
    temperature: float
    top_p: float
    parser_name: str
    parser: Callable[[str], Any] = field(repr=False, compare=False)
    decided: Callable[[str], bool] | None = field(default=None, repr=False, compare=False)
    meta: dict = field(default_factory=dict)
    residual: float = 0.01
    max_nodes: int | None = None
    answer_residual: float | None = None
    kind: str = "parse"
    sampler: Any = None
    tail: TailSpec | None = None

    #: fields left out of the resume digest (callables have no stable text; ``parser_name`` stands for them)
    DIGEST_EXCLUDE: ClassVar[tuple] = ("parser", "decided")

    def __post_init__(self) -> None:
        check_prompt_request("parse", self.id, self.prompt, self.max_new_tokens)
        if not callable(self.parser):
            raise ValueError(f"parse request {self.id!r}: parser must be callable")
        if self.sampler is not None and (self.sampler.temperature != self.temperature
                                         or self.sampler.top_p != self.top_p):
            raise ValueError(f"parse request {self.id!r}: sampler ({self.sampler.describe()}) disagrees with "
                             f"temperature {self.temperature!r} / top_p {self.top_p!r}")

    @property
    def spec_key(self) -> tuple:
        """What requests must share to be enumerated together."""
        return (self.temperature, self.top_p, self.max_new_tokens, self.residual, self.max_nodes, self.answer_residual,
                self.sampler)


def check_parse_settings(max_new_tokens: Any, residual: Any, max_nodes: Any, answer_residual: Any = None) -> None:
    """Refuse a task config's ``parse_max_new_tokens`` / ``parse_residual`` / ``parse_max_nodes`` /
    ``parse_answer_residual`` before any work (a ValueError naming the key; the config loader adds the file).

    >>> check_parse_settings(8, 0.01, None)
    >>> check_parse_settings(8, 1.0, 64)
    Traceback (most recent call last):
    ValueError: parse_residual must be in [0, 1), got 1.0
    """
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
        raise ValueError(f"parse_max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    if not (isinstance(residual, (int, float)) and not isinstance(residual, bool) and 0 <= residual < 1):
        raise ValueError(f"parse_residual must be in [0, 1), got {residual!r}")
    if max_nodes is not None and (not isinstance(max_nodes, int) or isinstance(max_nodes, bool) or max_nodes < 1):
        raise ValueError(f"parse_max_nodes must be a positive integer or null, got {max_nodes!r}")
    if answer_residual is not None and not (isinstance(answer_residual, (int, float))
                                            and not isinstance(answer_residual, bool) and 0 < answer_residual <= 1):
        raise ValueError(f"parse_answer_residual must be in (0, 1] or null, got {answer_residual!r}")
