"""One padded forward over a few items, for the analyses that edit a forward pass (patching, logit lens).

Activations and scores of a run come from the scorer's own passes
(``Scorer.score(capture=...)``, :mod:`probe.activations.scoring_capture`); this
module only gives the analysis layer a plain batch to run under
:func:`probe.activations.hooks.intervene` and the TransformerLens bridge
(:mod:`probe.activations.tl_backend`). Items are tokenized by the scorer's rules
and their positions resolved by :func:`probe.activations.positions.resolve`, the
same code the scorer's capture uses. Positions are shifted by each row's padding
offset, so the kept rows do not depend on the padding side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol, Sequence

import numpy as np
import torch

from probe.activations.hooks import capture, discover
from probe.activations.items import ActivationItem
from probe.activations.positions import PositionSpec, padded_positions_fn, resolve
from probe.scoring.tokens import Encoder


@dataclass(frozen=True)
class EncodedItem:
    """Token ids to run and where to read: ``positions[name]`` are unpadded indices
    (``[]`` when the item lacks that span: its rows are stored as NaN)."""

    item: ActivationItem
    ids: tuple[int, ...]
    n_prompt: int
    label_variants: tuple[tuple[int, ...], ...] = ()
    positions: dict[str, list[int]] = field(default_factory=dict, hash=False)


def encode_item(encoder: Encoder, item: ActivationItem, specs: Sequence[PositionSpec]) -> EncodedItem:
    """Tokenize one item as the scorer does and resolve its positions (raises ``ValueError`` naming the field)."""
    from probe.activations.record import item_request

    enc = encoder.encode(item_request(item))
    target = resolve(encoder, enc, specs, fields=item.fields, answer_label=item.answer_label,
                     search_from=item.user_start)
    n = enc.n_prompt_tokens
    # the prompt, plus the label token when the 'label' position asks for it (causal: nothing before it changes)
    label = [target.positions[s.name][0] for s in specs if s.kind == "label"]
    ids = target.row[: label[0] + 1] if label else target.row[:n]
    return EncodedItem(item, tuple(ids), n, enc.label_variants if item.labels else (), dict(target.positions))


@dataclass(frozen=True)
class Batch:
    """A padded batch; ``offsets[row]`` = pad tokens before the row's first real token."""

    items: list[EncodedItem]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    offsets: list[int]

    @property
    def last_index(self) -> torch.Tensor:
        """Padded index of each row's last prompt token (where the labels are read)."""
        return torch.tensor([o + e.n_prompt - 1 for o, e in zip(self.offsets, self.items)], dtype=torch.long)

    def positions_fn(self, names: Iterable[str]):
        """Gather function for :func:`probe.activations.hooks.capture` (missing spans read the last token)."""
        index = {n: [e.positions[n] or [e.n_prompt - 1] for e in self.items] for n in names}
        return padded_positions_fn(index, self.offsets)


def pad_id(tokenizer: Any) -> int:
    """The id used for padding: the pad token, else EOS (padded positions are masked anyway)."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def collate(encoded: Sequence[EncodedItem], pad: int, padding_side: str = "left",
            device: str | torch.device = "cpu") -> Batch:
    """Pad to the longest row; position ids count real tokens only (0 for padding)."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    width = max(len(e.ids) for e in encoded)
    ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    mask = torch.zeros((len(encoded), width), dtype=torch.long)
    offsets = []
    for r, e in enumerate(encoded):
        off = width - len(e.ids) if padding_side == "left" else 0
        ids[r, off:off + len(e.ids)] = torch.tensor(e.ids)
        mask[r, off:off + len(e.ids)] = 1
        offsets.append(off)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return Batch(list(encoded), ids.to(device), mask.to(device), pos.to(device), offsets)


class Backend(Protocol):
    def run(self, batch: Batch, hook_names: Sequence[str], positions: Sequence[str]
            ) -> tuple[torch.Tensor, dict[str, np.ndarray]]:
        """Return (float32 logits at each row's last prompt token ``[B, vocab]``, ``{hook@pos: [B, d]}``)."""
        ...


class HFBackend:
    """Plain torch forward hooks on the Hugging Face model (works for any causal LM)."""

    name = "hf"

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.layout = discover(model)

    @torch.no_grad()
    def run(self, batch: Batch, hook_names: Sequence[str], positions: Sequence[str]):
        last = batch.last_index.to(batch.input_ids.device)
        # Only the logits at the last prompt token are needed: keep the tail, not [B, T, vocab].
        keep = int((batch.input_ids.shape[1] - last).max())
        with capture(self.model, hook_names, batch.positions_fn(positions), self.layout) as cap:
            try:
                out = self.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                 position_ids=batch.position_ids, use_cache=False, logits_to_keep=keep)
                start = batch.input_ids.shape[1] - out.logits.shape[1]
            except TypeError:  # models without logits_to_keep
                out = self.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                 position_ids=batch.position_ids, use_cache=False)
                start = 0
        rows = torch.arange(len(batch.items), device=last.device)
        return out.logits[rows, last - start].float(), cap.pop()
