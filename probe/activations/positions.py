"""Which token positions to keep: ``last``, ``label``, ``span:FIELD``, ``mean:FIELD``.

* ``last``        the last prompt token: the position whose next-token
                  distribution gives the option-label log-probabilities.
* ``label``       the answer-label token itself: the item's ``answer_label``
                  (e.g. the option the model chose in ``probe score``) is
                  appended after the prompt, with the scorer's space rule, and
                  its first token is read. Causal attention means every prompt
                  position (and the label log-probs at ``last``) is unchanged by
                  the appended token, so one forward pass still serves both.
* ``span:FIELD``  the last token of a character span (the cue sentence, the
                  descriptor): ``item[FIELD]`` is a substring of the user text
                  (first occurrence) or ``[start, end]`` character offsets into
                  it. The last token is where a causal model has read the whole
                  span.
* ``mean:FIELD``  the mean over all tokens of that span.

:func:`resolve` is the one place these are turned into token indices, for
every caller (the scorer's capture, patching, the logit lens): the request is
tokenized by the scorer's own rules, so the indices point into the very rows
the scorer runs.

Token indices here are into the *unpadded* sequence; :func:`padded_positions_fn`
shifts them by each row's padding offset, so results are the same under left
and right padding.

>>> [p.name for p in parse_positions("last,label,span:cue,mean:cue")]
['last', 'label', 'span:cue', 'mean:cue']
>>> span_tokens([(0, 0), (0, 3), (3, 9), (9, 10)], 4, 9)
[2]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

import torch

from probe.scoring.capture import CaptureTarget
from probe.scoring.requests import ContinuationRequest, LabelRequest, PerplexityRequest
from probe.scoring.tokens import wants_special_tokens

PositionKind = Literal["last", "label", "span", "mean"]


@dataclass(frozen=True)
class PositionSpec:
    """One position selector; ``field`` names the item field for span/mean."""

    kind: PositionKind
    field: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("last", "label", "span", "mean"):
            raise ValueError(f"unknown position kind {self.kind!r}; use last, label, span:FIELD or mean:FIELD")
        if (self.kind in ("span", "mean")) != bool(self.field):
            raise ValueError(f"position {self.kind!r} {'needs' if self.kind in ('span', 'mean') else 'takes no'} "
                             "a field (write span:FIELD / mean:FIELD)")

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.field}" if self.field else self.kind


def parse_positions(text: str | Sequence[str]) -> tuple[PositionSpec, ...]:
    """Parse ``"last,span:cue"`` (or a list of such strings) into specs, duplicates removed."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    out: list[PositionSpec] = []
    for raw in parts:
        raw = raw.strip()
        if not raw:
            continue
        kind, _, fld = raw.partition(":")
        spec = PositionSpec(kind, fld or None)  # type: ignore[arg-type]
        if spec not in out:
            out.append(spec)
    if not out:
        raise ValueError("no positions given")
    return tuple(out)


def span_tokens(offsets: Sequence[tuple[int, int]], start: int, end: int) -> list[int]:
    """Indices of tokens whose character range overlaps ``[start, end)``.

    Zero-width entries (special tokens report ``(0, 0)``) never match. Returns
    ``[]`` when nothing overlaps; the caller turns that into an input error.
    """
    if end <= start:
        return []
    return [i for i, (s, e) in enumerate(offsets) if e > s and s < end and e > start]


def locate(text: str, value: object, base: int = 0) -> tuple[int, int] | None:
    """Character span of ``value`` in ``text``: a substring searched from ``base``, or
    ``[start, end]`` offsets relative to ``base``. ``None`` when it is not there."""
    if isinstance(value, str):
        if not value:
            return None
        i = text.find(value, base)
        return None if i < 0 else (i, i + len(value))
    if (isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value)
            and 0 <= value[0] < value[1]):
        s, e = base + value[0], base + value[1]
        return (s, e) if e <= len(text) else None
    return None


def padded_positions_fn(index: dict[str, list[list[int]]], offsets: Sequence[int]):
    """A :data:`probe.activations.hooks.PositionsFn` for one padded batch.

    ``index[name][row]`` lists unpadded token indices (one for last/label/span,
    several for mean); ``offsets[row]`` is the number of pad tokens before the
    row's first real token (0 under right padding).
    """
    single: dict[str, torch.Tensor] = {}
    weights: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name, rows in index.items():
        if all(len(r) == 1 for r in rows):
            single[name] = torch.tensor([r[0] + o for r, o in zip(rows, offsets)], dtype=torch.long)
        else:
            flat_rows = torch.tensor([b for b, r in enumerate(rows) for _ in r], dtype=torch.long)
            flat_cols = torch.tensor([t + offsets[b] for b, r in enumerate(rows) for t in r], dtype=torch.long)
            weights[name] = (flat_rows, flat_cols)
    counts = {name: torch.tensor([len(r) for r in index[name]], dtype=torch.float32) for name in weights}

    def fn(h: torch.Tensor) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        rows = torch.arange(h.shape[0], device=h.device)
        for name, cols in single.items():
            out[name] = h[rows, cols.to(h.device)]
        for name, (r, c) in weights.items():
            # Mean in float32 whatever the model dtype; index_add keeps it exact per row.
            acc = torch.zeros(h.shape[0], h.shape[-1], dtype=torch.float32, device=h.device)
            acc.index_add_(0, r.to(h.device), h[r.to(h.device), c.to(h.device)].float())
            out[name] = acc / counts[name].to(h.device)[:, None]
        return out

    return fn


