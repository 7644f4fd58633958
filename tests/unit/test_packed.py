"""The packed pass's planning, by hand: flattening, the tree mask, packing, splitting, the read plan."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probe.scoring.batching import build_tree
from probe.scoring.engine import Row
from probe.scoring.packed import (MAX_ROWS, Pass, arrays, flatten, pack, read_plan, row_tokens, split_trees,
                                  subtree_tokens, tree_mask)

# two rows sharing (1, 2, 3): the root segment runs once, then each leaf's own tokens
ROWS = [Row((1, 2, 3, 4, 5), 4, (7, 8)), Row((1, 2, 3, 6), 4)]


def _tree():
    return build_tree(ROWS, min_shared=1)


def test_flatten_writes_the_tree_depth_first_with_real_positions():
    [root] = _tree()
    f = flatten(root)
    assert f.ids.tolist() == [1, 2, 3, 4, 5, 6]
    assert f.pos.tolist() == [0, 1, 2, 3, 4, 3]  # the second leaf starts again at position 3
    assert f.pre.tolist() == [0, 0, 0, 1, 1, 2]
    assert f.end.tolist() == [3, 3, 3, 2, 2, 3]  # the root's subtree ends after both leaves
    assert [off for _, off in f.places] == [0, 3, 5]


def test_tree_mask_lets_a_token_see_exactly_its_own_sequence():
    [root] = _tree()
    a = arrays(Pass([[flatten(root)]], 8), pad_id=0)  # a row of 8: two pad tokens at its end
    t = lambda x: torch.from_numpy(x)  # noqa: E731
    mask = tree_mask(t(a.pre), t(a.end), t(a.pos), torch.float32)
    seen = (mask[0, 0] == 0).int().tolist()
    width = a.ids.shape[1]
    assert width == 8 and a.padded == 2 and a.computed == 6
    want = [[1, 0, 0, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0, 0, 0],
            [1, 1, 1, 1, 0, 0, 0, 0],
            [1, 1, 1, 1, 1, 0, 0, 0],
            [1, 1, 1, 0, 0, 1, 0, 0],  # token 6 sees the root, not its sibling's 4, 5
            [0, 0, 0, 0, 0, 0, 1, 0],  # padding sees itself only
            [0, 0, 0, 0, 0, 0, 0, 1]]
    assert seen == want
    # every real token attends to positions 0..pos, a pad to itself
    assert a.attended == sum(p + 1 for p in [0, 1, 2, 3, 4, 3]) + 2
    assert mask.min().item() == torch.finfo(torch.float32).min


def test_a_sliding_window_cuts_by_position_distance():
    [root] = _tree()
    a = arrays(pack([flatten(root)], 6, 64, 4)[0], pad_id=0)
    t = lambda x: torch.from_numpy(x)  # noqa: E731
    seen = (tree_mask(t(a.pre), t(a.end), t(a.pos), torch.float32, window=2)[0, 0] == 0).int().tolist()
    assert seen[4] == [0, 0, 0, 1, 1, 0]  # position 4 sees positions 3 and 4
    assert seen[5] == [0, 0, 1, 0, 0, 1]  # position 3 (second leaf) sees position 2 and itself


def test_pack_fills_rows_best_fit_and_respects_budget_and_row_caps():
    trees = [flatten(n) for n in build_tree([Row(tuple(range(k * 10, k * 10 + n)), n) for k, n in
                                             enumerate([5, 4, 3, 3, 1])], min_shared=1)]
    passes = pack(trees, 8, 64, 4)
    assert sum(p.tokens for p in passes) == 16
    assert all(len(p.trees) <= 4 and len(p.trees) * p.width <= 64 for p in passes)
    rows = [sorted(f.size for f in row) for p in passes for row in p.trees]
    assert sorted(map(sum, rows)) == [8, 8]  # 5+3 and 4+3+1: no padding at all
    one_row = pack(trees, 8, 64, 1)
    assert all(len(p.trees) == 1 for p in one_row) and len(one_row) == 2
    assert MAX_ROWS < 65_536


def test_pack_depends_only_on_the_trees():
    rows = [Row(tuple(np.random.default_rng(k).integers(0, 50, 6 + k % 5)), 6) for k in range(30)]
    a = pack([flatten(n) for n in build_tree(rows, min_shared=1)], 16, 128, 8)
    b = pack([flatten(n) for n in build_tree(rows[::-1], min_shared=1)], 16, 128, 8)
    shape = lambda ps: [[[f.ids.tolist() for f in row] for row in p.trees] for p in ps]  # noqa: E731
    assert shape(a) == shape(b)


def test_split_trees_keeps_every_leaf_under_a_copy_of_its_prefix():
    shared = tuple(range(100, 120))
    rows = [Row(shared + (k, k + 1, k + 2), 21) for k in range(10)]
    [root] = build_tree(rows, min_shared=1)
    assert subtree_tokens(root) == 20 + 10 * 3
    parts = split_trees([root], 26)
    assert len(parts) > 1 and all(subtree_tokens(p) <= 26 + 20 for p in parts)
    leaves = sorted((c.row.ids, c.start) for p in parts for c in (p.children or [p]))
    assert [ids for ids, _ in leaves] == sorted(r.ids for r in rows)
    for p in parts:
        assert p.start == 0 and flatten(p).pos.tolist()[:20] == list(range(20))  # the prefix, again, at 0..19
    assert split_trees([root], 1000) == [root]  # small enough: untouched


def test_read_plan_reads_labels_first_then_each_scored_token():
    rows = [Row((1, 2, 3, 4, 5), 4, (7, 8)), Row((1, 2, 3, 6), 3)]
    [root] = build_tree(rows, min_shared=1)  # shared (1, 2): row 2's first scored token is its 3rd
    f = flatten(root)
    assert f.ids.tolist() == [1, 2, 3, 6, 3, 4, 5]  # row 2 cannot share token 3: its leaf comes first
    plan = read_plan(arrays(Pass([[f]], 7), pad_id=0).places)
    assert [r.ids for r in plan.rows] == [(1, 2, 3, 6), (1, 2, 3, 4, 5)]
    # row 2: token 6 read at the column of its input token 3 (column 2); row 1: its label position is its
    # last token's column (6), then token 5 read at its input's column (5)
    assert plan.pos_col.tolist() == [2, 6, 5] and plan.pos_row.tolist() == [0, 0, 0]
    assert plan.pair_pos.tolist() == [0, 1, 1, 2] and plan.pair_tok.tolist() == [6, 7, 8, 5]
    assert plan.leaves == [(rows[1], False, 1, 1), (rows[0], True, 2, 3)]


@pytest.mark.parametrize("d_model,budget,want", [(64, 8192, 256), (576, 8192, 576), (4096, 8192, 2048),
                                                 (4096, 100, 100)])
def test_row_length_follows_the_model_width(d_model, budget, want):
    assert row_tokens(d_model, budget) == want
