"""What every paper's free-text answer parser shares: an answer cue before the answer is skipped.

The parsers themselves belong to their tasks (ImplicitBBQ's one-word rule in
:mod:`probe.tasks.implicitbbq.parse`, HBB's ``choice)<answer>`` in
:mod:`probe.tasks.hbb.parse`, iso/cmp's boxed label in
:mod:`probe.tasks.cmp_iso.answers`); this module holds the cue rule they read
past: ``Answer:``, ``Final Answer:``, ``The answer is``, any case, ``**`` bold.

>>> strip_answer_cue("**Final Answer:** b) yes"), strip_answer_cue("The answer is A"), strip_answer_cue("A.")
('b) yes', 'A', 'A.')
"""

from __future__ import annotations

import re

__all__ = ["ANSWER_CUE", "strip_answer_cue"]

#: an optional answer cue at the start of a text, with the spaces around it
ANSWER_CUE = re.compile(r"^\s*(?:\**\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is\s*:?|:)\s*\**)?\s*", re.IGNORECASE)


def strip_answer_cue(text: str) -> str:
    """``text`` without its leading answer cue (and the spaces around it), if it has one."""
    return ANSWER_CUE.sub("", text, count=1)
