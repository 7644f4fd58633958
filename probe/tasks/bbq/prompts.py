"""BBQ / ImplicitBBQ prompts: four strategies x two answer formats -> scoring requests.

Strategies (ImplicitBBQ paper, appendix B; texts in ``resources/implicitbbq_prompts.yaml``):
``zero_shot``, ``safety``, ``few_shot`` (the shipped demonstrations of the item's
dimension and context kind, never from its template, :mod:`probe.tasks.implicitbbq.fewshot`;
plus the safety instruction) and ``cot`` (reasoning chains, greedy or sampled, then the final answer is scored after each).

Answer formats:

* ``oneword`` (default; the paper's prompts as written, no options listed): each
  option's probability is the total over its surface forms
  (:mod:`probe.tasks.bbq.answer_forms`), each scored by its continuation
  log-likelihood after the prompt: ``Person A``/``Person B``; in explicit
  contexts the group answer capitalised, with and without "The"
  (``Grandfather``, ``The grandfather``, ``grandfather``); Unknown: its
  paraphrases (``resources/unknown_answers.yaml``,
  :func:`~probe.tasks.bbq.answer_forms.load_unknown_answers`). Forms whose tokens
  equal another's are scored once, and a form whose tokens start with another form of the same option is dropped (its probability is
  inside the shorter one's). The three option probabilities are the option
  masses renormalised; ``mass`` is the total probability of all scored texts.
* ``labels``: the options are listed under labels 1/2/3 and the next-token
  probability of each label is read (``mass`` = the labels' share).

>>> from probe.tasks.bbq.items import BBQItem
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

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Sequence

import yaml

from probe.prompts.chat import render_prompt
from probe.scoring.requests import ContinuationRequest, LabelRequest
from probe.scoring.tokens import Encoder, wants_special_tokens
from probe.tasks.bbq.answer_forms import display_answer, load_unknown_answers, option_forms
from probe.tasks.bbq.items import BBQItem

__all__ = ["STRATEGIES", "FORMATS", "PreparedPrompt", "prompts", "system_text", "user_text", "oneword_options",
           "token_distinct", "prepare", "cot_final_prompt", "find_cue", "CUE_PATTERN", "to_probs"]


STRATEGIES = ("zero_shot", "safety", "few_shot", "cot")
FORMATS = ("oneword", "labels")


@lru_cache(maxsize=1)
def prompts() -> dict[str, Any]:
    """The prompt texts (``resources/implicitbbq_prompts.yaml``)."""
    return yaml.safe_load(resources.files("probe.tasks.bbq").joinpath(
        "resources/implicitbbq_prompts.yaml").read_text(encoding="utf-8"))


def _has_background(item: BBQItem) -> bool:
    return bool(item.background)


def system_text(item: BBQItem, strategy: str) -> str:
    """The paper's system message for ``strategy`` and the item's context kind."""
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
    """(answer texts to score, the option index each belongs to) for the one-word format: every option's
    surface forms (:func:`probe.tasks.bbq.answer_forms.option_forms`; Unknown: its paraphrases)."""
    _, paraphrases = load_unknown_answers()
    texts: list[str] = []
    owner: list[int] = []
    for i, forms in enumerate(option_forms(item, paraphrases)):
        for c in forms:
            if c in texts:
                raise ValueError(f"item {item.id!r}: answer text {c!r} belongs to two options")
            texts.append(c)
            owner.append(i)
    return tuple(texts), tuple(owner)


def token_distinct(prompt: str, texts: Sequence[str], owner: Sequence[int], tokenizer: Any,
                   space: str = "auto") -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``texts`` less those that would count probability twice, judged on the tokens the scorer reads.

    With the scorer's joining rule (:class:`probe.scoring.tokens.Encoder`) a text whose
    continuation tokens equal an earlier text's is dropped (scored once); a text whose tokens
    start with another text's of the same option is dropped (its probability is inside that
    one's); a text whose tokens are a proper prefix of another option's text is dropped (its
    probability would hold the other option's answer). Raises ``ValueError`` when two options
    tokenize identically or an option loses every text.
    """

    enc = Encoder(tokenizer)
    special = wants_special_tokens(tokenizer, prompt)
    ids = [enc.join(prompt, t, space, special)[1] for t in texts]
    keep: list[int] = []
    for a in range(len(texts)):
        same = [b for b in keep if ids[b] == ids[a]]
        if same:
            if owner[same[0]] != owner[a]:
                raise ValueError(f"answer texts {texts[same[0]]!r} and {texts[a]!r} of two options tokenize alike")
            continue
        if any(b != a and owner[b] == owner[a] and len(ids[b]) < len(ids[a]) and ids[a][:len(ids[b])] == ids[b]
               for b in range(len(texts))):
            continue
        if any(owner[b] != owner[a] and len(ids[a]) < len(ids[b]) and ids[b][:len(ids[a])] == ids[a]
               for b in range(len(texts))):
            continue
        keep.append(a)
    missing = set(owner) - {owner[a] for a in keep}
    if missing:
        raise ValueError(f"options {sorted(missing)} have no answer text left after the token check: {list(texts)}")
    return tuple(texts[a] for a in keep), tuple(owner[a] for a in keep)


