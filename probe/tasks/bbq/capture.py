"""BBQ-family item lines (:class:`~probe.tasks.bbq.items.BBQItem`) as ``probe activations`` items
(:meth:`BBQAnalyses.capture_item <probe.tasks.bbq.task.BBQAnalyses.capture_item>`).

A line with ``context``, ``question`` and ``options`` and no prompt of its own
(e.g. from ``probe data build implicitbbq``) is rendered by the project's BBQ
prompt (:func:`probe.tasks.bbq.prompts.prepare`) with the labelled answer format
(the options listed under labels, next-token label scoring) and the given
strategy; every field is kept as meta, so the spans ``background`` (the cue
sentences), ``context`` and ``question`` are available.
"""

from __future__ import annotations

from typing import Any, Mapping

from probe.prompts.capture_items import CaptureItem, request_for
from probe.tasks.bbq.items import BBQItem
from probe.tasks.bbq.prompts import prepare

__all__ = ["capture_line", "is_bbq_item", "parse_bbq_line"]


def parse_bbq_line(d: Mapping[str, Any], tokenizer: Any, chat_template: bool = True,
                   strategy: str = "zero_shot") -> CaptureItem:
    """A BBQItem line rendered by the project's BBQ prompt (labelled options), every field kept as meta."""

    item = BBQItem.from_dict(d)
    prep = prepare(item, tokenizer, strategy, "labels", chat_template=chat_template)
    start = prep.prompt.find(item.background or item.context)
    meta = {k: v for k, v in d.items() if k != "id"}
    return CaptureItem(request_for(item.id, prep.prompt, tuple(prep.texts), None, meta), None, max(start, 0))


def is_bbq_item(d: Mapping[str, Any]) -> bool:
    """A BBQItem line: context, question and three options, no prompt of its own."""
    return all(k in d for k in ("context", "question", "options")) and not any(
        k in d for k in ("prompt", "user", "messages"))


def capture_line(d: Mapping[str, Any], tokenizer: Any, chat_template: bool = True,
                 strategy: str = "zero_shot") -> CaptureItem | None:
    """A BBQ item line as a capture item; None when the line is not one (a prompt item)."""
    return parse_bbq_line(d, tokenizer, chat_template, strategy) if is_bbq_item(d) else None
