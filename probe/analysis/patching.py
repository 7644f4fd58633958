"""Activation patching between paired prompts (explicit <-> implicit, group A <-> group B), through the scorer.

For a *target* request and a *source* request (its pair), the source's
activation at a hook and position replaces the target's at the aligned
position, and the change in the target's label log-probabilities (full
vocabulary, the scorer's own label variants) is measured:

    effect[layer, position, label] = log P_patched(label) - log P_clean(label)

Both the source's activations and every patched score come from
:meth:`probe.scoring.Scorer.score` with ``capture=``: the source is captured in
its scoring pass, and the target is re-scored with the vector written into the
pass (:class:`probe.activations.CaptureSpec` ``edits``), so patching runs the
one forward path the runs use (prefix sharing, padding, the TransformerLens
bridge). Positions are aligned by name, so prompts of different lengths can
be paired: ``last`` (last prompt token) and ``span:FIELD`` (last token of the
request's ``meta[FIELD]`` span) pick one token in each prompt; ``mean`` spans
do not name a single token and are rejected.

Patching a request with its own activations changes nothing (tested).

>>> eff = patch_effects(lm, target, source, label="A", positions=["last"])  # doctest: +SKIP
>>> eff.shape    # (n_layers, n_positions)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from tqdm import tqdm

from probe.activations.hooks import HOOK_KINDS
from probe.activations.positions import parse_positions
from probe.activations.scoring_capture import CaptureSpec, layer_count
from probe.scoring import Scorer


def patch_logprobs(lm: Any, target: Any, source: Any, positions: Sequence[str] = ("last",),
                   hook: str = "resid_post", layers: Sequence[int] | None = None,
                   scorer: Any = None, **spans: Any) -> np.ndarray:
    """``[n_layers, n_positions, n_labels]`` change in every label's ``log P`` on ``target`` (a
    :class:`~probe.scoring.requests.LabelRequest`) when ``blocks.{l}.hook_{hook}`` at a position is replaced
    by ``source``'s. ``lm``: anything with ``.model`` and ``.tokenizer``; ``scorer``: a
    :class:`~probe.scoring.Scorer` to reuse (default: a new one; capture never reads a score cache).
    ``spans``: ``fields`` / ``search_from`` as :class:`probe.activations.CaptureSpec` takes them (default:
    span text from each request's ``meta``)."""

    if hook not in HOOK_KINDS:
        raise ValueError(f"hook must be one of {HOOK_KINDS}, got {hook!r}")
    specs = parse_positions(list(positions))
    for s in specs:
        if s.kind not in ("last", "span"):
            raise ValueError(f"patching needs single-token positions (last, span:FIELD), got {s.name!r}")
    for r in (target, source):
        if getattr(r, "kind", None) != "label":
            raise ValueError(f"patching reads label scores; request {getattr(r, 'id', r)!r} is not a label request")
    total = layer_count(lm.model)
    layers = list(range(total)) if layers is None else [int(i) % total for i in layers]
    names = tuple(f"blocks.{i}.hook_{hook}" for i in layers)
    scorer = scorer or Scorer(lm, batch_size=1)
    spec = CaptureSpec(names, specs, **spans)
    for r in (target, source):
        missing = spec.target(scorer, scorer.encode(r)).missing
        if missing:
            raise ValueError(f"request {r.id!r} lacks the span(s) {missing}")
    (src,) = scorer.score([source], capture=spec)
    (clean,) = scorer.score([target], capture=CaptureSpec(names[:1], specs, **spans))
    base = np.asarray(clean.logprobs, dtype=np.float64)
    out = np.zeros((len(names), len(specs), len(base)), np.float32)
    for j, pos in enumerate(specs):
        for row, name in enumerate(names):
            key = f"{name}@{pos.name}"
            edit = CaptureSpec((name,), (pos,), edits={key: src.activations[key]}, **spans)
            (patched,) = scorer.score([target], capture=edit)
            out[row, j] = np.asarray(patched.logprobs, dtype=np.float64) - base
    return out


def patch_effects(lm: Any, target: Any, source: Any, label: str, positions: Sequence[str] = ("last",),
                  hook: str = "resid_post", layers: Sequence[int] | None = None) -> np.ndarray:
    """``[n_layers, n_positions]`` change in ``log P(label)`` on ``target`` when patched from ``source``
    (:func:`patch_logprobs` at one label)."""
    if label not in tuple(target.labels):
        raise ValueError(f"request {target.id!r}: label {label!r} is not one of its labels {tuple(target.labels)}")
    return patch_logprobs(lm, target, source, positions, hook, layers)[:, :, list(target.labels).index(label)]


def patch_pairs(lm: Any, pairs: Sequence[tuple[Any, Any, str]], positions: Sequence[str] = ("last",),
                hook: str = "resid_post", progress: bool = False) -> np.ndarray:
    """:func:`patch_effects` for ``(target, source, label)`` pairs: ``[n_pairs, n_layers, n_positions]``."""

    res = [patch_effects(lm, t, s, lab, positions, hook)
           for t, s, lab in tqdm(pairs, disable=not progress, desc="patching")]
    return np.stack(res) if res else np.zeros((0, 0, len(positions)), np.float32)
