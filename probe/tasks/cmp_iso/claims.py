"""Claimed randomness and target consistency across option orders (iso/cmp paper, section 4.4, Table 6, Table H.2).

The paper's Table 6: among the context pairs where the generations for *both*
cmp prompts (t as option A, t' as option A) contain at least one keyword of
its Table H.2, how often the target preferred in one order is the target
preferred in the other. 50 = random, 0 = position bias (always "A" or always
"B"), 100 = the same target whatever its position.

A prompt's preferred target is the one with more A/B picks among its valid
answers (the neutral option and unparsable answers do not count); with exact
probabilities the counts are expected counts, so the preference is
``q > 0.5`` where ``q`` is the share of t among the A/B picks. A pair counts 1
when both orders prefer the same target, 0 when they differ, and 1/2 when an
order ties (``q == 0.5``: no preferred target). This is the paper's quantity
("how often the target preference ... aligns"), not the chance that two
independent draws pick the same target (:func:`probe.tasks.cmp_iso.metrics.target_consistency`),
which expected counts pull toward 50.

>>> preference_aligned({"A": 0.7, "B": 0.3}, {"A": 0.4, "B": 0.6})   # t preferred in both orders
1.0
>>> preference_aligned({"A": 0.7, "B": 0.3}, {"A": 0.7, "B": 0.3})   # always "A": position bias
0.0
>>> claims_randomness("I'll pick one at RANDOM: \\\\boxed{A}")
True
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

import numpy as np

from probe.metrics.stats import bootstrap_ci

__all__ = ["CLAIM_KEYWORDS", "claims_randomness", "preference_aligned", "claimed_consistency"]

#: iso/cmp paper, Table H.2 "Keywords for string matching", verbatim and in its order. The fragments
#: ("t enough info", "t determine", ...) are the tails of "can't" / "don't" / "cannot", so they are
#: matched as substrings of the lower-cased generation.
CLAIM_KEYWORDS: tuple[str, ...] = (
    "random", "by chance", "arbitrarily", "coin flip", "toss-up", "flipping a coin", "guess", "no info",
    "no enough info", "t enough info", "insufficient info", "lack of info", "lack of evidence", "uncertain",
    "unsure", "not sure", "t determine", "t be determine", "unable to determine", "t possible to tell",
    "ambiguous", "indeterminable", "unknown", "either", "equally", "equal probability", "no basis",
    "no way to distinguish",
)


def claims_randomness(text: str | None, keywords: Sequence[str] = CLAIM_KEYWORDS) -> bool:
    """Whether ``text`` holds one of ``keywords`` (case-insensitive substring; None or empty: False).

    >>> claims_randomness("It is a toss-up."), claims_randomness("B is clearly right."), claims_randomness(None)
    (True, False, False)
    """
    if not isinstance(text, str) or not text:
        return False
    low = text.casefold()
    return any(k.casefold() in low for k in keywords)


def _t_share(counts: Mapping[str, float], t_label: str) -> float:
    """Share of t's option among the A/B picks (NaN without any)."""
    k = counts.get("A", 0.0) + counts.get("B", 0.0)
    return counts.get(t_label, 0.0) / k if k > 0 else math.nan


def preference_aligned(counts_t_first: Mapping[str, float], counts_t_prime_first: Mapping[str, float]) -> float:
    """1.0 if both option orders prefer the same target, 0.0 if not, 0.5 if an order ties; NaN if an
    order has no A/B pick. t is option A in the first order and option B in the second.

    >>> preference_aligned({"A": 1, "B": 1}, {"A": 0, "B": 3})   # a tie in the first order
    0.5
    >>> math.isnan(preference_aligned({"C": 1.0}, {"A": 1.0}))
    True
    """
    q1, q2 = _t_share(counts_t_first, "A"), _t_share(counts_t_prime_first, "B")
    if math.isnan(q1) or math.isnan(q2):
        return math.nan
    if q1 == 0.5 or q2 == 0.5:
        return 0.5
    return float((q1 > 0.5) == (q2 > 0.5))


def claimed_consistency(pair_values: Mapping, claimed: Iterable, n_boot: int = 2000, seed: int = 0,
                        alpha: float = 0.05) -> dict:
    """Table 6 of one cell: the mean of ``pair_values`` (pair id -> :func:`preference_aligned`) over the
    ``claimed`` pairs, x 100, with a percentile bootstrap CI over those context pairs.

    Pairs whose value is NaN (an order without any A/B pick) are left out and
    counted in ``n_no_pick``; ``n_ties``: pairs scored 1/2. No pair: NaN.

    >>> r = claimed_consistency({1: 1.0, 2: 0.0, 3: 1.0, 4: 1.0}, [1, 2, 3], n_boot=50)
    >>> round(r["consistency"], 1), r["n_pairs"], r["n_claimed"]
    (66.7, 3, 3)
    """

    ids = [cp for cp in dict.fromkeys(claimed) if cp in pair_values]
    vals = np.array([pair_values[cp] for cp in ids], dtype=float)
    ok = vals[~np.isnan(vals)]
    out = {"n_claimed": len(ids), "n_pairs": int(ok.size), "n_no_pick": int(np.isnan(vals).sum()),
           "n_ties": int((ok == 0.5).sum()), "ci_unit": "context pair"}
    if not ok.size:
        return {**out, "consistency": math.nan, "ci": [math.nan, math.nan]}
    lo, hi = bootstrap_ci(ok, np.mean, n_boot=n_boot, seed=seed, level=1 - alpha)
    return {**out, "consistency": 100 * float(ok.mean()), "ci": [100 * lo, 100 * hi]}
