"""The packed pass's planning, by hand: flattening, the tree mask, packing, splitting, the read plan."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probe.scoring.engine.batching import build_tree
from probe.scoring.engine import Row
from probe.scoring.engine.packed import MAX_ROWS, Pass, arrays, flatten, layout, pack, row_tokens, subtree_tokens
from probe.scoring.engine.attention import tree_mask
from probe.scoring.engine.read_plan import read_plan

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


def _leaves_of(passes):
    return sorted((n.row.ids, n.start) for p in passes for row in p.trees for f in row for n, _ in f.places
                  if n.is_leaf)


def test_layout_cuts_a_long_tree_into_even_rows_with_its_prefix_in_each():
    shared = tuple(range(100, 120))  # 20 shared tokens, then 10 leaves of 3
    rows = [Row(shared + (k, k + 1, k + 2), 21) for k in range(10)]
    [root] = build_tree(rows, min_shared=1)
    assert subtree_tokens(root) == 20 + 10 * 3
    passes = layout([root], 26, 1000, 64)  # rows may grow to 4 x 26 = 104 tokens: the 50 fit in one
    assert [[f.size for f in row] for p in passes for row in p.trees] == [[50]]
    passes = layout([root], 10, 1000, 64)  # rows of at most 40: the tree is cut once, 5 leaves a row
    assert len(passes) == 1 and [[f.size for f in row] for row in passes[0].trees] == [[35], [35]]
    assert passes[0].width == 35  # 20 shared + 5 x 3 in each row: 70 positions, no padding
    assert _leaves_of(passes) == sorted((r.ids, 20) for r in rows)  # every leaf once, from position 20
    for row in passes[0].trees:
        assert row[0].pos.tolist()[:20] == list(range(20))  # the prefix, again, at 0..19 in each row
    assert root.children and all(n.is_leaf for n in root.children)  # the tree itself is left as it was


def test_layout_cuts_between_trees_rather_than_inside_one():
    # two trees of 20 shared + 2 x 3 (26 each) and a lone row of 10: rows of at most 40 (4 x 10)
    rows = [Row(tuple(range(b, b + 20)) + (k, k + 1, k + 2), 21) for b in (100, 200) for k in range(2)]
    rows.append(Row(tuple(range(300, 310)), 9))
    tree = build_tree(rows, min_shared=1)
    passes = layout(tree, 10, 1000, 64)
    sizes = sorted(sorted(f.size for f in row) for p in passes for row in p.trees)
    assert sizes == [[10, 26], [26]]  # no shared segment written twice
    assert _leaves_of(passes) == sorted((r.ids, 20 if len(r.ids) == 23 else 0) for r in rows)


def test_layout_respects_the_budget_and_row_cap_and_ignores_order():
    rows = [Row(tuple(np.random.default_rng(k).integers(0, 50, 6 + k % 5)), 6) for k in range(30)]
    a = layout(build_tree(rows, min_shared=1), 16, 128, 3)
    b = layout(build_tree(rows[::-1], min_shared=1), 16, 128, 3)
    shape = lambda ps: [[[f.ids.tolist() for f in row] for row in p.trees] for p in ps]  # noqa: E731
    assert shape(a) == shape(b)
    assert all(len(p.trees) <= 3 and len(p.trees) * p.width <= 128 for p in a)
    assert len(_leaves_of(a)) == len({r.ids for r in rows})
    assert layout([], 16, 128, 3) == []


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


def test_byte_keys_sort_as_the_token_tuples_and_neighbours_share_exact_prefixes():
    from probe.scoring.engine.batching import _neighbours, token_bytes

    rng = np.random.default_rng(3)
    seqs = [tuple(int(x) for x in rng.integers(0, 3, rng.integers(0, 6))) for _ in range(200)]
    seqs += [(70000, 1), (65535, 2), (1 << 31, 0)]  # ids past two bytes, and a large one
    assert sorted(seqs, key=token_bytes) == sorted(seqs)
    rows = [Row(s, 0) for s in sorted(set(seqs)) if s]
    got = _neighbours(rows).tolist()
    want = []
    for a, b in zip(rows, rows[1:]):
        k = 0
        while k < min(len(a.ids), len(b.ids)) and a.ids[k] == b.ids[k]:
            k += 1
        want.append(k)
    assert got == want
    # by hand: (1, 2) is a prefix of (1, 2, 3); (1, 2, 3) and (1, 2, 4) share two tokens; (5,) shares none
    hand = [Row((1, 2), 0), Row((1, 2, 3), 0), Row((1, 2, 4), 0), Row((5,), 0)]
    assert _neighbours(hand).tolist() == [2, 2, 0]


def test_the_prefix_tree_does_not_depend_on_the_comparison_block(monkeypatch):
    from probe.scoring.engine import batching

    rng = np.random.default_rng(5)
    rows = [Row(tuple(int(x) for x in rng.integers(0, 3, 12)), 10) for _ in range(60)]
    shape = lambda nodes: [(n.start, n.end, shape(n.children)) for n in nodes]  # noqa: E731
    whole = shape(batching.build_tree(rows, min_shared=1))
    monkeypatch.setattr(batching._Shared, "BLOCK", 3)  # neighbours compared 3 rows at a time
    assert shape(batching.build_tree(rows, min_shared=1)) == whole


def test_sdpa_preference_is_applied_and_none_is_a_no_op():
    """The packed pass's attention preference really restricts SDPA: on the CPU the memory-efficient kernel
    does not exist, so preferring it alone leaves no backend, while MATH and no preference both run."""
    import torch.nn.functional as F

    from probe.scoring.engine import PACKED_SDPA_BACKENDS, sdpa_preference

    q = torch.randn(1, 2, 4, 8)
    with sdpa_preference(None):
        ref = F.scaled_dot_product_attention(q, q, q)
    with sdpa_preference(("MATH",)):
        assert torch.allclose(F.scaled_dot_product_attention(q, q, q), ref)
    with pytest.raises(RuntimeError), sdpa_preference(("EFFICIENT_ATTENTION",)):
        F.scaled_dot_product_attention(q, q, q)
    assert PACKED_SDPA_BACKENDS[-1] == "MATH"  # a last resort is always there


def test_tree_block_mask_sees_exactly_what_the_dense_tree_mask_sees():
    """The FlexAttention form of the tree mask: its mask function, at every (query, key) pair of a packed
    row with padding, agrees with the dense additive mask."""
    from probe.scoring.engine.attention import tree_block_mask

    rows = [Row(tuple(np.random.default_rng(k).integers(0, 9, 5 + k % 4)), 3) for k in range(12)]
    [p] = pack([flatten(n) for n in build_tree(rows, min_shared=1)], 64, 1024, 8)
    a = arrays(p, pad_id=0)
    pre, end, pos = (torch.from_numpy(x) for x in (a.pre, a.end, a.pos))
    dense = tree_mask(pre, end, pos, torch.float32)[:, 0] == 0
    bm = tree_block_mask(pre, end)
    b, q, kv = torch.meshgrid(*(torch.arange(n) for n in dense.shape), indexing="ij")
    assert torch.equal(bm.mask_mod(b, None, q, kv), dense)
    assert a.padded > 0 and dense.sum() < dense.numel() / 2  # a row with padding, most pairs hidden


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.compile's own imports warn
def test_flex_attention_packed_pass_equals_the_sdpa_pass():
    """Scores with the packed pass's FlexAttention kernel equal the dense-mask pass's (float32, tiny
    model); the model's own attention implementation is restored afterwards."""
    from probe.scoring import Scorer
    from probe.scoring.requests import ContinuationRequest
    from tests.tiny import tiny_lm

    lm = tiny_lm()
    reqs = [ContinuationRequest(id=str(k), prompt=f"Question {k}: who was it, in the end?",
                                options=(" the grandson", " the grandfather", " cannot be determined"))
            for k in range(4)]
    ref = Scorer(lm, batch_size=16).score(reqs)
    scorer = Scorer(lm, batch_size=16)
    scorer.engine.attention_kernel = "flex"
    got = scorer.score(reqs)
    assert scorer.engine.forward_passes == 1
    assert lm.model.config._attn_implementation == "sdpa"
    a = [x for r in ref for x in r.logprobs]
    b = [x for r in got for x in r.logprobs]
    assert len(a) == 12 and max(abs(x - y) for x, y in zip(a, b)) < 1e-4


