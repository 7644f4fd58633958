"""The sampling check's exact side: the task's sample scored with its paper's sampling spec, as the check's cases."""

from __future__ import annotations

from typing import Any

from probe.scoring.parse.hybrid import opens_at_budget
from probe.studies.sampling_check.judge import JUDGE, sampler_settings
from probe.tasks.paper_check import PaperCheck, PromptCase, Scored

__all__ = ["answer_tokens", "outside_certified"]


def _cases(task: Any, check: PaperCheck, runner: Any, n_prompts: int, seed: int,
           max_new_tokens: int | None) -> tuple[list[PromptCase], dict]:
    """The exact side: the task's sample scored with its paper's sampling spec (and, for a parse-exact check,
    its parse requests enumerated), as the check's cases; and the check's settings (the paper's temperature
    and top-p are the task's own sampling spec for that sample)."""
    cfg = check.config(task, n_prompts, seed, max_new_tokens)
    items = list(task.selection.select(cfg, task.items(cfg), None))
    tok = runner.lm.tokenizer
    reqs = check.requests(task, cfg, items, tok)
    spec = task.paper.sampling(cfg)[0]
    records = runner.score(reqs, None, task=task.name, sampling=(spec,))
    preqs: dict[str, Any] = {}
    parsed: dict[str, Any] = {}
    if check.parse_exact:
        preqs = {p.id: p for p in task.paper.parse_requests(cfg, items, tok)}
        parsed = runner.parse([preqs[r.id] for r in reqs], None, task=task.name)
    # a parse-exact check samples as long an answer as the published estimator reads (the task config's
    # parse_max_new_tokens, or its hybrid tail's longer budget: HBB's 2048 tokens)
    published = max((answer_tokens(p) for p in preqs.values()), default=None)
    budget = int(max_new_tokens if max_new_tokens is not None else published or check.max_new_tokens)
    cases = check.cases(Scored(items=items, requests=list(reqs), records=list(records), spec=spec,
                               parse_requests=preqs, parsed=parsed, tokenizer=tok))

    settings = {**sampler_settings(check.sampler, float(spec["temperature"]), float(spec["top_p"])),
                "max_new_tokens": budget, "unit": check.unit, "metric": check.metric, "sampled_by": JUDGE}
    if check.parse_exact:
        keys = ("max_new_tokens", "residual", "max_nodes", "answer_residual",
                *(k for k in ("tail", "tail_max_new_tokens") if hasattr(cfg, f"parse_{k}")))
        settings["parse"] = {k: getattr(cfg, f"parse_{k}", None) for k in keys}
    return cases, settings


def answer_tokens(request: Any) -> int:
    """The answer length a parse request's published estimate reads: its hybrid tail's budget where the tail
    samples past the enumeration (:func:`probe.scoring.parse.hybrid.opens_at_budget`), else the enumeration's."""

    return int(request.tail.max_new_tokens if opens_at_budget(request) else request.max_new_tokens)


def outside_certified(paper: PaperCheck, case: PromptCase) -> bool:
    """Whether a parse-exact prompt's published answer masses leave its certified interval: per option, the
    enumerated mass up to that plus the whole residual, the point being the masses the check compares
    (``exact`` x ``exact_mass``). It should never be; a prompt without a parse record: False."""
    d = case.meta.get("parsed")
    if not isinstance(d, dict) or case.exact is None:
        return False
    head = paper.answer_masses(case, {str(a): float(p) for a, p in d["probs"].items()})
    point = [float(x) * float(case.exact_mass) for x in case.exact]
    r, eps = float(d["residual"]), 1e-9
    return any(not (h - eps <= p <= h + r + eps) for h, p in zip(head, point))
