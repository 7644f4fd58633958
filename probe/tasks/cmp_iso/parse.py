"""The iso / cmp answer in a chain of thought, found as the authors' parser finds it.

The authors (``result_analysis/misc.py``) lower-case ``"\\boxed{" + generation + "}"``
and take the last ``boxed{...}`` naming a label of the paradigm (:func:`last_boxed`,
:func:`parse_boxed`); a CoT answer label is scored where that answer's text begins
(:func:`cot_answer_prompt`). Re-exported by :mod:`probe.tasks.cmp_iso.prompts`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["AUTHORS_ANSWER_MAPS", "BoxedAnswer", "authors_label", "cot_answer_prompt", "last_boxed", "paradigm",
           "parse_boxed"]


#: the authors' answer maps (``MAP_ISO`` / ``MAP_CMP`` in their ``result_analysis/misc.py``): the lower-cased
#: text inside ``boxed{...}`` -> the label it names. Every label of the paradigm is matched, offered or not.
AUTHORS_ANSWER_MAPS: dict[str, dict[str, str]] = {
    "iso": {"yes": "Yes", "no": "No", "y": "Yes", "n": "No", "skip": "Skip", "s": "Skip"},
    "cmp": {"a": "A", "b": "B", "c": "C"},
}
_WRAP = "\\boxed{"  # the authors wrap the whole generation: "\boxed{" + text + "}", then lower-case it


def paradigm(labels: tuple[str, ...]) -> str:
    """``iso`` or ``cmp`` from the offered labels (raises ValueError for labels of neither)."""
    for par, amap in AUTHORS_ANSWER_MAPS.items():
        if labels and all(x in amap.values() for x in labels):
            return par
    raise ValueError(f"labels {labels!r} are neither iso (Yes/No/Skip) nor cmp (A/B/C) labels")


@dataclass(frozen=True)
class BoxedAnswer:
    """The last boxed answer the authors' parser finds in a generation.

    ``named``: the label its text names (any label of the paradigm); ``label``:
    the same when it is offered, else None (the answer is invalid: the authors
    zero an unoffered neutral label); ``start``: the index in the generation
    where the answer text begins (0 when the match uses the parser's wrapping
    prefix, i.e. the generation itself begins with the answer).
    """

    named: str
    label: str | None
    start: int


def last_boxed(text: str, labels: tuple[str, ...]) -> BoxedAnswer | None:
    """The authors' ``extract_prediction`` on ``text``, with the position of the answer.

    They lower-case ``"\\boxed{" + text + "}"`` and take the last match of
    ``boxed\\{(yes|no|y|n|skip|s)\\}`` (iso) or ``boxed\\{(a|b|c)\\}`` (cmp): so
    any case counts, a backslash is not needed, spaces or other text inside the
    braces do not match, and the last match decides (an unoffered label there
    makes the answer invalid; no earlier match is used instead). None: no match.

    >>> a = last_boxed("so boxed{A}, \\\\boxed{ B } and \\\\boxed{c}", ("A", "B"))
    >>> a.named, a.label, a.start
    ('C', None, 36)
    >>> last_boxed("\\\\boxed{Y}.", ("Yes", "No")).label
    'Yes'
    """
    amap = AUTHORS_ANSWER_MAPS[paradigm(labels)]
    wrapped = _WRAP + text + "}"
    low, origin = [], []  # lower-casing can change a character's length: keep each lowered char's source index
    for i, ch in enumerate(wrapped):
        lc = ch.lower()
        low.append(lc)
        origin += [i] * len(lc)
    pattern = re.compile(r"boxed\{(" + "|".join(map(re.escape, amap)) + r")\}")
    last = None
    for last in pattern.finditer("".join(low)):
        pass
    if last is None:
        return None
    named = amap[last.group(1)]
    start = max(origin[last.start(1)] - len(_WRAP), 0)
    return BoxedAnswer(named, named if named in labels else None, start)


def parse_boxed(text: str, labels: tuple[str, ...]) -> str | None:
    """The offered label of the authors' last boxed answer in ``text`` (:func:`last_boxed`), else None.

    >>> parse_boxed("so \\\\boxed{A}? no: \\\\boxed{b}", ("A", "B"))
    'B'
    >>> parse_boxed("\\\\boxed{yes}", ("Yes", "No"))
    'Yes'
    >>> parse_boxed("\\\\boxed{ b }", ("A", "B")) is None, parse_boxed("\\\\boxed{A} \\\\boxed{C}", ("A", "B")) is None
    (True, True)
    """
    found = last_boxed(text, labels)
    return None if found is None else found.label


def cot_answer_prompt(rendered: str, generation: str, labels: tuple[str, ...]) -> tuple[str, bool]:
    """The prompt at which a CoT answer label is scored, and whether the chain has a valid answer.

    Valid: the authors' parser finds a last boxed answer naming an offered label
    (:func:`last_boxed`); the prompt is then the rendered prompt plus the
    generation up to where that answer's text begins, so the scored
    distribution is the model's own answer slot. Otherwise the generation is
    closed with ``"\\nFinal answer: \\boxed{"`` and the label is scored there (used
    only with ``cot_require_cue: false``). Score with :func:`cot_answer_forms`.

    >>> cot_answer_prompt("P:", " think. \\\\boxed{B} done", ("A", "B"))
    ('P: think. \\\\boxed{', True)
    """
    found = last_boxed(generation, labels)
    if found is not None and found.label is not None:
        return rendered + generation[: found.start], True
    return rendered + generation.rstrip() + "\nFinal answer: \\boxed{", False


def authors_label(text: str, task_type: str, labels: tuple[str, ...]) -> str | None:
    """The label the authors' extractor reads from a generation after their ``\\boxed{`` cue
    (:func:`last_boxed`); None when it finds none or one not offered.

    >>> authors_label("Yes} because", "iso", ("Yes", "No")), authors_label("Skip}", "iso", ("Yes", "No"))
    ('Yes', None)
    """
    answer = last_boxed(text, tuple(sorted(set(AUTHORS_ANSWER_MAPS[task_type].values()))))
    return answer.named if answer is not None and answer.named in labels else None
