"""The packed pass: whole prefix trees in one padding-free forward pass, with a tree mask.

Each top-level node of the prefix tree (:mod:`probe.scoring.engine.batching`: a shared
context, then its branches) is written once, depth first, into a *row*:

- every token carries its real position in its own sequence (``position_ids``);
- token ``i`` may attend to token ``j`` only when ``j`` is not later in the row and
  ``j``'s node is ``i``'s node or one of its ancestors.

With nodes numbered in depth-first (pre-)order, the ancestors-or-self of node
``a`` are exactly the nodes ``b`` with ``pre[b] <= pre[a] < end[b]`` (``end``: one
past the last pre-order number of ``b``'s subtree), so the mask is three vectorised
comparisons, built on the device from four integer arrays. A token then sees
exactly its own sequence's earlier tokens at their own positions: the same
attention as a plain forward of that sequence, so the same numbers up to float
rounding of differently shaped products.

The leaves of a call, depth first, are one stream cut into rows of about equal
length (:func:`layout`): a row holds consecutive leaves under copies of their
ancestors, so a shared segment is written again only in a row a cut falls
into. Rows go into passes up to the token budget: no KV cache is selected,
copied or merged, and the only waste is each row's tail and the segments cuts
repeat. A padding token sees itself only (a row of ``-inf`` would give NaN).

Sliding-window layers see a token only within ``window`` positions; since a
token's visible tokens are its own sequence's, position distance is what the
window measures, so the mask of those layers adds ``pos[i] - pos[j] < window``.
A model with both kinds of layer gets one mask per kind (the ``dict`` form
transformers' hybrid models accept); a model with both kinds that does not
accept that form falls back on the level-by-level path (``docs/scoring.md``).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from probe.scoring.engine.batching import Node

#: rows per pass stay below 65,536: SDPA's launch grid fails above it, and past 65,536 query
#: positions with a mask it has returned wrong values (pytorch #146704, #162588)
MAX_ROWS = 65_535
ROW_TOKENS_MIN = 256
ROW_TOKENS_MAX = 2048


def row_tokens(d_model: int, budget: int) -> int:
    """The target row length for a model of width ``d_model``: a masked-out column still costs
    attention work, ``~ width / (3 x d_model)`` of the layer's matrix products, so rows about as
    long as the model is wide keep that under a third (and within the token budget)."""
    return max(1, min(budget, max(ROW_TOKENS_MIN, min(ROW_TOKENS_MAX, d_model))))


@dataclass
class Flat:
    """One prefix tree written depth first: per token its id, position, node number (``pre``)
    and the end of that node's subtree numbering (``end``); ``places``: each node and the offset
    of its first token in the row of this tree."""

    ids: np.ndarray
    pos: np.ndarray
    pre: np.ndarray
    end: np.ndarray
    places: list[tuple[Node, int]]
    n_nodes: int
    #: attention blocks, columns relative to the tree: ``(first query, end, context spans)`` (:func:`_blocks`)
    blocks: list[Block] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.ids)


def flatten(root: Node) -> Flat:
    """``root``'s subtree as one depth-first token row (see the module docstring)."""
    chunks: list[tuple[tuple[int, ...], int, int]] = []  # (segment, first position, node number)
    places: list[tuple[Node, int]] = []
    ends: list[int] = []

    def walk(node: Node, offset: int) -> int:
        me = len(places)
        seg = node.ids[node.start : node.end]
        places.append((node, offset))
        ends.append(0)
        chunks.append((seg, node.start, me))
        offset += len(seg)
        for child in node.children:
            offset = walk(child, offset)
        ends[me] = len(places)
        return offset

    size = walk(root, 0)
    lengths = np.array([len(s) for s, _, _ in chunks], dtype=np.int64)
    number = np.repeat(np.arange(len(chunks), dtype=np.int64), lengths)
    starts = np.repeat(np.array([st for _, st, _ in chunks], dtype=np.int64), lengths)
    first = np.repeat(np.cumsum(lengths) - lengths, lengths)
    ids = np.fromiter(chain.from_iterable(s for s, _, _ in chunks), dtype=np.int64, count=int(lengths.sum()))
    return Flat(ids, starts + np.arange(len(ids)) - first, number, np.asarray(ends, np.int64)[number], places,
                len(places), _blocks(places, ends, size))


