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
from typing import Literal, Sequence

import torch

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
