"""The one small-sample rule: no resampled interval from fewer than :data:`MIN_UNITS` resampling units.

A bootstrap over ``k`` units (items, template instances, concept pairs, context
pairs: whatever the task resamples) can only reach ``C(2k - 1, k)`` distinct
resamples, and far fewer distinct values of a statistic: 126 resamples of 5
units, 92,378 of 10. Below about ten units a percentile interval is made of a
handful of values, its coverage falls well short of 95%, and it looks precise
exactly when it is not (``-0.148 [-0.205, -0.090]`` from two context pairs).
So every bootstrap in probe (per-item, cluster, stratified, paired) gives no
interval from fewer than ten units, and every table shows ``n/a (k units)``
instead. Exact intervals (Wilson's for a share) hold at any n and are kept.

>>> enough(9), enough(10), enough(float("nan"))
(False, True, False)
>>> guard((0.1, 0.4), 3)
(nan, nan)
>>> na_text(1), na_text(4)
('n/a (1 unit)', 'n/a (4 units)')
"""

from __future__ import annotations

import math
from typing import Any, Sequence

__all__ = ["MIN_UNITS", "enough", "guard", "na_text"]

#: the fewest resampling units a bootstrap interval is computed from (see the module docstring for why ten)
MIN_UNITS = 10


def enough(units: Any) -> bool:
    """Whether ``units`` resampling units are enough for a resampled interval (unknown: no)."""
    return isinstance(units, (int, float)) and not isinstance(units, bool) and math.isfinite(units) \
        and units >= MIN_UNITS


def guard(ci: Sequence[float], units: Any) -> tuple[float, float]:
    """``ci`` as a ``(low, high)`` pair, or ``(nan, nan)`` when it was resampled from too few units."""
    lo, hi = ci
    return (float(lo), float(hi)) if enough(units) else (math.nan, math.nan)


def na_text(units: Any) -> str:
    """What a table shows instead of an interval from too few units: ``n/a (3 units)``."""
    if not isinstance(units, (int, float)) or isinstance(units, bool) or not math.isfinite(units):
        return "n/a"
    k = int(units)
    return f"n/a ({k} unit{'' if k == 1 else 's'})"
