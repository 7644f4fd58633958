"""What a task declares for the sampling check (``probe validate sampling TASK``): the paper's own procedure.

A task whose paper sampled its answers returns a :class:`PaperCheck` from
:meth:`task.paper.check <probe.tasks.facets.Paper.check>`; the check
(:mod:`probe.studies.sampling_check`) then runs the same steps for every such
task, naming none:

1. ``config(task, n_prompts, seed, max_new_tokens)``: the task config of a
   stratified sample of about ``n_prompts`` prompts; the paper's decoding
   settings are the task's own sampling spec for it (``task.paper.sampling(config)``:
   temperature, top-p), so they are stated once, in the task's config;
2. the task's requests (``requests``) are scored with that spec and, when
   ``parse_exact``, the task's parse requests (the paper's prompt, parser and
   ``decided`` rule, :mod:`probe.scoring.parse.exact`) enumerated; ``cases``
   turns the results into :class:`PromptCase` s (the exact side);
3. K generations per case are sampled at the paper's settings, each read by
   ``parse`` (the paper's extraction rule) and checked by ``counted`` (the
   event the exact estimator counts);
4. ``units`` / ``metrics`` / ``exact_metrics``: the paper's headline metric from
   sampled answers, resampled by unit, against its exact value.

The shared pieces here (:func:`counted_label`, :func:`counted_forms`,
:data:`ANSWER_CUE`) serve the tasks' own checks.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["ANSWER_CUE", "PaperCheck", "PromptCase", "Scored", "counted_forms", "counted_label", "label_ids",
           "parse_stats", "sampling_entry"]


#: an answer cue before the answer: "Answer:", "Final Answer:", "The answer is:", "The answer is" (any case, ** bold)
ANSWER_CUE = re.compile(r"^\s*(?:\**\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is\s*:?|:)\s*\**)?\s*", re.IGNORECASE)


@dataclass(kw_only=True)
class PromptCase:
    """One prompt: the exact side (from the task's record) and what the paper's procedure needs. Fields are
    given by name.

    >>> PromptCase(id="q1", unit="t1", prompt="Who? Answer:", options=("A", "B"), exact=[0.25, 0.75],
    ...            exact_mass=0.9).exact_raw is None
    True
    """

    #: the record's id
    id: str
    #: the resampling unit (a template instance, a concept pair, ...)
    unit: str
    #: what the paper's procedure generates after
    prompt: str
    #: the answer options, in the order the distributions below index them
    options: tuple[str, ...]
    #: the paper-equivalent option distribution, renormalised over the options (None: no option can be sampled)
    exact: list[float] | None = None
    #: the chance one sample is each option as the exact estimator counts it (HBB's estimator needs it)
    exact_raw: list[float] | None = None
    #: the chance one sample is counted at all (parse-exact: by the published residual rule, the residual
    #: answered in the enumerated mix, :func:`probe.metrics.certified.point_answer`)
    exact_mass: float = 0.0
    #: the record's meta and whatever the task's check needs beside it
    meta: dict = field(default_factory=dict)


@dataclass(kw_only=True)
class Scored:
    """What the check scored for a :class:`PaperCheck` to build its cases from: the sample's items, the
    requests scored and their records (in order), the sampling spec, the parse requests and their enumerated
    distributions by id (empty unless ``parse_exact``) and the tokenizer."""

    items: list
    requests: list
    records: list
    spec: Mapping[str, float]
    parse_requests: Mapping[str, Any]
    parsed: Mapping[str, Mapping[str, Any]]
    tokenizer: Any


class PaperCheck:
    """One paper's sampled procedure; a task subclasses it (one fresh instance per check: it may keep state)."""

    #: the answer budget of a check that does not enumerate (a parse-exact check runs the task config's own
    #: ``parse_max_new_tokens``, the published run's); ``--max-new-tokens`` overrides either
    max_new_tokens: int = 8
    #: the paper's sampler as its authors ran it (a :mod:`probe.tasks.paper_samplers` preset name): the
    #: check's sampled side runs it in transformers' generate (top-k, penalties); None: temperature and top-p
    sampler: str | None = None
    #: the resampling unit and the headline metric, in words (the check's report)
    unit: str = ""
    metric: str = ""
    #: whether the exact metric restricted to the prompts with a parsed answer is meaningful (not for HBB,
    #: whose exact value is its K-sample estimator, undefined instances included)
    same_prompts: bool = True
    #: whether the exact side enumerates the task's parse requests (``task.paper.parse_requests``)
    parse_exact: bool = False
    #: the enumeration's residual / size statistics (set by ``cases`` when ``parse_exact``)
    parse_stats: dict | None = None

    def config(self, task: Any, n_prompts: int, seed: int, max_new_tokens: int | None) -> Any:
        """The task config of the check's stratified sample (about ``n_prompts`` prompts), with the published
        run's parse settings (token budget, node cap, residual targets: the task's defaults) unless
        ``max_new_tokens`` is given."""
        raise NotImplementedError

    def requests(self, task: Any, config: Any, items: Sequence[Any], tokenizer: Any) -> list[Any]:
        """The requests whose records give the exact side (default: all of the task's)."""
        return list(task.requests(config, items, tokenizer))

    def cases(self, scored: Scored) -> list[PromptCase]:
        raise NotImplementedError

    def parse(self, case: PromptCase, text: str) -> int | None:
        """The option index the paper's rule reads from one generation (None: no answer)."""
        raise NotImplementedError

    def counted(self, case: PromptCase, text: str) -> bool:
        """Whether the exact estimator counts this generation (its first token / text is a scored answer)."""
        raise NotImplementedError

    def answer_keys(self, case: PromptCase) -> list[str]:
        """Per option, the name a parse record gives its answer (default: the option's text)."""
        return [str(o) for o in case.options]

    def answer_masses(self, case: PromptCase, answer: Mapping[str, float]) -> list[float]:
        """Per option, the chance one sample reads as it, from a parse record's answer probabilities."""
        return [float(answer.get(k, 0.0)) for k in self.answer_keys(case)]

    def units(self, cases: list[PromptCase]) -> dict[str, list[PromptCase]]:
        """The resampling units and their prompts (default: by ``case.unit``)."""
        out: dict[str, list[PromptCase]] = {}
        for c in cases:
            out.setdefault(c.unit, []).append(c)
        return out

    def metrics(self, rows: list[tuple[str, PromptCase, np.ndarray | None]]) -> dict[str, float]:
        """Headline metrics from (unit key, case, option distribution or None) rows; a unit key is unique
        per (resampled) unit copy."""
        raise NotImplementedError

    def exact_metrics(self, cases: list[PromptCase], k: int) -> dict[str, float]:
        """The exact paper-equivalent metrics (default: :meth:`metrics` on the exact distributions)."""
        return self.metrics([(u, c, None if c.exact is None else np.asarray(c.exact))
                             for u, cs in self.units(cases).items() for c in cs])


# -- shared pieces ------------------------------------------------------------------------------------------


def counted_label(tokenizer: Any, text: str, label_ids: set[int]) -> bool:
    """Whether a generation's first token is one of the scored label tokens (the exact estimator's event).

    The generation is re-encoded (the decoded text of the sampled ids; BPE round trips keep
    the first token of the short answers here)."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
    return bool(ids) and ids[0] in label_ids


def counted_forms(text: str, forms: Sequence[str]) -> bool:
    """Whether a generation starts with one of the scored continuation texts (the event a continuation
    log-likelihood measures: the answer *starts with* the text).

    >>> counted_forms("The grandfather was", ["The grandfather"]), counted_forms("the grandfather", ["The grandfather"])
    (True, False)
    """
    return any(text.startswith(f) for f in forms)


def label_ids(tokenizer: Any, forms: Sequence[str]) -> set[int]:
    """The first token id of each label form (the tokens the exact estimator scores)."""
    out = set()
    for f in forms:
        ids = tokenizer(f, add_special_tokens=False)["input_ids"]
        if ids:
            out.add(ids[0])
    return out


def sampling_entry(details: Mapping[str, Any], spec: Mapping[str, float]) -> Mapping[str, Any] | None:
    """A record's ``sampling`` entry for ``spec`` (same temperature and top-p), or None."""
    for e in details.get("sampling") or ():
        if math.isclose(e["temperature"], spec["temperature"]) and math.isclose(e["top_p"], spec["top_p"]):
            return e
    return None


def parse_stats(parsed: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """The enumeration's largest and mean residual, mean forward tokens and mean rejected mass per prompt."""
    d = list(parsed.values())
    return {"max_residual": max(x["residual"] for x in d), "mean_residual": float(np.mean([x["residual"] for x in d])),
            "mean_nodes": float(np.mean([x["nodes"] for x in d])),
            "mean_rejected": float(np.mean([x["rejected"] for x in d]))}
