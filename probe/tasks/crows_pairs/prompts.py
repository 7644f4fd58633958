"""The two-choice question prompt of protocol (a): the HBB paper's Table 11 instruction, its labels and answer cue.

The HBB paper asks CrowS-Pairs (its Table 1's CS column) and its own questions
with the same instruction; this folder holds it (``resources/two_choice.yaml``)
and the ``hbb`` and ``stereoset`` tasks import it from here, so that the
dependency between the folders runs one way (``hbb`` -> ``crows_pairs``).

>>> p = load_two_choice()
>>> p.labels, p.answer_cue
(('a', 'b'), 'Answer:')
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import yaml


__all__ = ["TwoChoicePrompt", "load_two_choice", "two_choice_file"]


@dataclass(frozen=True)
class TwoChoicePrompt:
    """``instruction`` (Table 11, verbatim), the scored ``labels`` (``a``, ``b``) and the ``answer_cue`` of
    plain-text prompts (no chat template)."""

    instruction: str
    labels: tuple[str, str]
    answer_cue: str


def two_choice_file() -> str:
    """The packaged file the prompt is read from (a run's provenance lists it)."""
    return str(resources.files("probe.tasks.crows_pairs").joinpath("resources", "two_choice.yaml"))


@lru_cache(maxsize=1)
def load_two_choice() -> TwoChoicePrompt:
    """Load the packaged prompt (cached)."""

    raw = yaml.safe_load(resources.files("probe.tasks.crows_pairs").joinpath("resources", "two_choice.yaml")
                         .read_text(encoding="utf-8"))
    return TwoChoicePrompt(instruction=raw["mcq_instruction"], labels=tuple(raw["mcq_labels"]),
                           answer_cue=raw["mcq_answer_cue"])
