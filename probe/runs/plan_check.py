"""The plan checked against the work: the first scored chunk's seconds against what the plan expected for it.

The plan (:mod:`probe.runs.plan`) rests on a short calibration pass; the first chunk of real scoring is the
better measure. When it took more than twice, or less than half, what the plan said, the plan is revised on
screen for the rest of the run. Either way, a chunk long enough to time (:data:`MIN_SECONDS`) becomes the
loaded model's rate for the plans of the next tasks on it (``runner.plan_rates``).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any, Callable

from probe.runs.plan import computed_tokens, duration

__all__ = ["PlanCheck", "FACTOR", "MIN_SECONDS"]

#: how far off (either way) the plan may be before it is revised on screen
FACTOR = 2.0
#: a chunk shorter than this is not timed (the per-call overhead would dominate)
MIN_SECONDS = 2.0


@dataclasses.dataclass
class Planned:
    """What the plan said for a task's scoring: the tokens to compute and the seconds per token."""

    task: str
    tokens: int
    per_token: float


class PlanCheck:
    """Times the first chunk a :class:`~probe.runs.score_plan.ScoreJob` scores and revises the plan when it
    is off by more than :data:`FACTOR`."""

    def __init__(self, runner: Any, task: str, show: bool) -> None:
        self.runner, self.task, self.show = runner, task, show
        planned = getattr(runner, "planned", None)
        self.planned: Planned | None = planned if isinstance(planned, Planned) and planned.task == task else None
        self.checked = False

    def timed(self, part: list, make: Callable[[list], Any]) -> Any:
        """``make(part)``, the first time timed and checked against the plan."""
        if self.checked:
            return make(part)
        t0 = time.perf_counter()
        out = make(part)
        self.checked = True
        self.check(part, time.perf_counter() - t0)
        return out

    def check(self, part: list, seconds: float) -> str | None:
        """The revised plan's line (printed), or None when the plan holds or the chunk is too short to tell."""
        if seconds < MIN_SECONDS:
            return None
        scorer = self.runner.scorer
        tokens = computed_tokens(scorer, part, set(), max(len(part), 1))
        if tokens <= 0:
            return None
        rate = seconds / tokens
        rates = getattr(self.runner, "plan_rates", None)
        if rates is not None:  # the next task's plan on this model starts from the measured rate
            self.runner.plan_rates = dataclasses.replace(
                rates, token=rate, how=f"the scoring measured on this machine ({len(part)} request(s) of "
                                       f"{self.task})")
        if self.planned is None or self.planned.per_token <= 0:
            return None
        expected = tokens * self.planned.per_token
        if 1 / FACTOR <= seconds / expected <= FACTOR:
            return None
        rest = max(self.planned.tokens - tokens, 0)
        line = (f"{self.task}: plan revised: the first {len(part)} request(s) took {seconds:.0f} s where the plan "
                f"expected {duration(expected)}"
                + (f"; the rest now estimated {duration(rest * rate)}" if rest else "") + ".")
        if self.show or self.runner.procs.is_main:
            print(line, file=sys.stderr, flush=True)
        return line