@pytest.mark.parametrize("split,block_min", [(128, 64), (4, 2), (1, 1), (3, 100)])
def test_attention_blocks_hold_every_key_a_query_sees(monkeypatch, split, block_min):
    """The blocks of a packed pass (random trees, cut rows, padding): every real column is the query of
    exactly one block, and every key the tree mask lets it see is among that block's context and own
    columns, so attention over those keys is the row's attention."""
    import probe.scoring.engine.packed as packed

    monkeypatch.setattr(packed, "BLOCK_SPLIT", split)
    rng = np.random.default_rng(split)
    rows = [Row(tuple(rng.integers(0, 4, int(rng.integers(3, 12)))), 2) for _ in range(40)]
    for p in layout(build_tree(rows, min_shared=1), 24, 4096, 64):
        a = arrays(p, pad_id=0)
        t = lambda x: torch.from_numpy(x)  # noqa: E731
        seen = (tree_mask(t(a.pre), t(a.end), t(a.pos), torch.float32)[:, 0] == 0).numpy()
        for r, row in enumerate(p.trees):
            owner = np.full(p.width, -1)
            for k, (s, e, ctx) in enumerate(packed.tree_blocks(row, block_min)):
                assert (owner[s:e] == -1).all() and all(b <= s for _, b in ctx)
                owner[s:e] = k
                keys = np.zeros(p.width, bool)
                for x, y in (*ctx, (s, e)):
                    keys[x:y] = True
                assert not (seen[r, s:e] & ~keys).any()
            real = sum(f.size for f in row)
            assert (owner[:real] >= 0).all() and (owner[real:] == -1).all()


