"""One batched forward pass per batch gives both the label log-probs and the activations.

Items are tokenized with the scorer's own joining rules
(:class:`probe.scoring.tokens.Encoder`), so the label log-probs recorded here
are the numbers ``probe score`` reports for the same prompt. Batches are
length-sorted and padded (left by default) with an attention mask and explicit
``position_ids``; positions are shifted by each row's padding offset, so the
kept rows do not depend on the padding side or the batch composition.

>>> # doctest: +SKIP
>>> with ActivationWriter(out, manifest) as w:
...     extract(model, tokenizer, items, ["blocks.3.hook_resid_post"], parse_positions("last"), w)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol, Sequence

import numpy as np
import torch

from probe.activations.hooks import capture, discover
from probe.activations.items import ActivationItem
from probe.activations.positions import PositionSpec, locate, padded_positions_fn, span_tokens
from probe.errors import InputError
from probe.scoring.requests import LabelRequest
from probe.scoring.tokens import Encoder, wants_special_tokens


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
    """Tokenize one item and resolve its positions (raises ``ValueError`` naming the field)."""
    tok = encoder.tokenizer
    special = wants_special_tokens(tok, item.prompt)
    variants: tuple[tuple[int, ...], ...] = ()
    if item.labels:
        enc = encoder.encode(LabelRequest(id=item.id, prompt=item.prompt, labels=item.labels))
        prompt_ids, variants = enc.sequences[0].ids, enc.label_variants
    else:
        prompt_ids = encoder.join(item.prompt, "x", "auto", special)[0]
    text = item.prompt.rstrip(" ") or item.prompt  # the scorer moves trailing spaces to the label
    enc_off = tok(text, add_special_tokens=special, return_offsets_mapping=True)
    if tuple(enc_off["input_ids"]) != tuple(prompt_ids):
        raise ValueError(f"item {item.id!r}: prompt tokenizes differently with offsets; cannot map spans")
    offsets = enc_off["offset_mapping"]
    ids = tuple(prompt_ids)
    n = len(ids)
    positions: dict[str, list[int]] = {}
    for spec in specs:
        if spec.kind == "last":
            positions[spec.name] = [n - 1]
        elif spec.kind == "label":
            if item.answer_label is None:
                raise ValueError("field 'answer_label' is needed for the 'label' position")
            cont = encoder.join(item.prompt, item.answer_label, "auto", special)[1]
            ids = tuple(prompt_ids) + (cont[0],)
            positions[spec.name] = [n]
        else:
            value = item.fields.get(spec.field) if spec.field else None
            where = locate(text, value, item.user_start) if value not in (None, "") else None
            toks = span_tokens(offsets, *where) if where else []
            if value not in (None, "") and not toks:
                raise ValueError(f"field {spec.field!r}: {value!r} is not in the prompt")
            positions[spec.name] = toks[-1:] if spec.kind == "span" else toks
    return EncodedItem(item, ids, n, variants, positions)


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


def label_record(e: EncodedItem, logits_last: torch.Tensor) -> dict[str, Any]:
    """Label log-probs read from one row of last-token logits (the scorer's definition:
    a label's probability is the sum over its first-token variants)."""
    rec: dict[str, Any] = {"id": e.item.id, "n_tokens": e.n_prompt}
    if e.label_variants:
        logp = torch.log_softmax(logits_last.float(), dim=-1)
        lps = [float(torch.logsumexp(logp[list(v)], 0)) for v in e.label_variants]
        finite = all(math.isfinite(x) for x in lps)
        m = max(lps)
        exps = [math.exp(x - m) for x in lps] if finite else [math.nan] * len(lps)
        probs = [x / sum(exps) for x in exps]
        rec.update(labels=list(e.item.labels), label_logprobs=lps, label_probs=probs,
                   label_mass=float(sum(math.exp(x) for x in lps)),
                   pred_index=int(np.argmax(probs)) if finite else None)
    missing = [n for n, p in e.positions.items() if not p]
    if missing:
        rec["missing_positions"] = missing
    rec["meta"] = dict(e.item.fields)
    return rec


def extract(backend: Backend, tokenizer: Any, items: Iterable[ActivationItem], hook_names: Sequence[str],
            specs: Sequence[PositionSpec], writer: Any, batch_size: int = 8, padding_side: str = "left",
            progress: bool = False, source: str = "items") -> int:
    """Run ``items`` not yet in ``writer.done`` and add their records and rows; returns items run.

    Items are length-sorted (longest first, ties by id) so padding is small and
    the order is deterministic.
    """
    encoder = Encoder(tokenizer)
    todo: list[EncodedItem] = []
    for line, item in enumerate(items, start=1):
        if item.id in writer.done:
            continue
        try:
            todo.append(encode_item(encoder, item, specs))
        except ValueError as exc:
            msg = str(exc)
            raise InputError(source, line, msg.split("'")[1] if msg.startswith("field '") else None, msg) from exc
    todo.sort(key=lambda e: (-len(e.ids), e.item.id))
    pad = pad_id(tokenizer)
    device = next(backend.model.parameters()).device if hasattr(backend, "model") else "cpu"
    names = [s.name for s in specs]
    bar = _progress(len(todo), progress)
    for start in range(0, len(todo), batch_size):
        chunk = todo[start:start + batch_size]
        batch = collate(chunk, pad, padding_side, device)
        logits, acts = backend.run(batch, hook_names, names)
        for key, arr in acts.items():  # a missing span is stored as NaN rows, counted in the table
            pos = key.split("@", 1)[1]
            bad = [r for r, e in enumerate(chunk) if not e.positions[pos]]
            if bad:
                arr[bad] = np.nan
        writer.add([label_record(e, logits[r]) for r, e in enumerate(chunk)], acts)
        bar.update(len(chunk))
    bar.close()
    return len(todo)


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, disable=not enabled, unit="item", desc="activations")


def score_items(backend: Backend, tokenizer: Any, items: Sequence[ActivationItem], batch_size: int = 8,
                progress: bool = False) -> list[dict[str, Any]]:
    """Label log-probs only (no activations kept), in the order of ``items``.

    The same records :func:`extract` writes; handy for re-scoring under
    :func:`probe.analysis.steering.steer`.
    """
    encoder = Encoder(tokenizer)
    encoded = sorted((encode_item(encoder, it, ()) for it in items), key=lambda e: (-len(e.ids), e.item.id))
    pad = pad_id(tokenizer)
    device = next(backend.model.parameters()).device if hasattr(backend, "model") else "cpu"
    by_id: dict[str, dict[str, Any]] = {}
    bar = _progress(len(encoded), progress)
    for start in range(0, len(encoded), batch_size):
        chunk = encoded[start:start + batch_size]
        logits, _ = backend.run(collate(chunk, pad, "left", device), [], [])
        for r, e in enumerate(chunk):
            by_id[e.item.id] = label_record(e, logits[r])
        bar.update(len(chunk))
    bar.close()
    return [by_id[it.id] for it in items]
