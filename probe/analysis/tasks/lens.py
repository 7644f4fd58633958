"""The logit lens over a task's option labels, from residuals captured at the scored position.

Each layer's ``hook_resid_post`` at the last prompt token (where a label
request's next-token distribution is read) goes through the model's final norm
and unembedding (:func:`probe.analysis.logit_lens.lens_logprobs`); the labels'
log-probabilities use the scorer's own label variants (each label's token ids,
summed). At the last layer this is the record's own score.

>>> lp = lens_from_residuals(model, resid, variants)   # [n_records, n_layers, n_labels]  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from probe.activations.hooks import discover
from probe.analysis.logit_lens import lens_logprobs
from probe.analysis.tasks.steer import save_figure


def lens_from_residuals(model: torch.nn.Module, resid: np.ndarray,
                        variants: Sequence[Sequence[Sequence[int]]]) -> np.ndarray:
    """``[n, n_layers, n_labels]`` full-vocabulary label log-probs from ``resid`` ``[n, n_layers, d_model]``.

    ``variants[i]``: record ``i``'s label token-id variants (one tuple per label); every record needs the
    same number of labels. Records sharing variants are computed together.
    """

    n_labels = {len(v) for v in variants}
    if len(n_labels) != 1:
        raise ValueError(f"the logit lens needs records with the same number of labels, got {sorted(n_labels)}")
    layout = discover(model)
    out = np.empty((resid.shape[0], resid.shape[1], n_labels.pop()), np.float32)
    groups: dict[tuple, list[int]] = {}
    for i, v in enumerate(variants):
        groups.setdefault(tuple(tuple(x) for x in v), []).append(i)
    with torch.no_grad():
        for v, rows in groups.items():
            x = torch.from_numpy(np.ascontiguousarray(resid[rows], dtype=np.float32))
            out[rows] = lens_logprobs(layout, x, v).cpu().numpy()
    return out


def lens_table(logprobs: np.ndarray, labels: Sequence[str]) -> Any:
    """Per layer and label: mean probability among the labels, mean full-vocabulary log-prob; and per layer
    the mean label mass (rows ``label == "(mass)"``)."""

    x = logprobs - logprobs.max(axis=-1, keepdims=True)
    probs = np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True)
    mass = np.exp(logprobs).sum(axis=-1)
    rows = []
    for layer in range(logprobs.shape[1]):
        for j, lab in enumerate(labels):
            rows.append({"layer": layer, "label": lab, "prob": float(probs[:, layer, j].mean()),
                         "logprob": float(logprobs[:, layer, j].mean())})
        rows.append({"layer": layer, "label": "(mass)", "prob": float(mass[:, layer].mean()), "logprob": np.nan})
    return pd.DataFrame(rows)


def plot_lens_table(table: Any, path: str | Path, title: str = "") -> Path:
    """``lens.png``: each label's mean probability among the labels by layer, and the label mass."""

    matplotlib.use("Agg")

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.2))
    for lab, d in table[table.label != "(mass)"].groupby("label", sort=False):
        ax[0].plot(d.layer, d.prob, label=str(lab))
    ax[0].set(xlabel="layer", ylabel="P(label) among the labels", title=title or "logit lens")
    ax[0].legend(fontsize=8)
    m = table[table.label == "(mass)"]
    ax[1].plot(m.layer, m.prob)
    ax[1].set(xlabel="layer", ylabel="label mass", title="probability on the labels at all", yscale="log")

    return save_figure(fig, path)
