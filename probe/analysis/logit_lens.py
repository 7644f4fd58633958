"""Logit lens: read the option labels off the residual stream after every layer.

Each layer's ``hook_resid_post`` at the last prompt token goes through the
model's own final norm and unembedding; the log-probability of each label
(full-vocabulary softmax, label variants summed as the scorer does) shows at
which depth the answer forms. At the last layer the lens *is* the model's
output (tested), for models whose logits are ``lm_head(norm(h))`` (Gemma's
final logit soft-capping is not applied here).

>>> lens = logit_lens(lm.model, lm.tokenizer, items)   # [n_items, n_layers, n_labels]  # doctest: +SKIP
>>> lens.probs[:, -1]          # softmax over the labels at the last layer  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from probe.activations.extract import HFBackend, collate, encode_item, pad_id
from probe.activations.hooks import ModelLayout, hook_names
from probe.activations.items import ActivationItem
from probe.activations.positions import parse_positions
from probe.scoring.tokens import Encoder


@torch.no_grad()
def lens_logprobs(layout: ModelLayout, resid: torch.Tensor,
                  label_variants: Sequence[Sequence[int]] | None = None) -> torch.Tensor:
    """``log_softmax(lm_head(final_norm(resid)))`` in float32, optionally gathered at labels.

    ``resid``: ``[..., d_model]``. With ``label_variants`` (one tuple of token
    ids per label) returns ``[..., n_labels]`` (log of the summed variant
    probabilities), else ``[..., vocab]``.
    """
    param = next(layout.lm_head.parameters())
    h = resid.to(param.device, param.dtype)
    if layout.final_norm is not None:
        h = layout.final_norm(h)
    logp = torch.log_softmax(layout.lm_head(h).float(), dim=-1)
    if label_variants is None:
        return logp
    return torch.stack([torch.logsumexp(logp[..., list(v)], dim=-1) for v in label_variants], dim=-1)


@dataclass(frozen=True)
class LensResult:
    """``logprobs[i, layer, label]`` (full-vocabulary log-probs) and the label softmax ``probs``."""

    ids: list[str]
    labels: tuple[str, ...]
    logprobs: np.ndarray

    @property
    def probs(self) -> np.ndarray:
        x = self.logprobs - self.logprobs.max(axis=-1, keepdims=True)
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)

    @property
    def label_mass(self) -> np.ndarray:
        return np.exp(self.logprobs).sum(axis=-1)


def logit_lens(model: torch.nn.Module, tokenizer: Any, items: Sequence[ActivationItem],
               batch_size: int = 8) -> LensResult:
    """The lens for every layer on items that share one label set."""
    if not items:
        raise ValueError("logit_lens needs at least one item")
    labels = items[0].labels
    if not labels or any(it.labels != labels for it in items):
        raise ValueError("logit_lens needs items with the same non-empty labels")
    backend = HFBackend(model)
    layout = backend.layout
    names = hook_names(layout, "all", ["resid_post"])
    enc = Encoder(tokenizer)
    encoded = [encode_item(enc, it, parse_positions("last")) for it in items]
    pad = pad_id(tokenizer)
    device = next(model.parameters()).device
    out = np.empty((len(items), layout.n_layers, len(labels)), np.float32)
    for s in range(0, len(encoded), batch_size):
        chunk = encoded[s:s + batch_size]
        _, acts = backend.run(collate(chunk, pad, "left", device), names, ["last"])
        stack = torch.from_numpy(np.stack([acts[f"{n}@last"] for n in names], axis=1))  # [b, L, d]
        out[s:s + len(chunk)] = lens_logprobs(layout, stack, chunk[0].label_variants).cpu().numpy()
    return LensResult([it.id for it in items], labels, out)

