"""Label / answer mass: how much of the model's probability the scored answers carry.

A label item's mass is the probability of the label tokens at all; a one-word
item's is the total probability of the scored answer texts. An item whose
mass is below a floor is "not answering": the model would mostly say
something else, so its renormalised option distribution says little. Tasks
report the mass distribution and their metrics with and without those items.

>>> s = mass_summary([0.05, 0.1, 0.5, 0.9], floor=0.1)
>>> s["n"], s["n_below_floor"], s["share_below_floor"], s["median"]
(4, 1, 0.25, 0.3)
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

__all__ = ["DEFAULT_FLOOR", "answering", "mass_summary"]

#: items whose mass is below this are flagged "not answering" (configurable; default 0.1)
DEFAULT_FLOOR = 0.1


def answering(mass: Any, floor: float = DEFAULT_FLOOR) -> bool:
    """True when ``mass`` is a finite number at or above ``floor`` (exactly on the floor counts as answering).

    >>> answering(0.1, 0.1), answering(0.0999, 0.1), answering(float("nan"), 0.1), answering(None, 0.1)
    (True, False, False, False)
    """
    return isinstance(mass, (int, float)) and math.isfinite(mass) and mass >= floor


def mass_summary(masses: Sequence[Any], floor: float = DEFAULT_FLOOR) -> dict[str, Any]:
    """Distribution of the masses (mean, quantiles), and how many fall below ``floor``.

    Non-finite or missing masses are counted in ``n_invalid`` and left out of
    the distribution; with no valid mass every statistic is NaN (never 0).
    """
    vals = np.array([float(m) for m in masses if isinstance(m, (int, float)) and math.isfinite(m)], dtype=float)
    out: dict[str, Any] = {"floor": floor, "n": int(vals.size), "n_invalid": len(masses) - int(vals.size)}
    if vals.size == 0:
        keys = ("mean", "min", "p05", "p25", "median", "p75", "p95", "max", "share_below_floor")
        return {**out, **{k: math.nan for k in keys}, "n_below_floor": 0}
    q = np.quantile(vals, [0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0])
    below = int((vals < floor).sum())
    return {**out, "mean": float(vals.mean()), "min": float(q[0]), "p05": float(q[1]), "p25": float(q[2]),
            "median": float(q[3]), "p75": float(q[4]), "p95": float(q[5]), "max": float(q[6]),
            "n_below_floor": below, "share_below_floor": below / vals.size}
