"""BBQ / ImplicitBBQ prompts: four strategies x two answer formats -> scoring requests.

Strategies (seed 000, appendix B; texts in ``resources/implicitbbq_prompts.yaml``):
``zero_shot``, ``safety``, ``few_shot`` (5 demonstrations of the same dimension
and context kind, never from the test item's template, plus the safety
instruction) and ``cot`` (reasoning chains, greedy or sampled, then the final answer is scored after each).

Answer formats:

* ``oneword`` (default; the seed's prompts as written, no options listed): each
  answer text is scored by its continuation log-likelihood after the prompt.
  Answer texts are ``Person A``/``Person B`` in Person contexts and the group
  words (``grandfather``, ``Muslim``) in explicit ones; the Unknown answer's
  probability is the total over its paraphrases (``resources/unknown_answers.yaml``
  in :mod:`probe.data`). The three option probabilities are the option masses
  renormalised; ``mass`` is the total probability of all scored answer texts.
* ``labels``: the options are listed under labels 1/2/3 and the next-token
  probability of each label is read (``mass`` = the labels' share).

>>> from probe.data.items import BBQItem
>>> it = BBQItem(id="x", source="t", category="age", context="Person A met Person B.",
...              question="Who forgot?", options=("Person A", "Person B", "Unknown"), label=2,
...              target_index=0, unknown_index=2, question_polarity="neg",
...              context_condition="ambig", context_kind="implicit",
...              background="Person A has wrinkles.\\nPerson B has smooth skin.",
...              group_words=("Person A", "Person B", ""))
>>> print(user_text(it, "zero_shot"))
Background:
Person A has wrinkles.
Person B has smooth skin.
<BLANKLINE>
Context:
Person A met Person B.
<BLANKLINE>
Question:
Who forgot?
<BLANKLINE>
Answer:
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Sequence

import yaml

from probe.io import stable_hash
from probe.data.implicit_text import load_unknown_answers
from probe.data.items import BBQItem

__all__ = ["STRATEGIES", "FORMATS", "PreparedPrompt", "prompts", "system_text", "user_text", "select_demos",
           "oneword_options", "prepare", "cot_final_prompt", "find_cue", "CUE_PATTERN", "to_probs", "DemoIndex"]

STRATEGIES = ("zero_shot", "safety", "few_shot", "cot")
FORMATS = ("oneword", "labels")


@lru_cache(maxsize=1)
def prompts() -> dict[str, Any]:
    """The prompt texts (``resources/implicitbbq_prompts.yaml``)."""
    return yaml.safe_load(resources.files("probe.prompts").joinpath(
        "resources/implicitbbq_prompts.yaml").read_text(encoding="utf-8"))


def _has_background(item: BBQItem) -> bool:
    return bool(item.background)


def system_text(item: BBQItem, strategy: str) -> str:
    """The seed's system message for ``strategy`` and the item's context kind."""
    s = prompts()["system"]
    kind = "implicit" if _has_background(item) else "explicit"
    if strategy == "zero_shot":
        return s[f"zero_shot_{kind}"]
    if strategy == "safety":
        return s["safety"]
    if strategy == "few_shot":
        return s[f"few_shot_{kind}"]
    if strategy == "cot":
        return s["cot"]
    raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")


def oneword_options(item: BBQItem) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(answer texts to score, the option index each belongs to) for the one-word format."""
    _, paraphrases = load_unknown_answers()
    texts: list[str] = []
    owner: list[int] = []
    for i in range(3):
        if i == item.unknown_index:
            cands = list(paraphrases)
        else:
            word = item.group_words[i] or item.options[i]
            cands = [word]
        for c in cands:
            if c not in texts:
                texts.append(c)
                owner.append(i)
    return tuple(texts), tuple(owner)


def _answer_word(item: BBQItem) -> str:
    """The ground-truth one-word answer shown in a few-shot demonstration."""
    if item.label == item.unknown_index:
        return load_unknown_answers()[0]
    return item.group_words[item.label] or item.options[item.label]


def user_text(item: BBQItem, strategy: str, answer_format: str = "oneword",
              demos: Sequence[BBQItem] = ()) -> str:
    """The user turn (appendix B layout), ending with ``Answer:``."""
    u = prompts()["user"]
    parts: list[str] = []
    if strategy == "few_shot":
        for k, d in enumerate(demos, 1):
            if d.background:
                parts.append(u["demo_background"].format(k=k, background=d.background))
            parts.append(u["demo_body"].format(k=k, context=d.context, question=d.question, answer=_answer_word(d)))
    if item.background:
        key = "cot_background" if strategy == "cot" else "background"
        parts.append(u[key].format(background=item.background))
    parts.append(u["body"].format(context=item.context, question=item.question))
    if answer_format == "labels":
        labels = prompts()["labels"]
        choices = "\n".join(f"{lab}. {opt}" for lab, opt in zip(labels, item.options))
        parts.append(u["choices"].format(choices=choices))
    elif answer_format != "oneword":
        raise ValueError(f"unknown answer format {answer_format!r}; choose from {', '.join(FORMATS)}")
    if strategy == "cot":
        parts.append(u["cot_instruction"])
    parts.append(u["answer"])
    return "".join(parts)


class DemoIndex:
    """Few-shot demonstration pool, indexed by (dimension, has background)."""

    def __init__(self, pool: Sequence[BBQItem]) -> None:
        self._by_key: dict[tuple[str, bool], list[BBQItem]] = defaultdict(list)
        for it in pool:
            self._by_key[(it.category, bool(it.background))].append(it)

    def select(self, item: BBQItem, k: int = 5, seed: int = 0) -> list[BBQItem]:
        return select_demos(item, self._by_key.get((item.category, bool(item.background)), []), k, seed)


