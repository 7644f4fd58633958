"""What every paper's free-text answer parser shares: an answer cue before the answer is skipped.

The parsers themselves belong to their tasks (ImplicitBBQ's one-word rule in
:mod:`probe.tasks.implicitbbq.parse`, HBB's ``choice)<answer>`` in
:mod:`probe.tasks.hbb.parse`, iso/cmp's boxed label in
:mod:`probe.tasks.cmp_iso.parse`); this module holds the cue rule they read
past: ``Answer:``, ``Final Answer:``, ``The answer is``, ``The answer to this
question is``, any case, ``**`` bold.

The cue's words stand on one line (spaces or tabs between them; the answer
may follow on a later line). A cue that could continue across a line break
would let a later line rewrite what an earlier, complete line said ("The
answer" then "is: X"), and a parser's ``decided`` rule (no continuation can
change the answer) could not hold.

>>> strip_answer_cue("**Final Answer:** b) yes"), strip_answer_cue("The answer is A"), strip_answer_cue("A.")
('b) yes', 'A', 'A.')
>>> strip_answer_cue("The answer to this question is: A"), strip_answer_cue("Answer:\\nA")
('A', 'A')
>>> strip_answer_cue("The answer\\nis: A"), strip_answer_cue("The answer isn't clear")
('The answer\\nis: A', "The answer isn't clear")
"""

from __future__ import annotations

import re

__all__ = ["ANSWER_CUE", "strip_answer_cue"]

_SP = r"[ \t]"  # within the cue: spaces on one line, never a line break
#: an optional answer cue at the start of a text, with the spaces around it
ANSWER_CUE = re.compile(
    rf"^\s*(?:\**{_SP}*(?:the{_SP}+)?(?:final{_SP}+)?answer(?:{_SP}+to{_SP}+(?:this|the){_SP}+question)?"
    rf"{_SP}*(?:is\b{_SP}*:?|:)\s*\**)?\s*", re.IGNORECASE)


def strip_answer_cue(text: str) -> str:
    """``text`` without its leading answer cue (and the spaces around it), if it has one."""
    return ANSWER_CUE.sub("", text, count=1)