def _answer_word(item: BBQItem) -> str:
    """The ground-truth one-word answer shown in a few-shot demonstration: the first surface form of the
    correct option ("Grandfather", "Person A", "Karen"; Unknown: the canonical "Unknown")."""
    return display_answer(item, item.label, load_unknown_answers()[0])


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


@dataclass(frozen=True)
class PreparedPrompt:
    """A rendered prompt and how its scored answers map back to the three options."""

    item_id: str
    prompt: str
    answer_format: str
    texts: tuple[str, ...]  # continuation texts (oneword) or labels (labels)
    owner: tuple[int, ...]  # option index of each text
    space: str = "auto"  # how answers join the prompt (see probe.scoring.requests.SpaceRule)
    # oneword: every surface form before the token check (re-checked against a CoT final prompt)
    all_texts: tuple[str, ...] = ()
    all_owner: tuple[int, ...] = ()

    def request(self, group: str | None = None):
        """The scoring request."""

        if self.answer_format == "labels":
            return LabelRequest(id=self.item_id, prompt=self.prompt, labels=self.texts, group=group,
                                space=self.space)
        return ContinuationRequest(id=self.item_id, prompt=self.prompt, options=self.texts, group=group,
                                   space=self.space)


def prepare(item: BBQItem, tokenizer: Any, strategy: str, answer_format: str = "oneword",
            demos: Sequence[BBQItem] = (), chat_template: bool = True) -> PreparedPrompt:
    """Render the item's prompt with the model's chat template (for CoT: the generation prompt)."""

    prompt = render_prompt(tokenizer, user_text(item, strategy, answer_format, demos),
                           system=system_text(item, strategy), chat_template=chat_template)
    if answer_format == "labels":
        labels = tuple(prompts()["labels"])
        return PreparedPrompt(item.id, prompt, answer_format, labels, (0, 1, 2))
    all_texts, all_owner = oneword_options(item)
    texts, owner = token_distinct(prompt, all_texts, all_owner, tokenizer)
    return PreparedPrompt(item.id, prompt, answer_format, texts, owner, all_texts=all_texts, all_owner=all_owner)


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


def cot_final_prompt(prepared: PreparedPrompt, reasoning: str, tokenizer: Any = None) -> PreparedPrompt:
    """The CoT scoring prompt: generation prompt + the model's reasoning + ``Final Answer:``.

    The reasoning is cut just before the first answer cue it wrote (any
    :data:`CUE_PATTERN` variant), so the answer itself is scored, not read from
    the text; the canonical cue is then appended. With ``tokenizer`` the one-word
    surface forms are re-checked (:func:`token_distinct`) against the new prompt end.
    """
    cue = prompts()["cot"]["final_answer_cue"]
    at = find_cue(reasoning)
    text = (reasoning if at is None else reasoning[:at]).rstrip()
    prompt = prepared.prompt + text + ("\n" if text else "") + cue
    # Labels are scored right after the cue ("Final Answer:1"): with a joining space many
    # tokenizers split " 1" into a bare space token shared by every label.
    space = "none" if prepared.answer_format == "labels" else "auto"
    texts, owner = prepared.texts, prepared.owner
    if tokenizer is not None and prepared.all_texts:
        texts, owner = token_distinct(prompt, prepared.all_texts, prepared.all_owner, tokenizer, space)
    return PreparedPrompt(prepared.item_id, prompt, prepared.answer_format, texts, owner, space,
                          prepared.all_texts, prepared.all_owner)


def to_probs(prepared: PreparedPrompt, result: Any) -> dict[str, Any]:
    """Option probabilities (3), the mass the scored answers carry (total and per option: ``option_mass``,
    the sum over an option's texts), and raw log-probs."""
    if prepared.answer_format == "labels":
        probs = [float(p) for p in result.probs]
        lm = float(result.label_mass)
        return {"probs": probs, "mass": lm, "option_mass": [p * lm for p in probs],
                "logprobs": [float(x) for x in result.logprobs]}
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
    return {"probs": probs, "mass": total, "option_mass": mass, "logprobs": lps}
