"""Planning: a prefix tree over the unique token sequences, and the passes that run it.

- Rows are unique token sequences: identical requests across a call are computed once.
- All rows of one :meth:`Scorer.score` call go into one *prefix tree* (a radix
  tree over token ids). An internal node is a token segment shared by every
  row below it: it runs once and its KV cache is extended by its children. A
  leaf is one row's remaining tokens, where its scored positions are read.
  Shared segments stop before a row's first scored position, so every score is
  read in the row's own leaf. The tree finds what ``group`` keys cannot say:
  a system prompt shared by every request, a context shared by the text and
  the letter form of a question, the question shared by its answer options.
- A segment is kept shared only when that saves at least ``min_shared`` tokens
  (``(children - 1) x length``); cheaper branch points are folded into their
  children, since each tree level costs a forward pass.
- Siblings run together in passes: sorted by width, at most ``max_rows`` per
  pass, within ``token_budget`` padded tokens (the parent cache columns count),
  closed early when padding would exceed 30% of the real tokens.

The tree and the passes depend only on the set of rows, never on their order.
"""

from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from probe.scoring.engine.rows import Row

MIN_SHARED = 16  # a shared segment must save at least this many tokens to be worth a tree level
PAD_SLACK = 1.3  # a pass may hold at most 30% padding (once it has 4 rows)


@dataclass
class Node:
    """Tokens ``ids[start:end]`` of every row below this node.

    Internal nodes have ``children`` (at least two) and no row; a leaf has one
    ``row`` and runs its tokens from ``start`` to the row's end.
    """

    start: int
    end: int
    ids: tuple[int, ...]
    children: list["Node"] = field(default_factory=list)
    row: Row | None = None

    @property
    def width(self) -> int:
        return self.end - self.start

    @property
    def is_leaf(self) -> bool:
        return self.row is not None

    def leaves(self) -> int:
        return 1 if self.is_leaf else sum(c.leaves() for c in self.children)


def _leaf(row: Row, start: int) -> Node:
    return Node(start=start, end=len(row.ids), ids=row.ids, row=row)


def _cap(row: Row) -> int:
    """How many leading tokens of ``row`` may be shared: all before its first scored position's input."""
    return row.score_from - 1


def build_tree(rows: list[Row], min_shared: int = MIN_SHARED, share: bool = True) -> list[Node]:
    """The top-level nodes of the prefix tree over ``rows`` (``share=False``: one leaf per row).

    >>> from probe.scoring.engine.rows import Row
    >>> rows = [Row((1, 2, 3, 4, 5, 6), 5), Row((1, 2, 3, 4, 7, 8), 5)]
    >>> [(n.start, n.end, len(n.children)) for n in build_tree(rows, min_shared=2)]
    [(0, 4, 2)]
    """
    keys = {id(r): token_bytes(r.ids) for r in rows}
    # byte keys sort as the id tuples do, compared in C
    rows = sorted(rows, key=lambda r: (keys[id(r)], r.score_from, r.label_ids))
    if not share:
        return [_leaf(r, 0) for r in rows]
    shared = _Shared(rows)
    return _fold(_split(rows, 0, shared), min_shared)


def token_bytes(ids: tuple[int, ...]) -> bytes:
    """Token ids as big-endian 4-byte words: bytes compare as the tuples do (ids are below 2**32)."""
    words = array("I", ids)
    if sys.byteorder == "little":
        words.byteswap()
    return words.tobytes()


class _Shared:
    """Common prefix lengths of sorted rows: for neighbours computed at once, blocks of rows compared as
    padded arrays; for any two rows the least over the neighbours between them (sorted order)."""

    BLOCK = 512  # rows compared at once (a [rows, longest] array)

    def __init__(self, rows: list[Row]) -> None:
        self.index = {id(r): i for i, r in enumerate(rows)}
        parts = [np.zeros(0, np.int64)]
        for a in range(0, len(rows) - 1, self.BLOCK):
            parts.append(_neighbours(rows[a : a + self.BLOCK + 1]))
        self.next = np.concatenate(parts)

    def between(self, first: Row, last: Row) -> int:
        i, j = self.index[id(first)], self.index[id(last)]
        return int(self.next[i:j].min()) if j > i else len(first.ids)


