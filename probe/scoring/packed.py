"""The packed pass: whole prefix trees in one padding-free forward pass, with a tree mask.

Each top-level node of the prefix tree (:mod:`probe.scoring.batching`: a shared
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

Trees are packed side by side into rows (best fit, largest first), rows into
passes up to the token budget: no KV cache is selected, copied or merged, and
the only padding is the tail of each row. A padding token sees itself only (a
row of ``-inf`` would give NaN).

Sliding-window layers see a token only within ``window`` positions; since a
token's visible tokens are its own sequence's, position distance is what the
window measures, so the mask of those layers adds ``pos[i] - pos[j] < window``.
A model with both kinds of layer gets one mask per kind (the ``dict`` form
transformers' hybrid models accept); a model with both kinds that does not
accept that form falls back on the level-by-level path (``docs/scoring.md``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from probe.scoring.batching import Node
from probe.scoring.rows import Row

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

    walk(root, 0)
    lengths = np.array([len(s) for s, _, _ in chunks], dtype=np.int64)
    number = np.repeat(np.arange(len(chunks), dtype=np.int64), lengths)
    starts = np.repeat(np.array([st for _, st, _ in chunks], dtype=np.int64), lengths)
    first = np.repeat(np.cumsum(lengths) - lengths, lengths)
    ids = np.fromiter((t for s, _, _ in chunks for t in s), dtype=np.int64, count=int(lengths.sum()))
    return Flat(ids, starts + np.arange(len(ids)) - first, number, np.asarray(ends, np.int64)[number], places,
                len(places))


@dataclass
class Pass:
    """Rows of flattened trees run in one forward pass (``trees[r]``: the trees of row ``r``)."""

    trees: list[list[Flat]]
    width: int

    @property
    def tokens(self) -> int:
        return sum(f.size for row in self.trees for f in row)


#: row lengths tried, as multiples of the longer of the target and the longest tree: the one that runs
#: the fewest padded positions wins (longer rows hold more trees, so their ends are fuller)
ROW_FACTORS = (1.0, 1.25, 1.5, 2.0)


def pack(flats: list[Flat], target: int, budget: int, max_rows: int) -> list[Pass]:
    """Trees into rows of about ``target`` tokens (at least the longest tree), best fit, largest first;
    rows into passes of at most ``max_rows`` rows and ``budget`` padded tokens. Of the row lengths
    :data:`ROW_FACTORS` allows, the one with the least padding is used. Depends only on the trees and
    their order in ``flats`` (which the prefix tree fixes)."""
    base = max([target] + [f.size for f in flats])
    best: list[Pass] | None = None
    for factor in ROW_FACTORS:
        cap = max(base, min(int(base * factor), budget))
        passes = _pack_rows(flats, cap, budget, max_rows)
        if best is None or _padded(passes) < _padded(best):
            best = passes
    return best or []


def _padded(passes: list[Pass]) -> int:
    return sum(len(p.trees) * p.width - p.tokens for p in passes)


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
    order = sorted(range(len(rows)), key=lambda r: (-fill[r], r))
    passes: list[Pass] = []
    for r in order:
        last = passes[-1] if passes else None
        if (last is not None and len(last.trees) < min(max_rows, MAX_ROWS)
                and (len(last.trees) + 1) * last.width <= budget):
            last.trees.append(rows[r])
        else:
            passes.append(Pass([rows[r]], fill[r]))
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
                      sum(len(row) for row in p.trees))


def tree_mask(pre: torch.Tensor, end: torch.Tensor, pos: torch.Tensor, dtype: torch.dtype,
              window: int | None = None) -> torch.Tensor:
    """The additive ``[rows, 1, width, width]`` mask (0: attend, dtype min: not) from ``[rows, width]``
    node numbers, subtree ends and positions; ``window``: a sliding-window layer's."""
    col = torch.arange(pre.shape[1], device=pre.device)
    q_pre = pre[:, :, None]  # [rows, query, 1]
    seen = (col[None, None, :] <= col[None, :, None]) & (pre[:, None, :] <= q_pre) & (q_pre < end[:, None, :])
    if window is not None:
        seen &= (pos[:, :, None] - pos[:, None, :]) < window
    out = torch.zeros(seen.shape, dtype=dtype, device=pre.device)
    out.masked_fill_(~seen, torch.finfo(dtype).min)
    return out[:, None]


