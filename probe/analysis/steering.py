"""Steering: add a direction to one layer's residual stream and re-score.

:func:`steer` is a context manager: every forward pass of the model inside it
(any :class:`~probe.scoring.Scorer`, a Runner's re-score, generation) sees
``alpha * vector`` added to ``blocks.{layer}.hook_resid_post`` at every
position. Directions come from a probe (:meth:`probe.analysis.probes.LinearProbe.direction`)
or from :func:`mean_difference`; :func:`steering_table` re-scores a benchmark
for several strengths and reports the bias score and accuracy beside the
unsteered run.

>>> with steer(model, layer=12, vector=direction, alpha=4.0):  # doctest: +SKIP
...     results = Scorer(lm).score(requests)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import torch

from probe.activations.hooks import HOOK_KINDS, discover, intervene


@contextlib.contextmanager
def steer(model: torch.nn.Module, layer: int, vector: np.ndarray | torch.Tensor, alpha: float = 1.0,
          hook: str = "resid_post") -> Iterator[None]:
    """Add ``alpha * vector`` to ``blocks.{layer}.hook_{hook}`` at all positions while the block runs.

    ``layer`` may be negative (counted from the end). ``alpha = 0`` leaves the
    model exactly unchanged (the hook adds a zero vector).
    """
    if hook not in HOOK_KINDS:
        raise ValueError(f"hook must be one of {HOOK_KINDS}, got {hook!r}")

    layout = discover(model)
    if not -layout.n_layers <= layer < layout.n_layers:
        raise ValueError(f"layer {layer} is out of range for a model with {layout.n_layers} layers")
    layer %= layout.n_layers
    v = torch.as_tensor(np.asarray(vector, dtype=np.float32))
    if v.shape != (layout.d_model,):
        raise ValueError(f"steering vector has shape {tuple(v.shape)}, expected ({layout.d_model},)")
    add = alpha * v

    def edit(h: torch.Tensor) -> torch.Tensor:
        return h + add.to(h.device, h.dtype)

    with intervene(model, {f"blocks.{layer}.hook_{hook}": edit}, layout):
        yield


def mean_difference(X: np.ndarray, y: Sequence[Any], positive: Any, normalize: bool = True) -> np.ndarray:
    """``mean(X[y == positive]) - mean(X[y != positive])`` (rows with NaN ignored), unit length by default."""
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y)
    ok = np.all(np.isfinite(X), axis=1)
    pos, neg = ok & (y == positive), ok & (y != positive)
    if not pos.any() or not neg.any():
        raise ValueError(f"mean_difference needs rows with and without label {positive!r}")
    d = X[pos].mean(axis=0) - X[neg].mean(axis=0)
    if normalize:
        norm = np.linalg.norm(d)
        if norm == 0:
            raise ValueError("the two class means coincide: no direction")
        d = d / norm
    return d


def steering_table(model: torch.nn.Module, layer: int, vector: np.ndarray, alphas: Sequence[float],
                   rescore: Callable[[], Mapping[str, float]],
                   baseline: Mapping[str, float] | None = None) -> list[dict[str, float]]:
    """Re-score under each ``alpha`` (0 = baseline): ``rescore()`` returns metrics such as
    ``{"bias_amb": .., "acc_amb": ..}``; each row also has the change from ``alpha = 0``.

    ``baseline``: the unsteered metrics when already known (skips re-scoring at alpha 0).
    """
    rows = []
    base = dict(baseline) if baseline is not None else None
    for a in sorted(set([0.0, *alphas]), key=lambda x: (x != 0, x)):
        if a == 0.0 and base is not None:
            m = base
        else:
            with steer(model, layer, vector, a):
                m = dict(rescore())
        if a == 0.0:
            base = m
        row = {"layer": layer, "alpha": a, **m}
        for k, v in m.items():
            if isinstance(v, (int, float)) and base is not None and isinstance(base.get(k), (int, float)):
                row[f"delta_{k}"] = v - base[k]
        rows.append(row)
    return rows