def resolve(encoder: Any, encoded: Any, positions: Sequence[PositionSpec], *,
            fields: Mapping[str, Any] | None = None, answer_label: str | None = None,
            search_from: int = 0) -> CaptureTarget:
    """Token indices of ``positions`` in an encoded label, continuation or perplexity request
    (a perplexity request: ``last`` only, the text's last token).

    ``encoder``: the scorer's :class:`probe.scoring.tokens.Encoder` (its tokenizer
    maps spans); ``encoded``: the request as the scorer encoded it. Span values
    come from ``fields`` (default: the request's ``meta``), searched in the prompt
    from character ``search_from``. ``answer_label``: the label or option the
    ``label`` position reads. Raises ``ValueError`` naming the request and field.
    """
    request = encoded.request
    if isinstance(request, PerplexityRequest):
        return _perplexity_target(encoded, positions)
    if not isinstance(request, (LabelRequest, ContinuationRequest)):
        raise ValueError(f"request {request.id!r}: activations are captured for label and continuation "
                         f"requests only, not {type(request).__name__}")
    fields = request.meta if fields is None else fields
    n = encoded.n_prompt_tokens
    row = encoded.sequences[0].ids
    extra = False
    out: dict[str, list[int]] = {}
    offsets: tuple[str, list[tuple[int, int]]] | None = None
    for p in positions:
        if p.kind == "last":
            out[p.name] = [n - 1]
        elif p.kind == "label":
            row, out[p.name], capture_only = _label_row(encoded, answer_label)
            extra = extra or capture_only
        else:
            value = fields.get(p.field) if fields else None
            if value in (None, ""):
                out[p.name] = []
                continue
            if offsets is None:
                offsets = _prompt_offsets(encoder.tokenizer, request, row[:n])
            text, offs = offsets
            where = locate(text, value, search_from)
            toks = span_tokens(offs, *where) if where else []
            if not toks:
                raise ValueError(f"request {request.id!r}: field {p.field!r}: {value!r} is not in the prompt")
            out[p.name] = toks[-1:] if p.kind == "span" else toks
    return CaptureTarget(tuple(row), out, extra)


def _perplexity_target(encoded: Any, positions: Sequence[PositionSpec]) -> CaptureTarget:
    """A text scored for its perplexity (HBB-SG, CrowS-Pairs (b)): "last" is its last token, read in a
    capture-only row over the whole sequence (the scored row need not feed its final token)."""
    other = [p.name for p in positions if p.kind != "last"]
    if other:
        raise ValueError(f"request {encoded.request.id!r}: a perplexity request is captured at 'last' (its text's "
                         f"last token) only, not {other}")
    row = tuple(encoded.sequences[0].ids)
    return CaptureTarget(row, {p.name: [len(row) - 1] for p in positions}, True)


def _label_row(encoded: Any, answer_label: str | None) -> tuple[tuple[int, ...], list[int], bool]:
    """The ``label`` position of a label or continuation request: the row it is read in, its index there, and
    whether that row is a capture-only one (a label request's)."""
    request = encoded.request
    if answer_label is None:
        raise ValueError(f"request {request.id!r}: field 'answer_label' is needed for the 'label' position")
    choices = request.labels if isinstance(request, LabelRequest) else request.options
    if answer_label not in choices:
        raise ValueError(f"request {request.id!r}: field 'answer_label' {answer_label!r} "
                         f"is not one of {list(choices)}")
    k = choices.index(answer_label)
    if isinstance(request, LabelRequest):
        # the label's first scored token appended to the prompt: a capture-only row, whose
        # prompt part the tree shares with the scored row (causal: the scores are unchanged)
        # (the row may extend past the prompt by a whitespace token all labels share: tokens.py rule 4)
        row = encoded.sequences[0].ids + (encoded.label_variants[k][0],)
        return row, [len(row) - 1], True
    # that option's row: its token n is the option's first token
    return encoded.sequences[k].ids, [encoded.n_prompt_tokens], False


def _prompt_offsets(tok: Any, r: Any, prompt_ids: tuple[int, ...]) -> tuple[str, list[tuple[int, int]]]:
    special = wants_special_tokens(tok, r.prompt) if r.add_special_tokens is None else r.add_special_tokens
    forms = bool(getattr(r, "forms", ()))
    text = r.prompt if forms else (r.prompt.rstrip(" ") or r.prompt)  # the scorer moves trailing spaces to the label
    enc = tok(text, add_special_tokens=special, return_offsets_mapping=True)
    if tuple(enc["input_ids"]) != tuple(prompt_ids):
        raise ValueError(f"request {r.id!r}: prompt tokenizes differently with offsets; cannot map spans")
    return text, [tuple(o) for o in enc["offset_mapping"]]
