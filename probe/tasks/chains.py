"""Sampled reasoning chains as records: the id of chain ``k`` of a request and a record's chain index.

A task that samples K reasoning chains per prompt (ImplicitBBQ's and iso/cmp's
CoT) gives chain ``k`` of request ``ID`` the id ``ID|chain{k}`` and the record
field ``chain`` = k; records frames hold NaN there for rows that are not chains.

>>> chain_id("item-1|cot|oneword", 2), chain_index(float("nan")), chain_index(2.0)
('item-1|cot|oneword|chain2', None, 2)
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["chain_id", "chain_index"]


def chain_id(request_id: str, k: int) -> str:
    """The id of chain ``k`` of one (item, strategy, format): ``ITEM|cot|FORMAT|chain{k}``."""
    return f"{request_id}|chain{k}"


def chain_index(value: Any) -> int | None:
    """A record's chain index (None: not a sampled chain; records frames hold NaN there)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value)
