"""Where a packed pass reads: the scored positions and target tokens of every leaf, as integer arrays built
with whole-array operations, and the one host-to-device copy of a call's integer inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import torch

from probe.scoring.engine.batching import Node
from probe.scoring.engine.rows import Row


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
    """The scored positions of every leaf in ``places`` (label position first, then each scored token's),
    built with whole-array operations: a Python step per leaf, none per position."""
    leaves = [(node, r, col) for node, r, col in places if node.is_leaf]
    rows = [node.row for node, _, _ in leaves]
    i64 = np.int64
    n_lab = np.fromiter((len(row.label_ids) for row in rows), i64, len(rows))
    length = np.fromiter((len(row.ids) for row in rows), i64, len(rows))
    start = np.fromiter((node.start for node, _, _ in leaves), i64, len(rows))
    col = np.fromiter((c for _, _, c in leaves), i64, len(rows))
    first = np.maximum(np.fromiter((row.score_from for row in rows), i64, len(rows)), start + 1)
    n_tok = np.maximum(length - first, 0)
    has = (n_lab > 0).astype(i64)
    n_pos, n_pair = has + n_tok, n_lab + n_tok
    at_pos, at_pair = _starts(n_pos), _starts(n_pair)
    local = _local(n_tok)
    tok_at = np.repeat(at_pos + has, n_tok) + local  # each scored token's position index
    pos_col = np.empty(int(n_pos.sum()), i64)
    pos_col[tok_at] = np.repeat(col + first - 1 - start, n_tok) + local
    pos_col[at_pos[has > 0]] = (col + length - 1 - start)[has > 0]  # the label position: the last token's
    pair_pos = np.empty(int(n_pair.sum()), i64)
    pair_tok = np.empty_like(pair_pos)
    lab_pairs = np.repeat(at_pair, n_lab) + _local(n_lab)
    tok_pairs = np.repeat(at_pair + n_lab, n_tok) + local
    pair_pos[lab_pairs] = np.repeat(at_pos, n_lab)
    pair_pos[tok_pairs] = tok_at
    pair_tok[lab_pairs] = np.fromiter(chain.from_iterable(row.label_ids for row in rows), i64, len(lab_pairs))
    pair_tok[tok_pairs] = np.fromiter(chain.from_iterable(row.ids[f:] for row, f in zip(rows, first.tolist())), i64,
                                      len(tok_pairs))
    pos_row = np.repeat(np.fromiter((r for _, r, _ in leaves), i64, len(rows)), n_pos)
    table = [(row, bool(row.label_ids), p, q) for row, p, q in zip(rows, n_pos.tolist(), n_pair.tolist())]
    return ReadPlan(rows, pos_row, pos_col, pair_pos, pair_tok, table)


def _starts(counts: np.ndarray) -> np.ndarray:
    """Where each of consecutive blocks of ``counts`` items begins."""
    return np.cumsum(counts) - counts


def _local(counts: np.ndarray) -> np.ndarray:
    """``0..n-1`` for each ``n`` in ``counts``, concatenated."""
    total = int(counts.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(_starts(counts), counts)


def upload(parts: list[np.ndarray], device: Any) -> list[torch.Tensor]:
    """int64 arrays moved to ``device`` in one host-to-device copy, handed back as views."""
    flat = np.concatenate([a.ravel() for a in parts]) if parts else np.zeros(0, np.int64)
    moved = torch.from_numpy(flat).to(device)
    out, at = [], 0
    for a in parts:
        out.append(moved[at : at + a.size].view(a.shape))
        at += a.size
    return out
