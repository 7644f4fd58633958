"""The ``cmp_iso`` task's config (:class:`CmpIsoConfig`, its settings :class:`SettingSpec`) and item
(:class:`SampledPair`); used by :mod:`probe.tasks.cmp_iso.task`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from probe.scoring.parse.schema import check_parse_settings
from probe.scoring.sampler.sampling import SamplingSpec
from probe.tasks.cmp_iso.data import BENCHMARK_FILES, CATEGORIES, CmpIsoPair
from probe.tasks.cmp_iso.prompts import N_VARIANTS, CmpIsoSetting
from probe.tasks.base import TaskConfig

__all__ = ["CmpIsoConfig", "SampledPair", "SettingSpec"]


@dataclass(frozen=True)
class SettingSpec:
    """One entry of ``settings:``; ``variants: all`` expands to the 54 variations."""

    reasoning: str = "direct"
    neutral: bool = False
    randomly: bool = False
    variants: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        v = self.variants
        object.__setattr__(self, "variants", tuple(range(N_VARIANTS)) if v == "all" else
                           (int(v),) if isinstance(v, int) else tuple(int(x) for x in v))


def _setting_spec(value: Any, i: int) -> SettingSpec:
    if isinstance(value, SettingSpec):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"settings[{i}]: expected a mapping like {{reasoning: direct, neutral: true}}, got {value!r}")
    names = [f.name for f in dataclasses.fields(SettingSpec)]
    unknown = sorted(set(value) - set(names))
    if unknown:
        raise ValueError(f"settings[{i}].{unknown[0]}: unknown key; allowed: {names}")
    return SettingSpec(**value)


@dataclass(frozen=True)
class CmpIsoConfig(TaskConfig):
    """Task settings (YAML keys; see docs/cmp_iso.md)."""

    benchmarks: tuple[str, ...] = tuple(BENCHMARK_FILES)
    max_pairs: int | None = 200  # seeded random sample per benchmark (all pairs when fewer)
    round_size: int | None = 25  # pairs per benchmark per round of the request order (None: one round)
    seed: int = 0
    settings: tuple[SettingSpec, ...] = (SettingSpec(), SettingSpec(neutral=True))
    direct_cue: str = "prefill"
    # CoT as the authors run it (create_bench.py / global_run_settings.py: n_gens 25, gen_length 2000;
    # model_config/default.yaml: T = 0.7, top-p 0.9): cot_chains reasoning chains sampled per prompt, seeded
    # per chain, each boxed answer scored exactly, averaged per prompt; 0 = one greedy chain
    max_new_tokens: int = 2000  # CoT generation (their gen_length)
    cot_chains: int = 25
    cot_temperature: float = 0.7
    cot_top_p: float = 0.9
    # a chain without a valid boxed answer adds no answer (counted), as their parser drops it; false: scored
    # after an appended "Final answer: \boxed{" instead
    cot_require_cue: bool = True
    # Table 6: the claimed-randomness keywords (iso/cmp paper, Table H.2; null: that list)
    claim_keywords: tuple[str, ...] | None = None
    mass_floor: float = 0.1  # prompts whose labels carry less probability are "not answering"
    n_iter: int = 10000  # randomization test iterations
    n_boot: int = 2000  # bootstrap resamples
    # the authors' sampling (model_config/default.yaml): the paper-equivalent PG is computed from the
    # label distribution at this temperature, cut to this nucleus (paper_temperature null: exact scores only)
    paper_temperature: float | None = 0.7
    paper_top_p: float = 0.9
    # the authors' own procedure computed exactly (probe.scoring.parse.exact): their generation-mode prompt
    # ("... My answer would be: \\boxed{"), sampled at paper_temperature / paper_top_p, read by their extractor,
    # then the expectation of their K-sample preference (K = parse_k) over those answers; direct settings only
    parse_exact: bool = True
    parse_k: int = 25
    parse_max_new_tokens: int = 8
    parse_residual: float = 0.01
    parse_answer_residual: float | None = None  # see ImplicitBBQ's config: a residual relative to the parsed mass
    # no more forward tokens per prompt than the authors' K samples (parse_k x parse_max_new_tokens = 25 x 8)
    parse_max_nodes: int | None = 200
    # where the tree does not close at T = 0.7: "hybrid" (default) spends half the budget on the exact head and
    # the rest on generations drawn from the mass it left (probe.scoring.parse.hybrid), reported beside the certified
    # interval, within parse_max_nodes forward tokens in all; "exact": the whole budget on the enumeration
    parse_tail: str = "hybrid"
    alpha: float = 0.05
    # pairs of setting names (without "+vN") compared by randomization tests, e.g. ["direct", "direct+neutral"]
    comparisons: tuple[tuple[str, str], ...] = ()
    # parameter counts (billions) by model name, for the cross-model PG-vs-size correlation
    params_b: dict[str, float] = field(default_factory=dict)
    # active parameters (billions) of mixture-of-experts models by name (Table E.2; default: params_b), and the
    # family a model belongs to (Table 8 takes dense families with >= 2 sizes); a plain value applies to the model
    active_params_b: dict[str, float] | float | None = None
    model_family: dict[str, str] | str | None = None
    # demographic category: the released files are gender; race / religion files come from
    # 'probe data build cmp_iso --category C' (probe.tasks.cmp_iso.sources), written into data_dir
    category: str = "gender"
    data_dir: str | None = None  # default: dataset_dir("cmp_iso") (PROBE_DATA honoured)

    def __post_init__(self) -> None:
        b = self.benchmarks
        object.__setattr__(self, "benchmarks", (b,) if isinstance(b, str) else tuple(b))
        bad = [x for x in self.benchmarks if x not in BENCHMARK_FILES]
        if bad:
            raise ValueError(f"benchmarks: unknown benchmark {bad[0]!r}; choose from {sorted(BENCHMARK_FILES)}")
        if not self.benchmarks:
            raise ValueError("benchmarks: expected at least one benchmark")
        s = self.settings
        if isinstance(s, (SettingSpec, Mapping)) or not s:
            raise ValueError("settings: expected a non-empty list")
        object.__setattr__(self, "settings", tuple(_setting_spec(x, i) for i, x in enumerate(s)))
        object.__setattr__(self, "comparisons", tuple(tuple(c) for c in self.comparisons))
        object.__setattr__(self, "params_b", dict(self.params_b or {}))

        if self.category not in CATEGORIES:
            raise ValueError(f"category must be one of {', '.join(CATEGORIES)}, got {self.category!r}")
        for name in ("max_pairs", "round_size"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"{name} must be a positive integer or null, got {v!r}")
        for name, low in (("max_new_tokens", 1), ("cot_chains", 0), ("parse_k", 1), ("parse_max_new_tokens", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")

        try:
            SamplingSpec(self.cot_temperature, self.cot_top_p)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"cot_temperature / cot_top_p: {exc}") from None

        check_parse_settings(self.parse_max_new_tokens, self.parse_residual, self.parse_max_nodes,
                             self.parse_answer_residual)
        if self.parse_tail not in ("exact", "hybrid"):
            raise ValueError(f"parse_tail must be exact or hybrid, got {self.parse_tail!r}")
        if not (isinstance(self.mass_floor, (int, float)) and 0 <= self.mass_floor <= 1):
            raise ValueError(f"mass_floor must be in [0, 1], got {self.mass_floor!r}")
        kw = self.claim_keywords
        if kw is not None:
            kw = (kw,) if isinstance(kw, str) else tuple(kw)
            if not kw or not all(isinstance(k, str) and k.strip() for k in kw):
                raise ValueError(f"claim_keywords must be a non-empty list of strings or null, got {self.claim_keywords!r}")
            object.__setattr__(self, "claim_keywords", kw)
        if self.paper_temperature is not None:
            try:
                SamplingSpec(self.paper_temperature, self.paper_top_p)
            except ValueError as exc:
                raise ValueError(f"paper_temperature / paper_top_p: {exc}") from None
        names = {x.base_name for x in self.expanded_settings()}  # a setting whatever its variants
        for c in self.comparisons:
            if len(c) != 2 or any(x not in names for x in c):
                raise ValueError(f"comparisons: {list(c)} must name two of the settings {sorted(names)}")

    def expanded_settings(self) -> list[CmpIsoSetting]:
        """Every (setting, variant) to score, in config order (raises ValueError on a bad value)."""
        return [CmpIsoSetting(s.reasoning, s.neutral, s.randomly, v, self.direct_cue)  # type: ignore[arg-type]
                for s in self.settings for v in s.variants]


@dataclass(frozen=True)
class SampledPair:
    """One item: a context pair and its place in its benchmark's shuffled sample (for the rounds)."""

    pair: CmpIsoPair
    position: int

    @property
    def benchmark(self) -> str:
        return self.pair.benchmark
