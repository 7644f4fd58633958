"""HBB questions -> scoring requests (MCQ label scoring and HBB-SG perplexity).

MCQ (HBB paper, Table 11): the instruction, the context and the two options
under ``a)``/``b)``; one forward pass gives P(a), P(b) (softmax over the two
labels). Option order: ``a) = s1, b) = s2``; the swapped order (``a) = s2``)
is a second request, so that position bias can be averaged out.

HBB-SG (appendix E.1), as the authors' ``getPerplexity`` computes it: their
evaluation prompt (``evaluate_perplexity.txt``) and the context form the user
turn under their system message ("You are a useful assistant."), rendered with
the model's chat template; each option sentence (each of its n variations) is
the assistant turn, and its perplexity covers the sentence's tokens only. The
variations are option templates with ``[[X]]`` slots, per concept pair: the
original option first, then those generated with the authors' variation prompt
(``qa_generate2_more_sentences.txt``, :func:`sg_variation_prompt`, parsed by
:func:`parse_variations`) or read from a file.

Each request carries its structure in ``meta`` (``question_id``, ``kind``:
``mcq`` / ``mcq_swap`` / ``sg``, ``concept_id``, ``category``,
``descriptor_type``, ``identity``; HBB-SG adds ``option``: 1 for s1, 2 for s2,
``variation``: the index j that pairs A_j with B_j, and ``template``: the
sentence template scored), which the ``hbb`` task (:mod:`probe.tasks.hbb`)
joins back on. Ids (``{question_id}|mcq``, ``{question_id}|mcq_swap``,
``{question_id}|sg|{option}|{j}``) only need to be unique; nothing parses them.

>>> p = load_hbb_prompts()
>>> p.mcq_labels, p.sg_system
(('a', 'b'), 'You are a useful assistant.')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping, Sequence

import yaml

from probe.prompts.chat import has_chat_template, render_prompt
from probe.tasks.crows_pairs.prompts import load_two_choice
from probe.tasks.hbb.data import HBBConcept, HBBQuestion
from probe.scoring.requests import LabelRequest, PerplexityRequest

__all__ = ["HBBPrompts", "load_hbb_prompts", "mcq_user_message", "mcq_requests", "sg_user_message", "sg_prefix",
           "sg_requests", "sg_variation_prompt", "parse_variations", "request_id", "question_meta"]

@dataclass(frozen=True)
class HBBPrompts:
    """The prompt texts of ``resources/hbb_prompts.yaml``; the MCQ's instruction, labels and answer cue are
    the two-choice question prompt CrowS-Pairs' protocol (a) asks too (:mod:`probe.tasks.crows_pairs.prompts`)."""

    mcq_instruction: str
    mcq_question: str
    mcq_labels: tuple[str, str]
    mcq_answer_cue: str
    sg_instruction: str  # the authors' evaluate_perplexity.txt
    sg_user: str  # layout of the HBB-SG user turn: {instruction}, {context}
    sg_system: str
    sg_variation_prompt: str  # the authors' qa_generate2_more_sentences.txt
    sg_variations_asked: int  # how many sentences that prompt asks for (9)


@lru_cache(maxsize=1)
def load_hbb_prompts() -> HBBPrompts:
    """Load the packaged prompt texts (cached)."""
    res = resources.files("probe.tasks.hbb").joinpath("resources")
    raw = yaml.safe_load(res.joinpath("hbb_prompts.yaml").read_text(encoding="utf-8"))
    two = load_two_choice()
    return HBBPrompts(
        mcq_instruction=two.instruction,
        mcq_question=raw["mcq_question"],
        mcq_labels=two.labels,
        mcq_answer_cue=two.answer_cue,
        # the authors' prompt files, verbatim (no trailing newline in theirs either)
        sg_instruction=res.joinpath("hbb_evaluate_perplexity.txt").read_text(encoding="utf-8"),
        sg_user=raw["sg_user"],
        sg_system=raw["sg_system"],
        sg_variation_prompt=res.joinpath("hbb_qa_generate2_more_sentences.txt").read_text(encoding="utf-8"),
        sg_variations_asked=int(raw["sg_variations_asked"]),
    )


def question_meta(question: HBBQuestion, kind: str) -> dict[str, Any]:
    """The ``meta`` of a request about ``question`` (see the module doc)."""
    return {"question_id": question.id, "kind": kind, "concept_id": question.concept_id,
            "category": question.category, "descriptor_type": question.descriptor_type,
            "identity": question.identity}


def request_id(question_id: str, kind: str, option: int | None = None, variation: int | None = None) -> str:
    """``request_id("0:age:1:young", "sg", 1, 0) -> "0:age:1:young|sg|1|0"``."""
    if kind == "sg":
        return f"{question_id}|sg|{option}|{variation}"
    if kind not in ("mcq", "mcq_swap"):
        raise ValueError(f"unknown request kind {kind!r}")
    return f"{question_id}|{kind}"


def mcq_user_message(question: HBBQuestion, swapped: bool = False, prompts: HBBPrompts | None = None) -> str:
    """The user turn: instruction, context and the two options (``a) = s1`` unless ``swapped``)."""
    p = prompts or load_hbb_prompts()
    a, b = question.options[::-1] if swapped else question.options
    body = p.mcq_question.format(context=question.context, option_a=a, option_b=b)
    return f"{p.mcq_instruction}\n\n{body}"