@dataclass
class ReadPlan:
    """Where a pass reads: scored positions ``(row, col)``, the target pairs ``(position, token)``
    (ascending positions), and per leaf ``(row, label targets?, positions, pairs)`` to hand the
    numbers back on the host."""

    rows: list[Row]
    pos_row: np.ndarray
    pos_col: np.ndarray
    pair_pos: np.ndarray
    pair_tok: np.ndarray
    leaves: list[tuple[Row, bool, int, int]] = field(default_factory=list)

    @property
    def n_positions(self) -> int:
        return len(self.pos_row)


def read_plan(places: list[tuple[Node, int, int]]) -> ReadPlan:
    """The scored positions of every leaf in ``places`` (label position first, then each scored token's)."""
    prow, pcol, ppos, ptok, leaves = [], [], [], [], []
    n = 0
    for node, r, col in places:
        if not node.is_leaf:
            continue
        row, s = node.row, node.start
        first = max(row.score_from, s + 1)
        cols = col + np.arange(first - 1 - s, len(row.ids) - 1 - s, dtype=np.int64)
        toks = np.asarray(row.ids[first:], dtype=np.int64)
        if row.label_ids:
            cols = np.concatenate([[col + len(row.ids) - 1 - s], cols])
            pair_pos = np.concatenate([np.full(len(row.label_ids), n), n + 1 + np.arange(len(toks))])
            toks = np.concatenate([np.asarray(row.label_ids, np.int64), toks])
        else:
            pair_pos = n + np.arange(len(toks))
        prow.append(np.full(len(cols), r, dtype=np.int64))
        pcol.append(cols)
        ppos.append(pair_pos.astype(np.int64))
        ptok.append(toks)
        leaves.append((row, bool(row.label_ids), len(cols), len(toks)))
        n += len(cols)
    cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))  # noqa: E731
    return ReadPlan([lf[0] for lf in leaves], cat(prow), cat(pcol), cat(ppos), cat(ptok), leaves)


def upload(parts: list[np.ndarray], device: Any) -> list[torch.Tensor]:
    """int64 arrays moved to ``device`` in one host-to-device copy, handed back as views."""
    flat = np.concatenate([a.ravel() for a in parts]) if parts else np.zeros(0, np.int64)
    moved = torch.from_numpy(flat).to(device)
    out, at = [], 0
    for a in parts:
        out.append(moved[at : at + a.size].view(a.shape))
        at += a.size
    return out


def subtree_tokens(node: Node) -> int:
    """Tokens a node's subtree writes into a row."""
    return node.width + sum(subtree_tokens(c) for c in node.children)


def split_trees(tree: list[Node], cap: int) -> list[Node]:
    """``tree`` with every top-level tree of more than ``cap`` tokens split into trees of about ``cap``
    tokens: groups of a node's children, each under its own copy of the node (the shared segment is
    then computed once per group, not once per call). A row's attention work grows with the square of
    its length, so one call's whole tree (a system prompt shared by every request) must not become one
    row. New nodes are made; the input tree is left as it is."""
    return [part for node in tree for part in _split(node, cap)]


def _split(node: Node, cap: int) -> list[Node]:
    size = subtree_tokens(node)
    if node.is_leaf or size <= cap:
        return [node]
    inner = max(cap - node.width, cap // 2, 1)
    parts = [p for child in node.children for p in _split(child, inner)]
    groups: list[list[Node]] = []
    sizes: list[int] = []
    for p in parts:  # in order: neighbours in the tree (sorted ids) share the most
        n = subtree_tokens(p)
        if groups and sizes[-1] + n <= inner:
            groups[-1].append(p)
            sizes[-1] += n
        else:
            groups.append([p])
            sizes.append(n)
    out = []
    for g in groups:
        if len(g) == 1:  # the node's segment joins its only part's
            p = g[0]
            out.append(Node(start=node.start, end=p.end, ids=p.ids, children=p.children, row=p.row))
        else:
            out.append(Node(start=node.start, end=node.end, ids=node.ids, children=g))
    return out
