"""Logit lens: read the option labels off the residual stream after every layer.

Each layer's ``hook_resid_post`` at the last prompt token goes through the
model's own final norm and unembedding; the log-probability of each label
(full-vocabulary softmax, label variants summed as the scorer does) shows at
which depth the answer forms. At the last layer the lens *is* the model's
output (tested), for models whose logits are ``lm_head(norm(h))`` (Gemma's
final logit soft-capping is not applied here). The residuals are read in the
scoring passes (:meth:`probe.scoring.Scorer.score` with ``capture=``), the one
forward path every run uses; pass a Runner's scorer (``scorer=runner.scorer``)
to read them with the run's own batching.

>>> lens = logit_lens(lm, requests)   # label requests; .logprobs: [n_requests, n_layers, n_labels]  # doctest: +SKIP
>>> lens.probs[:, -1]          # softmax over the labels at the last layer  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from probe.activations.hooks import ModelLayout, discover, hook_names
from probe.activations.scoring_capture import CaptureSpec
from probe.scoring import Scorer


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


def logit_lens(lm: Any, requests: Sequence[Any], batch_size: int | str = 8, scorer: Any = None) -> LensResult:
    """The lens for every layer on label requests (:class:`~probe.scoring.requests.LabelRequest`) that share
    one label set. ``lm``: anything with ``.model`` and ``.tokenizer``; ``scorer``: the
    :class:`~probe.scoring.Scorer` to read through (a Runner's, ``runner.scorer``; default: a new one with
    ``batch_size``, the same engine without a run's cache, which capture never reads)."""

    if not requests:
        raise ValueError("logit_lens needs at least one request")
    if any(getattr(r, "kind", None) != "label" for r in requests):
        raise ValueError("logit_lens reads the labels at the next token: it needs label requests")
    labels = tuple(requests[0].labels)
    if not labels or any(tuple(r.labels) != labels for r in requests):
        raise ValueError("logit_lens needs requests with the same non-empty labels")
    layout = discover(lm.model)
    names = hook_names(layout, "all", ["resid_post"])
    scorer = scorer or Scorer(lm, batch_size=batch_size)
    results = scorer.score(list(requests), capture=CaptureSpec(tuple(names), "last"))
    out = np.empty((len(requests), layout.n_layers, len(labels)), np.float32)
    for i, (r, res) in enumerate(zip(requests, results)):
        stack = torch.from_numpy(np.stack([res.activations[f"{n}@last"] for n in names]))  # [L, d]
        out[i] = lens_logprobs(layout, stack, scorer.encode(r).label_variants).cpu().numpy()
    return LensResult([r.id for r in requests], labels, out)