def mcq_requests(
    questions: Sequence[HBBQuestion],
    tokenizer: Any,
    *,
    swapped: bool = False,
    chat_template: bool = True,
    system: str | None = None,
    prompts: HBBPrompts | None = None,
) -> list[LabelRequest]:
    """One label request per question. ``group`` = the concept pair, so that all its
    variants (every category, type and identity) are batched together and share the
    instruction's forward pass."""

    p = prompts or load_hbb_prompts()
    use_chat = chat_template and has_chat_template(tokenizer)
    prefill = None if use_chat else p.mcq_answer_cue
    kind = "mcq_swap" if swapped else "mcq"
    return [
        LabelRequest(
            id=request_id(q.id, kind),
            prompt=render_prompt(
                tokenizer, mcq_user_message(q, swapped, p), system=system, prefill=prefill, chat_template=chat_template
            ),
            labels=p.mcq_labels,
            group=f"hbb:{q.concept_id}:{kind}",
            meta=question_meta(q, kind),
        )
        for q in questions
    ]


def sg_user_message(question: HBBQuestion, prompts: HBBPrompts | None = None) -> str:
    """The HBB-SG user turn: the authors' evaluation prompt, then the question's context."""
    p = prompts or load_hbb_prompts()
    return p.sg_user.format(instruction=p.sg_instruction, context=question.context)


def sg_prefix(question: HBBQuestion, tokenizer: Any, *, chat_template: bool = True, system: str | None = None,
              prompts: HBBPrompts | None = None) -> str:
    """The unscored HBB-SG prefix: system and user turn, up to the empty assistant turn.

    Without a chat template (a base model) the plain rendering ends with a newline, so the
    sentence starts a line of its own (no joining space).
    """

    text = render_prompt(tokenizer, sg_user_message(question, prompts), system=system, chat_template=chat_template)
    use_chat = chat_template and has_chat_template(tokenizer)
    return text if use_chat else text + "\n"


def sg_requests(
    questions: Sequence[HBBQuestion],
    tokenizer: Any,
    variations: Mapping[int, tuple[Sequence[str], Sequence[str]]] | None = None,
    *,
    chat_template: bool = True,
    system: str | None = None,
    prompts: HBBPrompts | None = None,
) -> list[PerplexityRequest]:
    """Perplexity requests for every paired option variation of every question.

    ``variations`` maps ``concept_id`` to ``(s1 templates, s2 templates)``; variation j of
    s1 is paired with variation j of s2 (normalized together), so only the first
    ``min(n1, n2)`` of each are scored. A concept without an entry uses its own options
    (n = 1). ``group`` = the question: its 2n sentences share the prompt and are scored together.
    """
    p = prompts or load_hbb_prompts()
    out: list[PerplexityRequest] = []
    for q in questions:
        prefix = sg_prefix(q, tokenizer, chat_template=chat_template, system=system, prompts=p)
        if variations and q.concept_id in variations:
            a, b = variations[q.concept_id]
            n = min(len(a), len(b))
            per_option = (list(a[:n]), list(b[:n]))
        else:
            per_option = ([None], [None])  # the question's own options
        for k, templates in enumerate(per_option, start=1):
            for j, t in enumerate(templates):
                text = q.options[k - 1] if t is None else q.fill(t)
                out.append(
                    PerplexityRequest(
                        id=request_id(q.id, "sg", k, j), text=text, prefix=prefix, group=f"hbb-sg:{q.id}",
                        space="auto",
                        meta={**question_meta(q, "sg"), "option": k, "variation": j,
                              "template": t if t is not None else None},
                    )
                )
    return out


def sg_variation_prompt(concept: HBBConcept, option: int, prompts: HBBPrompts | None = None) -> str:
    """The authors' variation prompt for one option of a concept pair (the user turn).

    ``[[sentence1_generated]]`` is the context template, ``[[picked_concept2]]`` the option's
    concept (``bias type1`` for option 1, ``bias type2`` for option 2); ``[[X]]`` stays.
    """
    if option not in (1, 2):
        raise ValueError(f"option must be 1 or 2, got {option!r}")
    p = prompts or load_hbb_prompts()
    concept_text = concept.concept_1 if option == 1 else concept.concept_2
    return (p.sg_variation_prompt.replace("[[sentence1_generated]]", concept.context)
            .replace("[[picked_concept2]]", concept_text))


_MARKER = re.compile(r"\bsentence(?:\s*\d+)?\s*\**\s*:\**", re.IGNORECASE)
_SINGLE_SLOT = re.compile(r"(?<!\[)\[X\](?!\])")  # "[X]": a slip for the slot "[[X]]"


def parse_variations(text: str, limit: int | None = None) -> list[str]:
    """The sentences of a generated answer, in order: what follows each ``Sentence:`` marker (the
    format the prompt asks for; ``Sentence 2:`` and Markdown bold are tolerated) up to the end of
    its line or the next marker, stripped of quotes and asterisks; empty ones dropped; at most
    ``limit``. (The authors split their single-sentence answers on ``"Sentence:"`` the same way.)
    A single-bracket ``[X]`` (small models drop a bracket) is read as the slot ``[[X]]``.

    >>> parse_variations('Sentence: [[X]] ran.\\n**Sentence 2:** "[[X]] hid." Sentence: [[X]] sat.\\nSentence:')
    ['[[X]] ran.', '[[X]] hid.', '[[X]] sat.']
    """
    marks = list(_MARKER.finditer(text))
    out = []
    for m, nxt in zip(marks, marks[1:] + [None]):
        seg = text[m.end(): nxt.start() if nxt else len(text)].strip()
        sent = seg.splitlines()[0].strip().strip('*"\u201c\u201d').strip() if seg else ""
        if sent:
            out.append(_SINGLE_SLOT.sub("[[X]]", sent))
    return out if limit is None else out[:limit]