#: a block is ``(first query column, end, context spans)``: its queries see keys among the context spans'
#: columns (all earlier in the row) and its own columns only
Block = tuple[int, int, tuple[tuple[int, int], ...]]
#: a subtree longer than this is split into its stem and its branches (attention work ~ queries x keys)
BLOCK_SPLIT = 128
#: neighbouring blocks with the same context merge while shorter than this (fewer, larger calls; the
#: masked pairs a merged block computes stay below BLOCK_MIN x BLOCK_MIN)
BLOCK_MIN = 64


def _blocks(places: list[tuple[Node, int]], ends: list[int], size: int) -> list[Block]:
    """A tree's attention blocks from its depth-first numbering (``ends``: one past each subtree's last
    node). A subtree of at most :data:`BLOCK_SPLIT` tokens is one block; a longer one is its stem (the
    subtree's root down to the first node with more than one child: every token of the subtree sees it)
    and, recursively, the subtrees of that node's children, each with the stem added to its context."""
    def col(i: int) -> int:
        return places[i][1] if i < len(places) else size

    out: list[Block] = []

    def split(i: int, context: tuple[tuple[int, int], ...]) -> None:
        j = i
        while j + 1 < ends[j] and ends[j + 1] == ends[j]:  # one child: still the stem
            j += 1
        first, last = col(i), col(ends[i])
        if last - first <= BLOCK_SPLIT or j + 1 >= ends[j]:
            out.append((first, last, context))
            return
        out.append((first, col(j + 1), context))
        child = j + 1
        while child < ends[j]:
            split(child, (*context, (first, col(j + 1))))
            child = ends[child]

    split(0, ())
    return out


@dataclass
class Pass:
    """Rows of flattened trees run in one forward pass (``trees[r]``: the trees of row ``r``)."""

    trees: list[list[Flat]]
    width: int

    @property
    def tokens(self) -> int:
        return sum(f.size for row in self.trees for f in row)


#: a row may grow to this many row targets: longer rows waste less at their ends and at cuts, while
#: attention over a row's masked columns grows with its length
ROW_SPAN = 4
#: row counts tried by :func:`layout`, from the fewest rows the longest allowed length gives
ROW_TRIES = 4
#: leaves a row's end may move back to fall where a cut repeats fewer shared tokens
LOOK_BACK = 16


def layout(tree: list[Node], target: int, budget: int, max_rows: int) -> list[Pass]:
    """The passes of a prefix tree: its leaves, depth first, cut into rows of about equal length.

    A row holds a run of consecutive leaves with each one's ancestors written once (a copy of a shared
    segment per row it reaches into), so the only waste is the rows' unequal ends and the shared
    segments repeated where a cut falls inside a tree. Of the row lengths from ``target`` (at least the
    longest sequence) to :data:`ROW_SPAN` x ``target`` (within ``budget``), the one that runs the fewest
    positions wins (the shorter on a tie). Rows go into passes of at most ``max_rows`` rows and
    ``budget`` positions. Depends only on the tree, which depends only on the set of rows."""
    chains = _chains(tree)
    if not chains:
        return []
    cuts = _best_cut(*_costs(chains), target, budget, max_rows)
    rows = [[flatten(n) for n in _row_trees(chains[a:b])] for a, b in zip(cuts, cuts[1:] + [len(chains)])]
    return _passes([(row, sum(f.size for f in row)) for row in rows], budget, max_rows)


