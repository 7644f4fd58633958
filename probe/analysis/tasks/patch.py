"""Residual patching between a task's record pairs, reported as changes in the target's option probabilities.

For a pair (source -> target) and each option label of the target,
:func:`probe.analysis.patching.patch_logprobs` gives the change in the
target's full-vocabulary ``log P(label)`` when ``blocks.{l}.hook_resid_post``
at the position is replaced by the source's, for every layer ``l``. Adding it
to the target's scored log-probs and renormalizing over the labels gives the
patched option probabilities; ``dp_j`` is the change of label ``j``'s, and
``dp_target`` that of the stereotyped answer when the record names it
(``target_index`` and ``owner``). Patching a record with itself changes nothing.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from probe.analysis.patching import patch_logprobs
from probe.metrics.stats import cluster_bootstrap_ci


def pair_effects(lm: Any, source: Any, target: Any, target_logprobs: Sequence[float],
                 layers: Sequence[int], position: str = "last", stereo: Sequence[int] = (),
                 scorer: Any = None) -> list[dict]:
    """One row per layer: ``dlogp_j``, ``dp_j`` (label ``j`` of the target) and ``dp_target`` (the labels in
    ``stereo``, summed; NaN without). ``source``/``target``: label requests; ``lm``: anything with ``.model``
    and ``.tokenizer``; ``scorer``: a :class:`~probe.scoring.Scorer` to reuse."""

    clean = np.asarray(target_logprobs, dtype=np.float64)
    delta = patch_logprobs(lm, target, source, [position], layers=layers,
                           scorer=scorer)[:, 0].astype(np.float64)  # [n_layers, n_labels]

    def norm(lp: np.ndarray) -> np.ndarray:
        e = np.exp(lp - lp.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    dp = norm(clean[None] + delta) - norm(clean)[None]
    rows = []
    for k, layer in enumerate(layers):
        row: dict[str, Any] = {"layer": int(layer)}
        row.update({f"dlogp_{j}": float(delta[k, j]) for j in range(delta.shape[1])})
        row.update({f"dp_{j}": float(dp[k, j]) for j in range(dp.shape[1])})
        row["dp_target"] = float(dp[k, list(stereo)].sum()) if len(stereo) else float("nan")
        rows.append(row)
    return rows


def layer_summary(table: Any, units: Sequence[Any], n_boot: int = 1000, seed: int = 0) -> Any:
    """Per pair kind and layer: mean ``dp_target`` (else mean ``|dp|`` over labels) with a bootstrap CI
    resampling the targets' units; ``n`` pairs."""

    t = table.assign(unit=list(units))
    dp_cols = [c for c in t.columns if c.startswith("dp_") and c != "dp_target"]
    use_target = t["dp_target"].notna().all()
    t["effect"] = t["dp_target"] if use_target else t[dp_cols].abs().mean(axis=1)
    rows = []
    for (kind, layer), d in t.groupby(["kind", "layer"], sort=True):
        ci = cluster_bootstrap_ci(d["effect"].to_numpy(), list(d["unit"]), {"m": np.mean}, n_boot=n_boot,
                                  seed=seed)["m"]
        rows.append({"kind": kind, "layer": int(layer), "effect": "dp_target" if use_target else "mean |dp|",
                     "mean": float(d["effect"].mean()), "ci_low": ci[0], "ci_high": ci[1], "n": len(d)})
    return pd.DataFrame(rows)
