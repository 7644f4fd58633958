"""CoT as the authors run it: K sampled reasoning chains per prompt, each boxed answer scored exactly, averaged.

The authors generate ``n_gens`` (25) completions per prompt at T = 0.7, top-p
= 0.9 in their generation mode (CoT footer, ``\\boxed{}`` labels) and count the
answers their parser finds (the last ``\\boxed{label}``, lower-cased;
unparsable generations are dropped). probe samples ``cot_chains`` reasoning
chains per prompt at those settings (seeded per chain), scores the label
exactly where the authors' parser finds the chain's last boxed answer
(:func:`probe.tasks.cmp_iso.prompts.last_boxed`), and takes the
prompt's counts as the mean over its valid chains of the chain's label
probabilities: a Rao-Blackwellised estimate of the authors' counts (the
sampled answer token is replaced by its exact distribution; only the
reasoning is sampled). A chain without a valid boxed answer (the authors'
parser would return -1, or name an unoffered label) is left out by default and
counted; a prompt none of whose chains has one is kept with no valid answer
(iso/cmp paper, appendix B: iso affirmation 0, cmp order 0.5).

Records: one per (setting, benchmark, pair, prompt, chain), id
``<request id>|chain{k}`` (:func:`probe.tasks.chains.chain_id`),
``meta.chain`` = k; greedy CoT (``cot_chains: 0``) has one record per prompt
without ``chain``.

>>> rows = [{"chain": 0, "boxed_found": True, "options": ["A", "B"], "probs": [0.8, 0.2]},
...         {"chain": 1, "boxed_found": True, "options": ["A", "B"], "probs": [0.4, 0.6]},
...         {"chain": 2, "boxed_found": False, "options": ["A", "B"], "probs": [1.0, 0.0]}]
>>> ok = [r for r in rows if valid(r)]
>>> {k: round(v, 6) for k, v in mean_counts([chain_counts(r, "expected") for r in ok]).items()}
{'A': 0.6, 'B': 0.4}
>>> mean_counts([chain_counts(r, "argmax") for r in ok])
{'A': 0.5, 'B': 0.5}
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from probe.tasks.chains import chain_id, chain_index
from probe.tasks.cmp_iso.metrics import CmpIsoObservation, counts_from_probs, summarize

__all__ = ["chain_id", "chain_index", "valid", "prompt_key", "chain_counts", "mean_counts", "chain_stats"]


def _is_false(v: Any) -> bool:
    """``v`` is a real boolean False (not None / NaN, which records frames hold for direct rows)."""
    return v is not None and not (isinstance(v, float) and math.isnan(v)) and not bool(v)


def valid(rec: Mapping, require_cue: bool = True) -> bool:
    """Whether a record counts: not a CoT chain without a boxed label, unless ``require_cue`` is off."""
    return not (require_cue and _is_false(rec.get("boxed_found")))


def prompt_key(rec: Mapping) -> tuple:
    """The prompt a record answers: (setting, benchmark, pair, task type, target or order)."""
    slot = rec.get("target") if rec["task_type"] == "iso" else rec.get("order")
    return (rec["setting"], rec["benchmark"], rec["context_pair_id"], rec["task_type"], slot)


def chain_counts(rec: Mapping, mode: str, probs: Sequence[float] | None = None) -> dict[str, float]:
    """One chain's label counts in ``mode`` (``expected``: its probabilities; ``argmax``: one-hot);
    ``probs`` replaces the record's (the paper mode's sampled probabilities)."""

    p = rec["probs"] if probs is None else probs
    return counts_from_probs(dict(zip(rec["options"], p)), "argmax" if mode == "argmax" else "expected")


def mean_counts(per_chain: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The mean of the chains' counts, label by label (one chain: its counts unchanged)."""
    if len(per_chain) == 1:
        return dict(per_chain[0])
    labels = list(per_chain[0])
    return {k: float(np.mean([c.get(k, 0.0) for c in per_chain])) for k in labels}


def chain_stats(all_chains: Sequence[Mapping], prompts: Mapping[tuple, Sequence[Mapping]],
                counts: Callable[[Mapping, str], dict | None], modes: Sequence[str],
                labels_of: Mapping[tuple, Sequence[str]] | None = None) -> dict[str, Any]:
    """Counts and spread of one (setting, benchmark)'s sampled chains.

    ``all_chains``: its finite chain records (valid or not); ``prompts``: prompt
    key -> its valid chains; ``counts(rec, mode)``: a chain's counts in a mode
    (None: the chain has none there). Returns ``n_chains``, ``n_chains_no_cue``
    (no valid boxed answer), ``n_prompts``, ``n_prompts_no_valid_chain``,
    ``mean_prompt_std`` (over the prompts with >= 2 valid chains, the mean over
    labels of the chains' probability standard deviation, ddof 1) and, per mode
    and paradigm, ``pg_by_chain`` (PG on chain index k alone, k = 0..K-1) and
    ``pg_std_across_chains`` (its standard deviation, ddof 1; NaN below 2 chains).
    In ``pg_by_chain`` a prompt whose chain k has no valid answer (none, or no
    label inside the nucleus in the paper mode) counts with no valid answer
    (iso/cmp paper, appendix B: iso affirmation 0, cmp order 0.5); ``labels_of``:
    prompt key -> its labels (default: the labels of its chain records).
    """

    keys = dict.fromkeys(prompt_key(r) for r in all_chains)  # ordered as the records
    labels = dict(labels_of or {})
    for r in all_chains:
        labels.setdefault(prompt_key(r), tuple(r["options"]))
    stds = [float(np.mean(np.std([c["probs"] for c in v], axis=0, ddof=1))) for v in prompts.values() if len(v) > 1]
    ks = sorted({k for r in all_chains if (k := chain_index(r.get("chain"))) is not None})
    by_chain: dict[str, dict[str, list[float]]] = {}
    for mode in modes:
        pgs: dict[str, list[float]] = {"iso": [], "cmp": []}
        for k in ks:
            obs = []
            for key in keys:
                chains = prompts.get(key, ())
                c = next((r for r in chains if chain_index(r.get("chain")) == k), None)
                cnt = counts(c, mode) if c is not None else None
                if cnt is None:  # chain k gives no valid answer: the prompt stays, every count 0
                    cnt = {lab: 0.0 for lab in labels[key]}
                obs.append(CmpIsoObservation(key[2], key[3], key[4] if key[3] == "iso" else None,
                                             key[4] if key[3] == "cmp" else None, cnt))
            s = summarize(obs, allow_incomplete=True)
            pgs["iso"].append(s.iso.pg)
            pgs["cmp"].append(s.cmp.pg)
        by_chain[mode] = pgs
    return {
        "n_chains": len(all_chains),
        "n_chains_no_cue": sum(_is_false(r.get("boxed_found")) for r in all_chains),
        "n_prompts": len(keys),
        "n_prompts_no_valid_chain": sum(1 for key in keys if not prompts.get(key)),
        "mean_prompt_std": float(np.mean(stds)) if stds else math.nan,
        "n_prompts_with_spread": len(stds),
        "pg_by_chain": by_chain,
        "pg_std_across_chains": {m: {par: _std(v) for par, v in d.items()} for m, d in by_chain.items()},
    }


def _std(values: Sequence[float]) -> float:
    v = [x for x in values if isinstance(x, (int, float)) and math.isfinite(x)]
    return float(np.std(v, ddof=1)) if len(v) > 1 else math.nan
