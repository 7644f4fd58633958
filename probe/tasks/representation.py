"""What a task tells the representations study (``probe analyze representations``) about its items and records.

A task whose items carry a group identity, a framing and a stereotyped answer
returns a :class:`RepresentationLabels` from
:meth:`task.analyses.representation_labels <probe.tasks.facets.Analyses.representation_labels>`; the study
(:mod:`probe.studies.representations`) probes, patches and steers with them and
never asks which task it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

__all__ = ["RepresentationLabels"]


@dataclass(frozen=True)
class RepresentationLabels:
    """The probe labels of one task's items and records.

    ``group(item)``: the group of the person described first (the probed identity);
    ``lexical_key(item)``: the surface words that carry the identity (the control task's key);
    ``consistency(record)``: 1 if the chosen answer is stereotype-consistent, 0 if not, NaN if neither;
    ``stereotyped_labels(record)``: the label indices whose option is the stereotyped answer;
    ``framing``: the record field the framing probe decodes, and ``transfer`` the two of its values the group
    probes are trained on and tested on; ``how_to_run``: the command that makes a run the study reads.
    """

    group: Callable[[Any], str]
    lexical_key: Callable[[Any], str]
    consistency: Callable[[Mapping[str, Any]], float]
    stereotyped_labels: Callable[[Mapping[str, Any]], list[int]]
    framing: str
    transfer: tuple[str, str]
    how_to_run: str
