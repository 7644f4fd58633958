"""How the runner cuts a task's requests into chunks (the unit of durability and of sharding).

The policy:

- Chunks are cut from the **whole** request list, in the task's order, never
  from what is left to do; a resumed run therefore batches every item exactly
  as an uninterrupted one, and its records are byte-identical.
- A ``group`` is never split: its members go into one chunk, at the place of
  the group's first member, so paired variants are scored in one call.
- Within a chunk the scorer builds one prefix tree over every row: whatever
  shares a prefix inside a chunk is computed once. Tasks therefore order their
  requests so that what shares a prompt prefix is adjacent (one HBB concept's
  questions, one context's settings), and the default chunk (1,024 requests)
  is large enough that a chunk boundary cuts a shared prefix at most once per
  chunk, a cost of well under 1 % of a task's tokens.
- A chunk is at least ``size`` requests unless the list ends; a group larger
  than ``size`` is a chunk of its own.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence


def group_chunks(requests: Sequence[Any], size: int) -> list[list[Any]]:
    """Split requests into runs of about ``size`` without splitting a ``group``.

    Members of one group stay together (at the place of the group's first
    member); a group larger than ``size`` forms a chunk of its own.

    >>> from types import SimpleNamespace as R
    >>> rs = [R(id=i, group=g) for i, g in enumerate(["a", None, "a", None, None])]
    >>> [[r.id for r in c] for c in group_chunks(rs, 2)]
    [[0, 2], [1, 3], [4]]
    """
    units: dict[Any, list[Any]] = {}
    for r in requests:
        g = getattr(r, "group", None)
        units.setdefault(("g", g) if g is not None else ("r", id(r)), []).append(r)
    chunks: list[list[Any]] = []
    current: list[Any] = []
    for members in units.values():
        if current and len(current) + len(members) > size:
            chunks.append(current)
            current = []
        current.extend(members)
    if current:
        chunks.append(current)
    return chunks


def write_chunks(writer: Any, todo: Sequence[list], make: Callable[[list], Iterable[dict]], done: set[str],
                 bar: Any = None) -> int:
    """Score each chunk of ``todo`` whole and append its records not in ``done``; returns how many were added.

    A chunk is scored whole even when part of it is recorded, as in one process, so its batches (and hence
    its numbers) are the same."""
    scored = 0
    for part in todo:
        recs = [rec for rec in make(part) if str(rec["id"]) not in done]
        before = len(writer.done)
        writer.write_many(recs)
        scored += len(writer.done) - before
        if bar:
            bar.update(len(recs))
    return scored
