"""Items for ``probe activations``: what to run, which labels to score, which spans to read.

One JSON object per line, in either of two shapes:

* **prompt items** (as ``probe score`` takes them): ``id``; ``prompt`` (an
  already rendered string), ``messages`` (a chat) or ``user`` with optional
  ``system`` and ``prefill`` (rendered with the model's chat template unless
  ``--no-chat-template``); the option labels scored at the last prompt token
  in ``labels`` (or ``options`` with ``kind`` ``label``, as in ``probe
  score``); ``answer_label`` (for the ``label`` position); any other fields
  are kept as metadata and may be named by ``span:FIELD`` / ``mean:FIELD``.
* **BBQ items** (:class:`probe.data.items.BBQItem` lines, e.g. from
  ``probe data build implicitbbq``): rendered by
  :func:`probe.prompts.bbq.prepare` with the labelled answer format (the
  options listed under labels, next-token label scoring) and the zero-shot
  strategy by default; the spans ``background`` (the cue sentences),
  ``context`` and ``question`` are available.

A span field's text is looked up in the rendered prompt starting where the
user text begins, so a system prompt or template text never matches first.

>>> it = ActivationItem.from_dict({"id": "q1", "prompt": "Person A has wrinkles. Who? Answer:",
...                                "labels": ["A", "B"], "cue": "has wrinkles"})
>>> it.labels, it.fields["cue"]
(('A', 'B'), 'has wrinkles')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from probe.errors import InputError
from probe.io import iter_jsonl

_PROMPT_KEYS = ("id", "prompt", "messages", "user", "system", "prefill", "labels", "answer_label")


@dataclass(frozen=True)
class ActivationItem:
    """A prompt to run, with its labels and the fields spans can refer to."""

    id: str
    prompt: str
    labels: tuple[str, ...] = ()
    answer_label: str | None = None
    user_start: int = 0  # where the user text starts in ``prompt`` (span search begins here)
    fields: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], render: Callable[..., str] | None = None) -> "ActivationItem":
        """Build from a prompt item; ``render(user=, system=, prefill=)`` renders ``user`` items."""
        if not isinstance(d.get("id"), (str, int)) or d.get("id") == "":
            raise ValueError("field 'id' must be a non-empty string")
        if isinstance(d.get("prompt"), str) and d["prompt"]:
            prompt, start = d["prompt"], 0
        elif (isinstance(d.get("user"), str) and d["user"]) or isinstance(d.get("messages"), list):
            if render is None:
                raise ValueError("field 'user' needs a tokenizer to render it")
            prompt = render(user=d.get("user"), system=d.get("system"), prefill=d.get("prefill"),
                            messages=d.get("messages"))
            first = d.get("user") or next((m.get("content", "") for m in d["messages"] if m.get("role") == "user"), "")
            start = max(prompt.find(first), 0) if first else 0
        else:
            raise ValueError("needs a non-empty 'prompt', 'messages' or 'user'")
        labels = d.get("labels") or (d.get("options") if d.get("kind", "label") == "label" else None) or ()
        if not isinstance(labels, (list, tuple)) or not all(isinstance(x, str) and x.strip() for x in labels):
            raise ValueError("field 'labels' must be a list of non-empty strings")
        answer = d.get("answer_label")
        if answer is not None and not (isinstance(answer, str) and answer.strip()):
            raise ValueError("field 'answer_label' must be a non-empty string")
        extra = {k: v for k, v in d.items() if k not in _PROMPT_KEYS}
        return cls(str(d["id"]), prompt, tuple(labels), answer, start, extra)


def bbq_to_item(d: Mapping[str, Any], tokenizer: Any, chat_template: bool = True,
                strategy: str = "zero_shot") -> ActivationItem:
    """A BBQItem dict rendered by the project's BBQ prompt (labelled options), all fields kept."""
    from probe.data.items import BBQItem
    from probe.prompts.bbq import prepare

    item = BBQItem.from_dict(d)
    prep = prepare(item, tokenizer, strategy, "labels", chat_template=chat_template)
    user_start = prep.prompt.find(item.background or item.context)
    fields = {k: v for k, v in d.items() if k != "id"}
    return ActivationItem(item.id, prep.prompt, tuple(prep.texts), None, max(user_start, 0), fields)


def read_items(path: str | Path, tokenizer: Any = None, chat_template: bool = True,
               strategy: str = "zero_shot") -> Iterator[ActivationItem]:
    """Read prompt or BBQ items from a JSONL file, with errors that name the line and field."""
    from probe.prompts.chat import render_prompt

    def render(user=None, system=None, prefill=None, messages=None):
        return render_prompt(tokenizer, user, system=system, prefill=prefill, chat_template=chat_template,
                             messages=messages)

    seen: set[str] = set()
    for line_no, d in iter_jsonl(path, required=("id",)):
        try:
            if is_bbq_item(d):
                item = bbq_to_item(d, tokenizer, chat_template, strategy)
            else:
                item = ActivationItem.from_dict(d, render if tokenizer is not None else None)
        except (ValueError, TypeError) as exc:
            msg = str(exc)
            fld = msg.split("'")[1] if msg.startswith("field '") else None
            raise InputError(path, line_no, fld, msg) from exc
        if item.id in seen:
            raise InputError(path, line_no, "id", f"duplicate id {item.id!r}")
        seen.add(item.id)
        yield item


def is_bbq_item(d: Mapping[str, Any]) -> bool:
    """A BBQItem line: context, question and three options, no prompt of its own."""
    return all(k in d for k in ("context", "question", "options")) and not any(
        k in d for k in ("prompt", "user", "messages"))