def _neighbours(rows: list[Row]) -> np.ndarray:
    """The common prefix length of each row and the next (``len(rows) - 1`` values)."""
    lengths = np.fromiter((len(r.ids) for r in rows), np.int64, len(rows))
    grid = np.full((len(rows), int(lengths.max())), -1, np.int64)
    flat = np.fromiter(chain.from_iterable(r.ids for r in rows), np.int64, int(lengths.sum()))
    grid[np.repeat(np.arange(len(rows)), lengths), np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths,
                                                                                    lengths)] = flat
    same = grid[1:] == grid[:-1]
    first_diff = np.where(same.all(axis=1), grid.shape[1], same.argmin(axis=1))
    return np.minimum(first_diff, np.minimum(lengths[1:], lengths[:-1]))


def _split(rows: list[Row], depth: int, shared: _Shared) -> list[Node]:
    """Nodes for sorted ``rows`` that share their first ``depth`` tokens."""
    out: list[Node] = []
    open_rows = []
    for r in rows:
        if _cap(r) <= depth:
            out.append(_leaf(r, depth))  # cannot share a token more
        else:
            open_rows.append(r)
    i = 0
    while i < len(open_rows):
        # sorted rows with the same token at ``depth`` are neighbours
        j = i + 1
        while j < len(open_rows) and open_rows[j].ids[depth] == open_rows[i].ids[depth]:
            j += 1
        cluster = open_rows[i:j]
        if len(cluster) == 1:
            out.append(_leaf(cluster[0], depth))
        else:
            end = min(shared.between(cluster[0], cluster[-1]), min(_cap(r) for r in cluster))
            out.append(Node(start=depth, end=end, ids=cluster[0].ids[:end], children=_split(cluster, end, shared)))
        i = j
    return out


def _fold(nodes: list[Node], min_shared: int) -> list[Node]:
    """Fold internal nodes that save fewer than ``min_shared`` tokens into their children."""
    out: list[Node] = []
    for n in nodes:
        if n.is_leaf:
            out.append(n)
        elif (len(n.children) - 1) * n.width < min_shared:
            for c in n.children:
                c.start = n.start
            out.extend(_fold(n.children, min_shared))
        else:
            n.children = _fold(n.children, min_shared)
            out.append(n)
    return out


def plan_passes(
    nodes: list[Node],
    max_rows: int,
    token_budget: int,
    cache_width: int = 0,
    equal_widths: bool = False,
) -> list[list[int]]:
    """Split sibling ``nodes`` into passes; returns index lists into ``nodes``.

    ``cache_width``: columns of the parent cache every row attends to (counted
    in the budget). ``equal_widths``: a pass whose cache is kept holds only
    internal nodes of one width and leaves run in passes of their own, so no
    padding ever sits between two segments of a row (sliding-window attention
    counts cache columns, and a gap would shift its window).
    """
    order = sorted(range(len(nodes)), key=lambda i: (nodes[i].width, nodes[i].ids, nodes[i].start))
    if equal_widths:
        order.sort(key=lambda i: (not nodes[i].is_leaf, nodes[i].width if not nodes[i].is_leaf else 0))
    passes: list[list[int]] = []
    for i in order:
        if passes:
            part = passes[-1]
            widths = [nodes[k].width for k in part] + [nodes[i].width]
            fits = (
                len(part) < max_rows
                and (cache_width + max(widths)) * len(widths) <= token_budget
                and (len(part) < 4 or max(widths) * len(widths) <= PAD_SLACK * sum(widths))
            )
            if equal_widths:
                first = nodes[part[0]]
                fits = fits and first.is_leaf == nodes[i].is_leaf and (first.is_leaf or first.width == nodes[i].width)
            if fits:
                part.append(i)
                continue
        passes.append([i])
    return passes
