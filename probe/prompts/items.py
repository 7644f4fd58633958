"""The generic item file that ``probe score`` and ``probe activations`` read.

One JSON object per line::

    {"id": "q1", "prompt": "..." | "messages": [...], "options": ["A", "B"],
     "kind": "label" | "continuation", "group": "optional pairing key"}

``prompt`` is the user turn (rendered through the chat template unless
``--no-chat-template``); ``messages`` is a full chat. Errors name the file,
line and field.

It lives in the prompts layer because it renders prompts (chat templates);
:mod:`probe.scoring` never imports :mod:`probe.prompts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probe.errors import InputError
from probe.io import iter_jsonl
from probe.prompts.chat import has_chat_template, render_prompt
from probe.scoring.requests import ContinuationRequest, LabelRequest, PerplexityRequest, Request

KINDS = ("label", "continuation")


@dataclass(frozen=True)
class PromptStyle:
    chat_template: bool | None = None  # None: use it when the tokenizer has one
    system: str | None = None
    prefill: str | None = None


#: the most characters of text one item may hold by default (prompt or messages, options, system, prefill),
#: checked before anything is rendered or tokenized: a tokenizer's memory grows with the text (a 50 MB prompt
#: took 15 GB), and no open model's context window holds a million characters' worth of tokens
MAX_CHARS = 1_000_000


def read_score_items(path: str | Path, tokenizer: Any, style: PromptStyle, *, max_chars: int | None = None,
                     max_line_bytes: int | None = None) -> list[tuple[dict, Request]]:
    """Parse and validate every line before any scoring starts (bad input costs nothing). ``tokenizer`` None
    with ``chat_template=False``: the fields are checked and prompts rendered as plain text, with no model.

    ``max_chars`` (default :data:`MAX_CHARS`): the most characters of text per item, checked before rendering
    or tokenizing; ``max_line_bytes``: the longest line (:func:`probe.io.iter_jsonl`)."""
    seen: dict[str, int] = {}
    out: list[tuple[dict, Request]] = []
    use_template = style.chat_template if style.chat_template is not None else has_chat_template(tokenizer)
    for n, obj in iter_jsonl(path, required=("id", "options"), max_line_bytes=max_line_bytes):
        check_chars(path, n, obj, ("prompt", "messages", "options"), max_chars,
                    extra=len(style.system or "") + len(style.prefill or ""))
        rid = _item_id(path, n, obj)
        if rid in seen:
            raise InputError(path, n, "id", f"duplicate id {rid!r} (first on line {seen[rid]})")
        seen[rid] = n
        kind = obj.get("kind", "label")
        if kind not in KINDS:
            raise InputError(path, n, "kind", f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
        options = obj["options"]
        if not isinstance(options, list) or not options or not all(isinstance(o, str) and o for o in options):
            raise InputError(path, n, "options", "must be a non-empty list of non-empty strings")
        group = obj.get("group")
        if group is not None and not isinstance(group, (str, int)):
            raise InputError(path, n, "group", "must be a string or integer")
        try:
            prompt = _render(obj, tokenizer, style, use_template)
        except (TypeError, ValueError) as exc:
            field = "messages" if "messages" in obj else "prompt"
            raise InputError(path, n, field, str(exc)) from None
        try:
            cls = LabelRequest if kind == "label" else ContinuationRequest
            req = cls(rid, prompt, tuple(options), group=None if group is None else str(group))
        except ValueError as exc:
            raise InputError(path, n, "options", str(exc)) from None
        out.append((obj, req))
    return out


def _item_id(path: str | Path, n: int, obj: dict) -> str:
    """The item's id as a string; ``7`` and ``"7"`` are the same id (records store strings)."""
    rid = obj["id"]
    if not isinstance(rid, (str, int)) or isinstance(rid, bool) or str(rid) == "":
        raise InputError(path, n, "id", "must be a non-empty string or integer")
    return str(rid)


def _render(obj: dict, tokenizer: Any, style: PromptStyle, use_template: bool) -> str:
    if "messages" in obj and "prompt" in obj:
        raise ValueError("give either 'prompt' or 'messages', not both")
    if "messages" in obj:
        if not isinstance(obj["messages"], list) or not obj["messages"]:
            raise ValueError("must be a non-empty list of {role, content} objects")
        return render_prompt(tokenizer, messages=obj["messages"], system=style.system, prefill=style.prefill, chat_template=use_template)
    prompt = obj.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise ValueError("missing: each line needs a non-empty 'prompt' string or a 'messages' list")
    return render_prompt(tokenizer, prompt, system=style.system, prefill=style.prefill, chat_template=use_template)


def read_perplexity_items(path: str | Path, lines: list[int] | None = None, *, max_chars: int | None = None,
                          max_line_bytes: int | None = None) -> list[PerplexityRequest]:
    """``{id, text, prefix?}`` lines as requests; ``lines``, when given, receives each request's line number.
    ``max_chars`` / ``max_line_bytes``: as :func:`read_score_items`."""
    seen: dict[str, int] = {}
    out = []
    lines = [] if lines is None else lines
    for n, obj in iter_jsonl(path, required=("id", "text"), max_line_bytes=max_line_bytes):
        check_chars(path, n, obj, ("text", "prefix"), max_chars)
        rid = _item_id(path, n, obj)
        if rid in seen:
            raise InputError(path, n, "id", f"duplicate id {rid!r} (first on line {seen[rid]})")
        seen[rid] = n
        text, prefix = obj["text"], obj.get("prefix", "")
        if not isinstance(text, str) or not text:
            raise InputError(path, n, "text", "must be a non-empty string")
        if not isinstance(prefix, str):
            raise InputError(path, n, "prefix", "must be a string")
        out.append(PerplexityRequest(rid, text, prefix=prefix, space="none"))
        lines.append(n)
    return out


def check_chars(path: str | Path, line: int, obj: dict, fields: tuple[str, ...], max_chars: int | None = None,
                extra: int = 0) -> None:
    """An :class:`InputError` naming the file, line, field and limit when the text of ``fields`` (strings, and
    the strings inside lists and objects) plus ``extra`` characters is over ``max_chars`` (default
    :data:`MAX_CHARS`); counted on the parsed JSON, before any rendering or tokenizing.

    >>> check_chars("x.jsonl", 3, {"prompt": "abcd"}, ("prompt",), max_chars=3)
    Traceback (most recent call last):
    ...
    probe.errors.InputError: x.jsonl, line 3, field 'prompt': the item's text is 4 characters long, over the limit of 3 checked before tokenizing (raise it with --max-chars)
    """
    limit = MAX_CHARS if max_chars is None else int(max_chars)
    total, largest, largest_field = extra, -1, fields[0]
    for f in fields:
        n = _text_len(obj.get(f))
        total += n
        if n > largest:
            largest, largest_field = n, f
    if total > limit:
        raise InputError(path, line, largest_field, f"the item's text is {total:,} characters long, over the limit "
                         f"of {limit:,} checked before tokenizing (raise it with --max-chars)")


def _text_len(value: Any) -> int:
    """Characters in every string inside ``value`` (iterative: hostile nesting cannot exhaust the stack)."""
    total, stack = 0, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v)
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
    return total