def test_block_attention_equals_the_whole_row_and_is_the_cpu_default():
    """The packed pass attended block by block (the CPU default for SDPA models) gives the scores of the
    whole-row pass, through the block function, in one pass; the model's implementation is restored."""
    import probe.scoring.engine.attention as attention
    import probe.scoring.engine.packed as packed
    from probe.scoring import Scorer
    from probe.scoring.requests import ContinuationRequest
    from tests.tiny import tiny_lm

    lm = tiny_lm()
    reqs = [ContinuationRequest(id=str(k), prompt=f"Context {k % 2}. Question {k}: who was it, in the end?",
                                options=(" the grandson", " the grandfather", " cannot be determined"))
            for k in range(6)]
    whole = Scorer(lm, batch_size=16)
    whole.engine.attention_kernel = "sdpa"
    ref = whole.score(reqs)
    scorer = Scorer(lm, batch_size=16)
    assert scorer.engine.attention_kernel == "blocks"
    calls = []
    real = attention.block_attention
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(packed, "BLOCK_SPLIT", 8)  # small subtrees: stems and branches get blocks of their own
        mp.setattr(attention, "block_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
        got = scorer.score(reqs)
    assert scorer.engine.forward_passes == 1 and calls
    assert lm.model.config._attn_implementation == "sdpa"
    a = [x for r in ref for x in r.logprobs]
    b = [x for r in got for x in r.logprobs]
    assert len(a) == 18 and max(abs(x - y) for x, y in zip(a, b)) < 1e-5
