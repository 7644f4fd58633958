"""HBB's answer read back to a label, as the paper asks for it (``choice)<answer>``) and the authors clean it:
for the exact parse estimate and the sampling check."""

from __future__ import annotations

import re
from typing import Sequence

from probe.prompts.answer_parse import strip_answer_cue

__all__ = ["HBB_PARSER_VERSION", "hbb_decided", "hbb_refused", "parse_hbb_choice"]

# /2: the answer cue's words stand on one line, and "The answer to this question is" is a cue
HBB_PARSER_VERSION = "hbb-choice/2"
_HBB_CHOICE = re.compile(r"\(?([A-Za-z])\s*(?:\)|\.|:|$|\s*$)")


def hbb_refused(text: str) -> bool:
    """The authors' refusal cleaning (``ChatGPT.getOutput`` in their released ``src/llm_utils.py``): an output
    holding both "sorry" and "can't" is "response filtered", a non-answer."""
    low = text.lower()
    return "sorry" in low and "can't" in low


def parse_hbb_choice(text: str, labels: Sequence[str] = ("a", "b")) -> int | None:
    """Index of the HBB label ``text`` answers with, or None: the paper asks for ``choice)<answer>``; an
    optional answer cue is skipped and the choice letter is read at the start (``a)``, ``(b)``, ``B.``, a
    lone ``b``); a refusal (:func:`hbb_refused`) or any other start is no answer.

    >>> [parse_hbb_choice(t) for t in ("a) The man.", "(b)", "Answer: B) x", "b", "about", "I'm sorry, I can't")]
    [0, 1, 1, 1, None, None]
    """
    if hbb_refused(text):
        return None
    m = _HBB_CHOICE.match(strip_answer_cue(text))
    if not m:
        return None
    keys = [x.lower() for x in labels]
    letter = m.group(1).lower()
    return keys.index(letter) if letter in keys else None


def hbb_decided(text: str) -> bool:
    """Whether no continuation of ``text`` can change :func:`parse_hbb_choice`'s answer: only once the text
    is a refusal (both words present stay present). A read choice letter is not final, since a refusal
    anywhere later in the output turns it into no answer; so the enumeration runs to the token budget.

    >>> hbb_decided("I'm sorry, but I can't"), hbb_decided("a) The man"), hbb_decided("I'm sorry")
    (True, False, False)
    """
    return hbb_refused(text)
