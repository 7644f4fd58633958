"""The ``implicitbbq`` task's config (:class:`ImplicitBBQConfig`) and the values its fields take;
used by :mod:`probe.tasks.implicitbbq.task`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from probe.scoring.parse.schema import check_parse_settings
from probe.tasks.implicitbbq.data import DIMENSIONS, EXPLICIT_SETS
from probe.tasks.base import TaskConfig

__all__ = ["CONTEXT_KINDS", "FORMATS", "ImplicitBBQConfig", "STRATEGIES"]

STRATEGIES = ("zero_shot", "safety", "few_shot", "cot")
FORMATS = ("oneword", "labels")
CONTEXT_KINDS = ("explicit", "implicit", "neutral", "nochar")


@dataclass(frozen=True)
class ImplicitBBQConfig(TaskConfig):
    """Task settings (YAML keys; unknown keys are rejected)."""

    dimensions: tuple[str, ...] = DIMENSIONS
    strategies: tuple[str, ...] = STRATEGIES
    answer_formats: tuple[str, ...] = ("oneword",)  # "oneword" (the paper's) and/or "labels"
    # items per dimension x setting, per strategy (None = every item)
    per_cell: dict[str, int | None] = field(default_factory=lambda: {
        "zero_shot": 34, "safety": 34, "few_shot": 8, "cot": 3})
    # the paper applies mitigations to explicit/implicit contexts only, not to the controls
    control_strategies: tuple[str, ...] = ("zero_shot",)
    # which context kinds are sampled (e.g. [explicit] to re-score only the explicit cells of Table 2);
    # the samples of the kinds kept are the same items as in a run with every kind
    context_kinds: tuple[str, ...] = CONTEXT_KINDS
    seed: int = 0
    lexical: str = "first"
    # "matched": explicit fillings resampled to the implicit set's (dimension, template) weights, as the
    # paper balances its ~8.5k explicit records (probe.tasks.implicitbbq.match); "full": every filling once
    explicit_set: str = "matched"
    # per-cue exclusions (resources/implicitbbq_exclusions.yaml): "cue" drops the combinations using an excluded
    # cue; "template" removes the whole template, as the paper words it (a departure; see docs/implicitbbq.md)
    exclusion_unit: str = "cue"
    n_shots: int = 5  # the first n of the shipped five (probe/tasks/implicitbbq/resources/implicitbbq_demos.yaml)
    # CoT as the paper runs it: K reasoning chains sampled at its temperature (0.1; no top-p given), each
    # final answer scored exactly, averaged per item; 0 = one greedy chain. 1024 tokens: real models'
    # reasoning must reach its "Final Answer:" (the paper gives no limit)
    cot_chains: int = 5
    cot_temperature: float = 0.1
    cot_top_p: float = 1.0
    cot_max_new_tokens: int = 1024
    cot_require_cue: bool = True  # leave out (and count) chains that never reach an answer cue
    chat_template: bool = True
    n_boot: int = 1000
    bbq_dir: str | None = None
    bharatbbq_dir: str | None = None
    # the paper samples its answers at temperature 0.1 (section 4.1; no top-p given): the paper-equivalent
    # estimate is the expected count under that sampling distribution (null: exact scores only)
    paper_temperature: float | None = 0.1
    paper_top_p: float = 1.0
    mass_floor: float = 0.1  # items whose scored answers carry less probability are "not answering"
    # the paper's procedure computed exactly (probe.scoring.parse.exact): the one-word answer's distribution
    # under the paper's sampling, parsed with the paper's rule (uncertainty answers -> Unknown), for the
    # zero-shot, safety and few-shot one-word prompts; this is the estimate published under the paper's name
    parse_exact: bool = True
    parse_max_new_tokens: int = 16
    parse_residual: float = 0.01
    # the paper samples until an answer parses, so it reads the answer's distribution given a parse: enumerate
    # until the residual is also <= 5 % of the parsed mass (floor parse_residual x 0.05), or the node budget
    parse_answer_residual: float | None = 0.05
    # no more forward tokens per prompt than 20 samples of parse_max_new_tokens (20 x 16: the K of the sampling
    # check; the paper draws one answer per item, which estimates no distribution), so the enumeration never
    # costs more than sampling would
    parse_max_nodes: int | None = 320
    # the mass the enumeration leaves: "hybrid" (default) answers it by ceil(parse_k x residual) generations drawn
    # from it per prompt (probe.scoring.parse.hybrid; none where the head closed), the published estimate;
    # "exact": no draws, the renormalising rule (the residual answered in the enumerated mix)
    parse_tail: str = "hybrid"
    parse_k: int = 20

    def __post_init__(self) -> None:
        for k in ("dimensions", "strategies", "answer_formats", "control_strategies", "context_kinds"):
            value = getattr(self, k)
            object.__setattr__(self, k, (value,) if isinstance(value, str) else tuple(value))
        bad = set(self.strategies) - set(STRATEGIES)
        if bad:
            raise ValueError(f"unknown strategies {sorted(bad)}; choose from {', '.join(STRATEGIES)}")
        bad = set(self.answer_formats) - set(FORMATS)
        if bad:
            raise ValueError(f"unknown answer_formats {sorted(bad)}; choose from {', '.join(FORMATS)}")
        bad = set(self.context_kinds) - set(CONTEXT_KINDS)
        if bad or not self.context_kinds:
            raise ValueError(f"context_kinds must be a non-empty subset of {', '.join(CONTEXT_KINDS)}, "
                             f"got {list(self.context_kinds)}")
        bad = set(self.dimensions) - set(DIMENSIONS)
        if bad:
            raise ValueError(f"unknown dimensions {sorted(bad)}; choose from {', '.join(DIMENSIONS)}")
        if self.exclusion_unit not in ("cue", "template"):
            raise ValueError(f"exclusion_unit must be 'cue' or 'template', got {self.exclusion_unit!r}")
        if self.lexical not in ("first", "all"):
            raise ValueError(f"lexical must be 'first' or 'all', got {self.lexical!r}")
        if not isinstance(self.per_cell, Mapping):
            raise ValueError(f"per_cell must map strategies to item counts, got {self.per_cell!r}")
        missing = [s for s in self.strategies if s not in self.per_cell]
        if missing:
            raise ValueError(f"per_cell has no entry for strategies {missing}")
        if self.paper_temperature is not None and not (isinstance(self.paper_temperature, (int, float))
                                                       and self.paper_temperature > 0):
            raise ValueError(f"paper_temperature must be > 0 or null, got {self.paper_temperature!r}")
        if not 0 < self.paper_top_p <= 1:
            raise ValueError(f"paper_top_p must be in (0, 1], got {self.paper_top_p!r}")
        for k in ("cot_chains", "cot_max_new_tokens"):
            v = getattr(self, k)
            if not isinstance(v, int) or isinstance(v, bool) or v < (0 if k == "cot_chains" else 1):
                raise ValueError(f"{k} must be an integer >= {0 if k == 'cot_chains' else 1}, got {v!r}")
        if not (isinstance(self.cot_temperature, (int, float)) and self.cot_temperature > 0):
            raise ValueError(f"cot_temperature must be > 0, got {self.cot_temperature!r}")
        if not 0 < self.cot_top_p <= 1:
            raise ValueError(f"cot_top_p must be in (0, 1], got {self.cot_top_p!r}")

        if self.explicit_set not in EXPLICIT_SETS:
            raise ValueError(f"explicit_set must be one of {', '.join(EXPLICIT_SETS)}, got {self.explicit_set!r}")
        if not isinstance(self.n_shots, int) or isinstance(self.n_shots, bool) or not 0 <= self.n_shots <= 5:
            raise ValueError(f"n_shots must be an integer in 0..5 (the shipped sets hold five), got {self.n_shots!r}")

        check_parse_settings(self.parse_max_new_tokens, self.parse_residual, self.parse_max_nodes,
                             self.parse_answer_residual)
        if self.parse_tail not in ("exact", "hybrid"):
            raise ValueError(f"parse_tail must be exact or hybrid, got {self.parse_tail!r}")
        if not isinstance(self.parse_k, int) or isinstance(self.parse_k, bool) or self.parse_k < 1:
            raise ValueError(f"parse_k must be a positive integer, got {self.parse_k!r}")
        for s, n in self.per_cell.items():
            if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
                raise ValueError(f"per_cell[{s!r}] must be a positive integer or null (every item), got {n!r}")
