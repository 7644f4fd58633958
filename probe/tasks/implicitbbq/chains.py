"""CoT reasoning chains: K sampled chains per (item, format), each final answer scored exactly, averaged.

The paper samples its CoT answers (temperature 0.1). probe samples ``cot_chains``
reasoning chains per prompt at that setting, scores the final answer options
exactly after each chain, and takes the item's CoT option probabilities as the
mean over its valid chains: a Rao-Blackwellised estimate of the paper's CoT
metric (the answer sampling is replaced by its exact distribution; only the
reasoning is sampled). A chain that never reaches an answer cue
(:func:`probe.tasks.bbq.prompts.find_cue`) is excluded by default and counted, as the
paper drops unparsable generations.

>>> recs = [{"item_id": "i", "strategy": "cot", "answer_format": "oneword", "chain": k, "has_cue": c,
...          "probs": p, "mass": m, "pred_index": 0} for k, c, p, m in
...         [(0, True, [0.6, 0.2, 0.2], 0.5), (1, True, [0.2, 0.6, 0.2], 0.3), (2, False, [1.0, 0.0, 0.0], 0.9)]]
>>> [(r["probs"], r["mass"], r["n_chains"]) for r in average_chains(recs)]
[([0.4, 0.4, 0.2], 0.4, 2)]
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from probe.tasks.bbq.metrics import bbq_metrics
from probe.tasks.chains import chain_index


def valid(rec: Any, require_cue: bool = True) -> bool:
    """Whether a (metric) record counts: not a reasoning that missed the answer cue, unless ``require_cue`` is off."""
    return not (require_cue and rec.get("has_cue") is False)


def average_chains(recs: Sequence[dict], require_cue: bool = True) -> list[dict]:
    """Metric records with each (item, strategy, format)'s chains merged into one record.

    ``probs`` and ``mass``: the means over the valid chains; ``pred_index``: the
    argmax of the mean probabilities (ties to the lowest index); ``chain_probs``:
    each valid chain's probabilities; ``n_chains``: how many were averaged. An
    item without a valid chain gets no record. Records that are not chains
    (greedy CoT with no chain index, other strategies) pass through, except a
    greedy chain without a cue when ``require_cue``.
    """
    out: list[Any] = []
    groups: dict[tuple, list[dict]] = {}
    for r in recs:
        k = chain_index(r.get("chain"))
        if k is None:
            if valid(r, require_cue):
                out.append(r)
            continue
        key = (r["item_id"], r["strategy"], r["answer_format"])
        if key not in groups:
            groups[key] = []
            out.append(key)  # the merged record takes the place of the item's first chain
        if valid(r, require_cue):
            groups[key].append(r)
    merged: list[dict] = []
    for entry in out:
        if isinstance(entry, dict):
            merged.append(entry)
            continue
        chains = groups[entry]
        if not chains:
            continue
        probs = np.mean([c["probs"] for c in chains], axis=0)
        m = {k: v for k, v in chains[0].items() if k not in ("chain", "logprobs")}
        item, strategy, fmt = entry
        m.update(id=f"{item}|{strategy}|{fmt}", probs=[float(p) for p in probs],
                 mass=float(np.mean([c["mass"] for c in chains])), chain_probs=[list(c["probs"]) for c in chains],
                 **({"option_mass": [float(x) for x in np.mean([c["option_mass"] for c in chains], axis=0)]}
                    if all(c.get("option_mass") is not None for c in chains) else {}),
                 n_chains=len(chains), pred_index=max(range(3), key=lambda i: (probs[i], -i)), logprobs=None)
        merged.append(m)
    return merged


def chain_summary(chains: Sequence[dict], require_cue: bool = True) -> dict[str, Any]:
    """Counts and spread of the sampled chains (per-chain metric records, before averaging).

    Keyed by ``strategy|format``: ``n_chains`` (scored finite chains), ``n_chains_no_cue``
    (those that never reached an answer cue), ``n_items`` and
    ``n_items_no_valid_chain``; ``mean_item_std_probs``: over the items with at
    least 2 valid chains, the mean of the per-option standard deviations (ddof 1)
    of the chains' option probabilities; ``metrics_std_across_chains``: per context
    kind and version, each BBQ metric computed on chain index k alone (k = 0..K-1),
    and its standard deviation (ddof 1) across k.
    """

    out: dict[str, Any] = {}
    keys = sorted({f"{r['strategy']}|{r['answer_format']}" for r in chains})
    for key in keys:
        rs = [r for r in chains if f"{r['strategy']}|{r['answer_format']}" == key]
        items: dict[str, list[dict]] = {}
        for r in rs:
            items.setdefault(r["item_id"], [])
            if valid(r, require_cue):
                items[r["item_id"]].append(r)
        stds = [float(np.mean(np.std([c["probs"] for c in v], axis=0, ddof=1))) for v in items.values() if len(v) > 1]
        by_chain: dict[int, list[dict]] = {}
        for r in rs:
            if valid(r, require_cue) and chain_index(r.get("chain")) is not None:
                by_chain.setdefault(chain_index(r["chain"]), []).append(r)
        spread: dict[str, Any] = {}
        if len(by_chain) > 1:
            kinds = sorted({r["context_kind"] for r in rs})
            for kind in kinds:
                per_k = [bbq_metrics([r for r in v if r["context_kind"] == kind]) for _, v in sorted(by_chain.items())]
                spread[kind] = {version: {m: _std([p[version][m] for p in per_k])
                                          for m in ("acc_amb", "acc_dis", "bias_amb", "bias_dis")}
                                for version in ("expected", "argmax")}
        out[key] = {
            "n_chains": len(rs),
            "n_chains_no_cue": sum(r.get("has_cue") is False for r in rs),
            "n_items": len(items),
            "n_items_no_valid_chain": sum(not v for v in items.values()),
            "mean_item_std_probs": float(np.mean(stds)) if stds else math.nan,
            "n_items_with_spread": len(stds),
            "metrics_std_across_chains": spread,
        }
    return out


def _std(values: Sequence[float]) -> float:
    """Sample standard deviation of the finite values (NaN with fewer than 2)."""
    v = [x for x in values if isinstance(x, (int, float)) and math.isfinite(x)]
    return float(np.std(v, ddof=1)) if len(v) > 1 else math.nan
