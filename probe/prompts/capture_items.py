"""The item file of ``probe activations``, read into scorer requests and where their spans are.

One JSON object per line, in either of two shapes:

* **prompt items**: ``id``; ``prompt`` (an already rendered string),
  ``messages`` (a chat) or ``user`` with optional ``system`` and ``prefill``
  (rendered with the model's chat template unless ``chat_template=False``);
  the option labels scored at the last prompt token in ``labels`` (or
  ``options`` with ``kind`` ``label``, as in ``probe score``); ``answer_label``
  (for the ``label`` position); any other fields are kept as the request's
  ``meta`` and may be named by ``span:FIELD`` / ``mean:FIELD``.
* **a task's own items**: a line some task reads in its own item format
  (:meth:`probe.tasks.facets.Analyses.capture_item`, e.g. the BBQ-family items
  ``probe data build`` writes), rendered by that task's prompt; the spans are
  the fields the task keeps as ``meta``.

An item with labels becomes a :class:`~probe.scoring.requests.LabelRequest`;
one without, a one-option :class:`~probe.scoring.requests.ContinuationRequest`
(its ``answer_label`` as the option, so the ``label`` position is that label's
first token). A span field's text is looked up in the rendered prompt starting
where the user text begins (``search_from``), so a system prompt or template
text never matches first.

>>> ci = parse_line({"id": "q1", "prompt": "Person A has wrinkles. Who? Answer:", "labels": ["A", "B"],
...                  "cue": "has wrinkles"})
>>> ci.request.labels, ci.request.meta["cue"]
(('A', 'B'), 'has wrinkles')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from probe.errors import InputError
from probe.io import iter_jsonl
from probe.prompts.chat import render_prompt
from probe.scoring.requests import ContinuationRequest, LabelRequest, Request

_PROMPT_KEYS = ("id", "prompt", "messages", "user", "system", "prefill", "labels", "answer_label")


@dataclass(frozen=True)
class CaptureItem:
    """One line: the request to score and capture, its ``answer_label`` and where span search starts."""

    request: Request
    answer_label: str | None = None
    search_from: int = 0


@dataclass(frozen=True)
class CaptureItems:
    """Every line of an item file: the requests, and the ``answer_labels`` / ``search_from`` maps a
    :class:`probe.activations.CaptureSpec` takes."""

    requests: list[Request] = field(default_factory=list)
    answer_labels: dict[str, str] = field(default_factory=dict)
    search_from: dict[str, int] = field(default_factory=dict)

    def spec_kwargs(self) -> dict[str, Any]:
        return {"answer_labels": dict(self.answer_labels), "search_from": dict(self.search_from)}


def parse_line(d: Mapping[str, Any], render: Callable[..., str] | None = None) -> CaptureItem:
    """A prompt item line; ``render(user=, system=, prefill=, messages=)`` renders ``user``/``messages`` items
    (``ValueError`` naming the field on bad input)."""
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
    meta = {k: v for k, v in d.items() if k not in _PROMPT_KEYS}
    return CaptureItem(request_for(str(d["id"]), prompt, tuple(labels), answer, meta), answer, start)


def request_for(rid: str, prompt: str, labels: tuple[str, ...], answer: str | None, meta: dict) -> Request:
    """A label request when there are labels, else a one-option continuation request (``answer`` or ``x``)."""
    if labels:
        return LabelRequest(rid, prompt, labels, meta=meta)
    return ContinuationRequest(rid, prompt, (answer or "x",), meta=meta)


def read_capture_items(path: str | Path, tokenizer: Any = None, chat_template: bool = True,
                       limit: int | None = None,
                       task_items: Callable[[Mapping[str, Any]], CaptureItem | None] | None = None) -> CaptureItems:
    """Read prompt items from a JSONL file (the first ``limit``), with errors naming the line and field.

    ``task_items(line)``: a line in a task's own item format as a :class:`CaptureItem`, None for a prompt item
    (``probe activations`` asks the registered tasks); it raises ``ValueError`` on a bad line of its format."""

    def render(user=None, system=None, prefill=None, messages=None):
        return render_prompt(tokenizer, user, system=system, prefill=prefill, chat_template=chat_template,
                             messages=messages)

    out = CaptureItems()
    seen: set[str] = set()
    for line_no, d in iter_jsonl(path, required=("id",)):
        if limit is not None and len(out.requests) >= limit:
            break
        try:
            item = task_items(d) if task_items is not None else None
            if item is None:
                item = parse_line(d, render if tokenizer is not None else None)
        except (ValueError, TypeError) as exc:
            msg = str(exc)
            fld = msg.split("'")[1] if msg.startswith("field '") else None
            raise InputError(path, line_no, fld, msg) from exc
        rid = item.request.id
        if rid in seen:
            raise InputError(path, line_no, "id", f"duplicate id {rid!r}")
        seen.add(rid)
        out.requests.append(item.request)
        if item.answer_label:
            out.answer_labels[rid] = item.answer_label
        if item.search_from:
            out.search_from[rid] = item.search_from
    return out
