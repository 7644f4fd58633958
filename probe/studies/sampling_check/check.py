"""The sampling check's run: the task's exact side, K sampled generations per prompt, the aggregate comparison.

:func:`run_check` drives any task that declares a paper check
(:class:`probe.tasks.paper_check.PaperCheck`); the steps are in the package's
docstring (:mod:`probe.studies.sampling_check`). The stages live beside it:
:mod:`.exact` (the exact side's cases), :mod:`.judge` (the sampled side), :mod:`.rows` (one prompt's row),
:mod:`.aggregate` (the aggregate comparison and summary) and :mod:`.ranges` (the verdict's draws and ranges);
their public names are importable from here too.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from probe.errors import ProbeError
from probe.studies.sampling_check.aggregate import compare_sides
from probe.studies.sampling_check.exact import _cases, answer_tokens, outside_certified
from probe.studies.sampling_check.judge import judge_texts
from probe.studies.sampling_check.ranges import (chance_outside, detectable_difference, draw_quantile, joint_ranges,
                                                 predicted_draws, predicted_range, redrawn)
from probe.studies.sampling_check.rows import inside, parse_mass_interval, prompt_row, tv_distance
from probe.tasks.paper_check import PaperCheck, PromptCase

# private helpers the unit tests reach through this module
from probe.studies.sampling_check.ranges import _verdict  # noqa: F401,E402
from probe.studies.sampling_check.rows import _dist  # noqa: F401,E402
from probe.tasks import available, get

__all__ = ["SamplingCheck", "answer_tokens", "chance_outside", "checked_tasks", "detectable_difference",
           "draw_quantile", "inside", "joint_ranges", "outside_certified", "paper_check_of",
           "parse_mass_interval", "predicted_draws", "predicted_range", "prompt_row", "redrawn", "run_check",
           "tv_distance"]

def paper_check_of(task: str) -> tuple[Any, PaperCheck]:
    """``task``'s :class:`~probe.tasks.base.Task` and a fresh :class:`~probe.tasks.paper_check.PaperCheck`; a task
    that declares none (or an unknown name) is an error listing those that do (checked before a model loads)."""

    the_task = get(task) if task in available() else None
    paper = the_task.paper.check() if the_task is not None else None
    if paper is None:
        raise ProbeError(f"probe validate sampling: no check for task {task!r}; choose from "
                         f"{', '.join(checked_tasks())}")
    return the_task, paper


def checked_tasks() -> list[str]:
    """The tasks that declare a paper check (``paper.check()`` not None), in registry order."""

    return [name for name in available() if get(name).paper.check() is not None]


@dataclass
class SamplingCheck:
    """The check's result: settings, per-prompt rows and the aggregate comparison."""

    task: str
    model: str
    settings: dict
    prompts: list[dict]
    aggregate: dict
    summary: dict

    def to_dict(self) -> dict:
        return asdict(self)


def run_check(task: str, runner: Any, *, n_prompts: int = 100, k: int = 20, seed: int = 0,
              max_new_tokens: int | None = None, batch_size: int = 32, n_boot: int = 1000,
              progress: bool = False, prompts_per_call: int = 1) -> SamplingCheck:
    """Run the sampling check for ``task`` (a task whose ``paper.check()`` is not None, :func:`checked_tasks`)
    with a :class:`probe.runs.runner.Runner`; ``prompts_per_call``: prompts sharing one generate call on the
    sampled side (:func:`probe.studies.sampling_check.judge.judge_texts`); ``progress``: a bar over the
    sampled side's prompts."""
    the_task, paper = paper_check_of(task)
    if k < 1 or n_prompts < 1:
        raise ProbeError("probe validate sampling: --k and --n-prompts must be positive")
    lm = runner.lm
    t0 = time.perf_counter()
    cases, settings = _cases(the_task, paper, runner, n_prompts, seed, max_new_tokens)
    t1 = time.perf_counter()
    if not cases:
        raise ProbeError(f"probe validate sampling {task}: the sample has no prompts")
    texts = _sample(lm, cases, k, seed, settings, prompts_per_call, progress)
    t2 = time.perf_counter()
    # one generator for the rows' noise, then the unit bootstrap, then the exact side's draws
    rng = np.random.default_rng(seed)
    rows, sampled_dist = _prompt_rows(paper, cases, texts, k, rng)
    agg, summary = compare_sides(paper, cases, rows, sampled_dist, k, n_boot, rng, len(texts))
    settings.update({"k": k, "seed": seed, "n_boot": n_boot, "batch_size": batch_size, "n_prompts": n_prompts,
                     "prompts_per_call": int(prompts_per_call)})
    summary["seconds"] = {"exact_scoring_and_items": round(t1 - t0, 1), "generation": round(t2 - t1, 1),
                          "parse_and_bootstrap": round(time.perf_counter() - t2, 1)}
    return SamplingCheck(task, str(getattr(lm, "name", "")), settings, rows, agg, summary)


def _sample(lm: Any, cases: list[PromptCase], k: int, seed: int, settings: dict, prompts_per_call: int,
            progress: bool) -> list[str]:
    """The sampled side: ``k`` generations of each case's prompt (:func:`~.judge.judge_texts`), flat in the
    cases' order."""

    bar = None
    if progress:  # the sampled side is the check's long part (K generations a prompt)
        from tqdm.auto import tqdm

        bar = tqdm(total=len(cases), unit="prompt", desc="sampling", leave=False)
    try:
        per_case = judge_texts(lm, [c.prompt for c in cases], k, seed, settings, int(settings["max_new_tokens"]),
                               keys=[c.id for c in cases], prompts_per_call=prompts_per_call,
                               progress=None if bar is None else (lambda done: bar.update(done - bar.n)))
    finally:
        if bar is not None:
            bar.close()
    return [t for gen in per_case for t in gen]


def _prompt_rows(paper: PaperCheck, cases: list[PromptCase], texts: list[str], k: int,
                 rng: np.random.Generator) -> tuple[list[dict], dict[str, Any]]:
    """Each case's row (:func:`~.rows.prompt_row`, from its ``k`` generations in ``texts``) and, by case id, its
    sampled answer distribution."""
    rows, sampled_dist = [], {}
    for i, c in enumerate(cases):
        row, sampled_dist[c.id] = prompt_row(paper, c, texts[i * k:(i + 1) * k], rng)
        rows.append(row)
    return rows, sampled_dist
