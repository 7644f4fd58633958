"""The engine's input: a unique sequence to run, and the shared-prefix rule.

Its own module, below the engine, the prefix tree (:mod:`probe.scoring.engine.batching`) and the packed pass
(:mod:`probe.scoring.engine.packed`), so that the three import it without importing each other in a circle.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Row:
    """A unique sequence to run. ``score_from``: first scored token (see tokens.Sequence)."""

    ids: tuple[int, ...]
    score_from: int
    label_ids: tuple[int, ...] = ()


def common_prefix_length(seqs: list[tuple[int, ...]]) -> int:
    """Length of the longest common prefix of token sequences."""
    if not seqs:
        return 0
    first, n = seqs[0], min(len(s) for s in seqs)
    for other in seqs[1:]:
        k = 0
        while k < n and other[k] == first[k]:
            k += 1
        n = k
        if n == 0:
            break
    return n