def select_demos(item: BBQItem, pool: Sequence[BBQItem], k: int = 5, seed: int = 0) -> list[BBQItem]:
    """``k`` demonstrations for ``item``: same dimension and context kind, other templates.

    Deterministic in (item id, seed). Alternates ambiguous and disambiguated items
    (ambiguous first) so the demonstrations show both "Unknown" and a person as answers.
    """
    cands = [d for d in pool if d.template_id != item.template_id and d.category == item.category
             and bool(d.background) == bool(item.background) and d.id != item.id]
    rng = random.Random(stable_hash(item.id, seed))
    amb = [d for d in cands if d.context_condition == "ambig"]
    dis = [d for d in cands if d.context_condition == "disambig"]
    rng.shuffle(amb)
    rng.shuffle(dis)
    order = [d for pair in itertools.zip_longest(amb, dis) for d in pair if d is not None]
    out: list[BBQItem] = []
    used: set[str] = set()
    for d in order:  # first one demonstration per template ...
        if len(out) < k and d.template_id not in used:
            used.add(d.template_id)
            out.append(d)
    for d in order:  # ... then repeat templates only if there are too few
        if len(out) < k and d not in out:
            out.append(d)
    return out


@dataclass(frozen=True)
class PreparedPrompt:
    """A rendered prompt and how its scored answers map back to the three options."""

    item_id: str
    prompt: str
    answer_format: str
    texts: tuple[str, ...]  # continuation texts (oneword) or labels (labels)
    owner: tuple[int, ...]  # option index of each text
    space: str = "auto"  # how answers join the prompt (see probe.scoring.requests.SpaceRule)

    def request(self, group: str | None = None):
        """The scoring request."""
        from probe.scoring.requests import ContinuationRequest, LabelRequest

        if self.answer_format == "labels":
            return LabelRequest(id=self.item_id, prompt=self.prompt, labels=self.texts, group=group,
                                space=self.space)
        return ContinuationRequest(id=self.item_id, prompt=self.prompt, options=self.texts, group=group,
                                   space=self.space)


def prepare(item: BBQItem, tokenizer: Any, strategy: str, answer_format: str = "oneword",
            demos: Sequence[BBQItem] = (), chat_template: bool = True) -> PreparedPrompt:
    """Render the item's prompt with the model's chat template (for CoT: the generation prompt)."""
    from probe.prompts.chat import render_prompt

    prompt = render_prompt(tokenizer, user_text(item, strategy, answer_format, demos),
                           system=system_text(item, strategy), chat_template=chat_template)
    if answer_format == "labels":
        labels = tuple(prompts()["labels"])
        return PreparedPrompt(item.id, prompt, answer_format, labels, (0, 1, 2))
    texts, owner = oneword_options(item)
    return PreparedPrompt(item.id, prompt, answer_format, texts, owner)


#: the answer cues a reasoning may write (case-insensitive): "Final Answer:", "final answer :",
#: "**Final Answer**", "**Final Answer:**", "**Final Answer**:"
CUE_PATTERN = re.compile(r"\*\*final answer\s*:?\s*\*\*:?|final answer\s*:", re.IGNORECASE)


def find_cue(reasoning: str) -> int | None:
    """Where the first answer cue (:data:`CUE_PATTERN`) starts in ``reasoning``; None if it never reaches one.

    >>> find_cue("So A. **Final Answer**: Person A"), find_cue("so: final answer: x"), find_cue("I think A")
    (6, 4, None)
    """
    m = CUE_PATTERN.search(reasoning)
    return m.start() if m else None


def cot_final_prompt(prepared: PreparedPrompt, reasoning: str) -> PreparedPrompt:
    """The CoT scoring prompt: generation prompt + the model's reasoning + ``Final Answer:``.

    The reasoning is cut just before the first answer cue it wrote (any
    :data:`CUE_PATTERN` variant), so the answer itself is scored, not read from
    the text; the canonical cue is then appended.
    """
    cue = prompts()["cot"]["final_answer_cue"]
    at = find_cue(reasoning)
    text = (reasoning if at is None else reasoning[:at]).rstrip()
    prompt = prepared.prompt + text + ("\n" if text else "") + cue
    # Labels are scored right after the cue ("Final Answer:1"): with a joining space many
    # tokenizers split " 1" into a bare space token shared by every label.
    space = "none" if prepared.answer_format == "labels" else "auto"
    return PreparedPrompt(prepared.item_id, prompt, prepared.answer_format, prepared.texts, prepared.owner, space)


def to_probs(prepared: PreparedPrompt, result: Any) -> dict[str, Any]:
    """Option probabilities (3), the mass the scored answers carry, and raw log-probs."""
    if prepared.answer_format == "labels":
        probs = [float(p) for p in result.probs]
        return {"probs": probs, "mass": float(result.label_mass), "logprobs": [float(x) for x in result.logprobs]}
    lps = [float(x) for x in result.logprobs]
    mass = [0.0, 0.0, 0.0]
    for lp, i in zip(lps, prepared.owner):
        mass[i] += math.exp(lp) if math.isfinite(lp) else 0.0
    total = sum(mass)
    if total <= 0.0:
        # every answer text underflowed: fall back to log-space comparison of the best text per option
        best = [max((lp for lp, j in zip(lps, prepared.owner) if j == i), default=-math.inf) for i in range(3)]
        m = max(best)
        w = [math.exp(b - m) if math.isfinite(b) else 0.0 for b in best]
        probs = [x / sum(w) for x in w]
    else:
        probs = [x / total for x in mass]
    return {"probs": probs, "mass": total, "logprobs": lps}