def _best_cut(fresh: np.ndarray, cont: np.ndarray, target: int, budget: int, max_rows: int) -> list[int]:
    """The first leaf of each row, for the row length that runs the fewest positions. Tried: the longest
    allowed, and for the fewest rows it gives and :data:`ROW_TRIES` - 1 more, the even split of the
    stream, then (twice) the even split with as many repeated shared tokens per cut as that cut had."""
    lo = max(int(fresh.max()), min(target, budget))
    hi = max(lo, min(ROW_SPAN * target, budget))
    fewest = -(-int(cont.sum()) // hi)
    best: tuple[int, int, list[int]] | None = None
    seen: set[int] = set()
    for n_rows in range(fewest, fewest + ROW_TRIES):
        cap = hi if n_rows == fewest else -(-int(cont.sum()) // n_rows)
        for _ in range(3):
            cap = min(hi, max(lo, cap))
            if cap in seen:
                break
            seen.add(cap)
            starts, fills = _cut(fresh, cont, cap)
            run = sum(len(p.trees) * p.width for p in _passes([([], f) for f in fills.tolist()], budget, max_rows))
            if best is None or (run, cap) < best[:2]:
                best = (run, cap, starts)
            if len(fills) < 2:
                break
            per_cut = (int(fills.sum()) - int(cont.sum())) / (len(fills) - 1)  # shared tokens a cut repeats
            cap = math.ceil((int(cont.sum()) + (n_rows - 1) * per_cut) / n_rows)
    assert best is not None
    return best[2]


def _chains(tree: list[Node]) -> list[tuple[Node, ...]]:
    """Every leaf's path from its top-level node, depth first."""
    out: list[tuple[Node, ...]] = []

    def walk(node: Node, chain: tuple[Node, ...]) -> None:
        chain = chain + (node,)
        if node.is_leaf:
            out.append(chain)
        for child in node.children:
            walk(child, chain)

    for node in tree:
        walk(node, ())
    return out


def _costs(chains: list[tuple[Node, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """Per leaf: the tokens it adds to a row it opens (its whole sequence) and to a row that holds the
    leaf before it (what its path does not share with that leaf's)."""
    fresh = np.fromiter((ch[-1].end for ch in chains), dtype=np.int64, count=len(chains))
    cont = fresh.copy()
    for i in range(1, len(chains)):
        prev, ch, k = chains[i - 1], chains[i], 0
        while k < len(prev) and prev[k] is ch[k]:
            k += 1
        cont[i] -= ch[k].start
    return fresh, cont


def _cut(fresh: np.ndarray, cont: np.ndarray, cap: int) -> tuple[list[int], np.ndarray]:
    """Greedy cut of the leaf stream into rows of at most ``cap`` tokens (a longer sequence alone):
    the first leaf of each row, and each row's tokens. Where a leaf does not fit, the cut goes before
    whichever of the last :data:`LOOK_BACK` leaves wastes least: the room left in the row plus the
    shared tokens the next row repeats (a cut between two trees repeats nothing)."""
    fr, co = fresh.tolist(), cont.tolist()
    starts, start, after = [0], 0, [fr[0]]  # after[k]: the row's tokens up to its k-th leaf
    i = 1
    while i < len(fr):
        if after[-1] + co[i] <= cap:
            after.append(after[-1] + co[i])
            i += 1
            continue
        best, least = i, cap - after[-1] + fr[i] - co[i]
        for j in range(i - 1, max(start, i - LOOK_BACK), -1):
            waste = cap - after[j - 1 - start] + fr[j] - co[j]
            if waste < least:
                best, least = j, waste
        starts.append(best)
        start, after, i = best, [fr[best]], best + 1
    csum = np.concatenate([[0], np.cumsum(cont)])
    s = np.asarray(starts)
    e = np.append(s[1:], len(cont))
    return starts, fresh[s] + csum[e] - csum[s + 1]


def _row_trees(chains: list[tuple[Node, ...]]) -> list[Node]:
    """The trees of one row: its leaves under copies of their ancestors, each copy written once."""
    tops: list[Node] = []
    stack: list[tuple[Node, Node]] = []  # (node of the tree, its copy in this row)
    for ch in chains:
        k = 0
        while k < len(stack) and stack[k][0] is ch[k]:
            k += 1
        del stack[k:]
        for node in ch[k:-1]:
            twin = Node(start=node.start, end=node.end, ids=node.ids)
            (stack[-1][1].children if stack else tops).append(twin)
            stack.append((node, twin))
        (stack[-1][1].children if stack else tops).append(ch[-1])
    return tops


def pack(flats: list[Flat], target: int, budget: int, max_rows: int) -> list[Pass]:
    """Whole trees into rows of about ``target`` tokens (at least the longest tree), best fit, largest
    first; rows into passes of at most ``max_rows`` rows and ``budget`` padded tokens (after an
    out-of-memory error, the rows not yet run are packed again this way with the lowered caps).
    Depends only on the trees and their order in ``flats``."""
    base = max([target] + [f.size for f in flats])
    return _pack_rows(flats, base, budget, max_rows) if flats else []


def _pack_rows(flats: list[Flat], cap: int, budget: int, max_rows: int) -> list[Pass]:
    rows: list[list[Flat]] = []
    fill: list[int] = []
    room: list[tuple[int, int]] = []  # (space left, row index), sorted: the best fit is a bisection away
    for i in sorted(range(len(flats)), key=lambda i: (-flats[i].size, i)):
        f = flats[i]
        k = bisect.bisect_left(room, (f.size, -1))
        if k < len(room):
            left, r = room.pop(k)
        else:
            r, left = len(rows), cap
            rows.append([])
            fill.append(0)
        rows[r].append(f)
        fill[r] += f.size
        if left - f.size > 0:
            bisect.insort(room, (left - f.size, r))
    return _passes(list(zip(rows, fill)), budget, max_rows)


def _passes(rows: list[tuple[list[Flat], int]], budget: int, max_rows: int) -> list[Pass]:
    """``(row, tokens)`` into passes, the fullest rows first: each pass as wide as its first row, at
    most ``max_rows`` rows (and :data:`MAX_ROWS`) and ``budget`` positions."""
    passes: list[Pass] = []
    for r in sorted(range(len(rows)), key=lambda r: (-rows[r][1], r)):
        last = passes[-1] if passes else None
        if (last is not None and len(last.trees) < min(max_rows, MAX_ROWS)
                and (len(last.trees) + 1) * last.width <= budget):
            last.trees.append(rows[r][0])
        else:
            passes.append(Pass([rows[r][0]], rows[r][1]))
    return passes


@dataclass
class PassArrays:
    """A pass's ``[rows, width]`` int64 arrays (ids, positions, node numbers, subtree ends; padding
    has a node of its own) and where each node sits: ``(node, row, column of its first token)``."""

    ids: np.ndarray
    pos: np.ndarray
    pre: np.ndarray
    end: np.ndarray
    places: list[tuple[Node, int, int]]
    computed: int
    padded: int
    attended: int
    trees: int
    #: per row its attention blocks (:func:`tree_blocks`)
    blocks: list[list[Block]] = field(default_factory=list)


def tree_blocks(row: list[Flat], block_min: int | None = None) -> list[Block]:
    """A row's attention blocks (its trees' :attr:`Flat.blocks` at their columns): the queries of a block see
    keys among its context spans and its own columns only, so attention over those keys equals the row's.
    Neighbouring blocks with the same context (whole small trees have none) merge while shorter than
    ``block_min``. Padding columns are in no block.

    >>> stem = (0, 50)
    >>> f = Flat(np.zeros(360), *[np.zeros(0)] * 3, [], 0, [(0, 50, ()), (50, 90, (stem,)), (90, 300, (stem,)),
    ...                                                    (300, 360, (stem,))])
    >>> tree_blocks([f, f], block_min=128)[:3]
    [(0, 50, ()), (50, 300, ((0, 50),)), (300, 360, ((0, 50),))]
    >>> tree_blocks([f, f], block_min=128)[3]
    (360, 410, ())
    """
    block_min = BLOCK_MIN if block_min is None else block_min
    blocks: list[Block] = []
    col = 0
    for f in row:
        for s, e, ctx in f.blocks:
            ctx = tuple((col + a, col + b) for a, b in ctx)
            if blocks and blocks[-1][2] == ctx and blocks[-1][1] == col + s and blocks[-1][1] - blocks[-1][0] < block_min:
                blocks[-1] = (blocks[-1][0], col + e, ctx)
            else:
                blocks.append((col + s, col + e, ctx))
        col += f.size
    return blocks


def arrays(p: Pass, pad_id: int) -> PassArrays:
    """The integer inputs of one pass (node numbers are unique within a row)."""
    n_rows, width = len(p.trees), p.width
    ids = np.full((n_rows, width), pad_id, dtype=np.int64)
    pos = np.zeros((n_rows, width), dtype=np.int64)
    # padding: node numbers past every tree's, one per column, so a pad token sees itself only
    pre = np.broadcast_to(np.arange(width, dtype=np.int64) + (1 << 40), (n_rows, width)).copy()
    end = pre + 1
    places: list[tuple[Node, int, int]] = []
    for r, row in enumerate(p.trees):
        col = base = 0
        for f in row:
            ids[r, col : col + f.size] = f.ids
            pos[r, col : col + f.size] = f.pos
            pre[r, col : col + f.size] = f.pre + base
            end[r, col : col + f.size] = f.end + base
            places.extend((node, r, col + off) for node, off in f.places)
            col += f.size
            base += f.n_nodes
    computed = p.tokens
    # a real token attends to its whole sequence so far (positions 0..pos), a pad token to itself
    attended = int((pos + 1)[pre < (1 << 40)].sum()) + (n_rows * width - computed)
    return PassArrays(ids, pos, pre, end, places, computed, n_rows * width - computed, attended,
                      sum(len(row) for row in p.trees), [tree_blocks(row) for row in p.trees])


def subtree_tokens(node: Node) -> int:
    """Tokens a node's subtree writes into a row."""
    return node.width + sum(subtree_tokens(c) for c in node.children)
