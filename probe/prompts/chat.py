"""Render a prompt to the exact string the scorer tokenizes.

Rules (documented in ``docs/scoring.md`` and tested):

- ``chat_template=True`` and the tokenizer has one: the system message (if any)
  and the user turn go through ``tokenizer.apply_chat_template`` with the
  generation prompt appended. Templates that reject a ``system`` role get the
  system text folded into the user turn (``system + "\\n\\n" + user``).
- ``prefill`` (e.g. ``"Answer:"``) is appended verbatim after the assistant
  header, so the model continues the assistant's own words.
- ``chat_template=False`` (base models): plain text,
  ``system + "\\n\\n" + user`` then ``"\\n" + prefill`` when given.

The rendered string of a chat template already holds any BOS token, so the
scorer tokenizes it without adding special tokens again (see
:func:`probe.scoring.tokens.wants_special_tokens`: a tokenizer rule, so it
lives with the tokenization, below the prompts layer).

>>> class Plain:  # a tokenizer without a chat template
...     chat_template = None
>>> render_prompt(Plain(), "Who?", system="Be brief.", prefill="Answer:")
'Be brief.\\n\\nWho?\\nAnswer:'
"""

from __future__ import annotations

from typing import Any

from probe.errors import ProbeError

__all__ = ["ChatTemplateError", "apply_template", "fold_system", "has_chat_template", "render_prompt"]


def has_chat_template(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` carries a chat template (``None``, a plain object or an empty template: no).

    >>> class Plain:
    ...     chat_template = None
    >>> has_chat_template(Plain()), has_chat_template(None)
    (False, False)
    """
    return bool(getattr(tokenizer, "chat_template", None))


def render_prompt(
    tokenizer: Any,
    user: str | None = None,
    system: str | None = None,
    prefill: str | None = None,
    chat_template: bool = True,
    messages: list[dict] | None = None,
) -> str:
    """Render ``system``/``user`` (or full ``messages``) plus an optional assistant ``prefill``."""
    if messages is None:
        if user is None:
            raise ValueError("render_prompt needs `user` or `messages`")
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    elif system:
        messages = [{"role": "system", "content": system}] + [m for m in messages if m.get("role") != "system"]
    _check_messages(messages)
    if chat_template and has_chat_template(tokenizer):
        text = apply_template(tokenizer, messages)
        return text + (prefill or "")
    parts = [m["content"] for m in messages if m["role"] == "system"]
    parts += [m["content"] for m in messages if m["role"] != "system"]
    text = "\n\n".join(parts)
    if prefill:
        text += "\n" + prefill
    return text


def apply_template(tokenizer: Any, messages: list[dict], **kwargs: Any) -> str:
    """``messages`` through the tokenizer's chat template, as text (``add_generation_prompt=True`` unless
    ``kwargs`` say otherwise). A template that rejects a ``system`` role gets the system text folded into
    the first user turn (:func:`fold_system`) and is applied again. A template that fails to render, or that
    transformers' sandbox refuses (attribute access to Python internals, a huge ``range``), is a
    :class:`ChatTemplateError` naming the model and the template's error: one line, before anything is scored.

    >>> class Hostile:
    ...     name_or_path = "m"
    ...     def apply_chat_template(self, messages, **kw):
    ...         raise OverflowError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).")
    >>> try:
    ...     apply_template(Hostile(), [{"role": "user", "content": "Hi"}])
    ... except ChatTemplateError as exc:
    ...     str(exc).split(":")[0]
    "model 'm'"
    """
    kw = {"tokenize": False, "add_generation_prompt": True, **kwargs}
    try:
        return tokenizer.apply_chat_template(messages, **kw)
    except Exception as exc:  # jinja raises TemplateError for "System role not supported"
        if not any(m["role"] == "system" for m in messages) or "system" not in str(exc).lower():
            raise ChatTemplateError.of(tokenizer, exc) from None
    try:
        return tokenizer.apply_chat_template(fold_system(messages), **kw)
    except Exception as exc:
        raise ChatTemplateError.of(tokenizer, exc) from None


class ChatTemplateError(ProbeError):
    """A model's chat template that cannot render a prompt: what the template raised, with the model named."""

    @classmethod
    def of(cls, tokenizer: Any, exc: BaseException) -> "ChatTemplateError":
        name = getattr(tokenizer, "name_or_path", None) or "(unnamed)"
        what = " ".join(str(exc).split())[:300] or "no message"
        return cls(f"model {str(name)!r}: its chat template cannot render a prompt ({type(exc).__name__}: {what}); "
                   "nothing was scored. Fix the template (tokenizer_config.json or chat_template.jinja in the model "
                   "folder), or score plain text with --no-chat-template")


def fold_system(messages: list[dict]) -> list[dict]:
    """Merge system messages into the first user turn, for templates without a system role."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if system and rest and rest[0]["role"] == "user":
        rest[0]["content"] = system + "\n\n" + rest[0]["content"]
    elif system:
        rest.insert(0, {"role": "user", "content": system})
    return rest


def _check_messages(messages: list[dict]) -> None:
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            raise ValueError(f"messages[{i}]: needs a 'role' of system, user or assistant")
        if not isinstance(m.get("content"), str):
            raise ValueError(f"messages[{i}]: 'content' must be a string")
