"""HBB questions -> scoring requests (MCQ label scoring and HBB-SG perplexity).

MCQ (seed 004, Table 11): the instruction, the context and the two options
under ``a)``/``b)``; one forward pass gives P(a), P(b) (softmax over the two
labels). Option order: ``a) = s1, b) = s2``; the swapped order (``a) = s2``)
is a second request, so that position bias can be averaged out.

HBB-SG (appendix E.1): each option sentence (or each of its n variations) is
scored by its perplexity as the continuation of ``instruction + context``; the
prefix is not scored.

Each request carries its structure in ``meta`` (``question_id``, ``kind``:
``mcq`` / ``mcq_swap`` / ``sg``, ``concept_id``, ``category``,
``descriptor_type``, ``identity``; HBB-SG adds ``option``: 1 for s1, 2 for s2,
and ``variation``: the sentence variation index), which the ``hbb`` task
(:mod:`probe.tasks.hbb`) joins back on. Ids (``{question_id}|mcq``,
``{question_id}|mcq_swap``, ``{question_id}|sg|{option}|{j}``) only need to be
unique; nothing parses them.

>>> p = load_hbb_prompts()
>>> p.mcq_labels
('a', 'b')
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping, Sequence

import yaml

from probe.data.hbb import HBBQuestion
from probe.scoring.requests import LabelRequest, PerplexityRequest

__all__ = ["HBBPrompts", "load_hbb_prompts", "mcq_user_message", "mcq_requests", "sg_requests", "request_id",
           "question_meta"]


@dataclass(frozen=True)
class HBBPrompts:
    """The prompt texts of ``resources/hbb_prompts.yaml``."""

    mcq_instruction: str
    mcq_question: str
    mcq_labels: tuple[str, str]
    mcq_answer_cue: str
    sg_instruction: str
    sg_prefix: str


@lru_cache(maxsize=1)
def load_hbb_prompts() -> HBBPrompts:
    """Load the packaged prompt texts (cached)."""
    text = resources.files("probe.prompts").joinpath("resources/hbb_prompts.yaml").read_text(encoding="utf-8")
    raw = yaml.safe_load(text)
    return HBBPrompts(
        mcq_instruction=raw["mcq_instruction"],
        mcq_question=raw["mcq_question"],
        mcq_labels=tuple(raw["mcq_labels"]),
        mcq_answer_cue=raw["mcq_answer_cue"],
        sg_instruction=raw["sg_instruction"],
        sg_prefix=raw["sg_prefix"],
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
    from probe.prompts.chat import render_prompt

    p = prompts or load_hbb_prompts()
    use_chat = chat_template and bool(getattr(tokenizer, "chat_template", None))
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


def sg_prefix(question: HBBQuestion, prompts: HBBPrompts | None = None) -> str:
    """The unscored HBB-SG prefix: story instruction + the question's context."""
    p = prompts or load_hbb_prompts()
    return p.sg_prefix.format(instruction=p.sg_instruction, context=question.context)


def sg_requests(
    questions: Sequence[HBBQuestion],
    variations: Mapping[int, tuple[Sequence[str], Sequence[str]]] | None = None,
    prompts: HBBPrompts | None = None,
) -> list[PerplexityRequest]:
    """Perplexity requests for every option sentence (variation) of every question.

    ``variations`` maps ``concept_id`` to ``(s1 templates, s2 templates)``; a concept
    without an entry uses its own option (n = 1). The option is joined to the
    prefix with one space (``space="auto"``).
    """
    p = prompts or load_hbb_prompts()
    out: list[PerplexityRequest] = []
    for q in questions:
        prefix = sg_prefix(q, p)
        per_option = (
            [[q.fill(t) for t in variations[q.concept_id][k]] for k in (0, 1)]
            if variations and q.concept_id in variations
            else [[q.options[0]], [q.options[1]]]
        )
        for k, texts in enumerate(per_option, start=1):
            for j, text in enumerate(texts):
                out.append(
                    PerplexityRequest(
                        id=request_id(q.id, "sg", k, j), text=text, prefix=prefix, group=f"hbb-sg:{q.concept_id}",
                        space="auto", meta={**question_meta(q, "sg"), "option": k, "variation": j},
                    )
                )
    return out
