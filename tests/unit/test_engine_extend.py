"""The engine's incremental extension (parse_exact's frontier and generation go through it)."""

from __future__ import annotations

import torch

from probe.scoring.engine import Engine, left_pad, pad_id_of

PROMPTS = [(5, 9, 11, 3), (7, 2)]


def _plain(lm, ids):
    """Next-token logits after ``ids`` from the model's own forward, one sequence alone."""
    with torch.inference_mode():
        return lm.model(input_ids=torch.tensor([list(ids)])).logits[0, -1].float()


def test_left_pad_masks_the_pad_and_gives_each_row_its_own_positions():
    ids, mask, pos = left_pad([(5, 9, 11), (7,)], pad_id=0)
    assert ids.tolist() == [[5, 9, 11], [0, 0, 7]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert pos.tolist() == [[0, 1, 2], [0, 0, 0]]


def test_begin_and_extend_equal_plain_forwards(tiny_lm):
    eng = Engine(tiny_lm.model, pad_id=pad_id_of(tiny_lm.tokenizer))
    with torch.inference_mode():
        ext, logits = eng.begin(PROMPTS)
        for b, p in enumerate(PROMPTS):
            assert torch.allclose(logits[b], _plain(tiny_lm, p), atol=1e-5)
        logits = eng.extend(ext, [4, 8])
    assert ext.lengths == [5, 3] and ext.mask.tolist() == [[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]]
    assert torch.allclose(logits[0], _plain(tiny_lm, PROMPTS[0] + (4,)), atol=1e-5)
    assert torch.allclose(logits[1], _plain(tiny_lm, PROMPTS[1] + (8,)), atol=1e-5)


def test_an_extension_rebuilt_from_kept_blocks_gives_the_same_numbers_exactly(tiny_lm):
    eng = Engine(tiny_lm.model, pad_id=pad_id_of(tiny_lm.tokenizer))
    with torch.inference_mode():
        ext, _ = eng.begin(PROMPTS)
        own = ext.own()  # each prompt's keys and values without padding
        assert [o.shape[-2] for o in own] == [4, 2]
        direct = eng.extend(ext, [4, 8])
        step = ext.last()  # the new tokens' keys and values
        again = eng.extension([[own[0]], [own[1]]])
        rebuilt = eng.extend(again, [4, 8])
        assert torch.equal(direct, rebuilt)
        # a third token after blocks (prompt, step): as after the kept cache
        after = eng.extend(ext, [1, 1])
        blocks = eng.extension([[own[b], step[:, :, b].unsqueeze(-2)] for b in range(2)])
        assert torch.equal(after, eng.extend(blocks, [1, 1]))


def test_repeat_shares_one_prompt_pass_across_rows(tiny_lm):
    eng = Engine(tiny_lm.model, pad_id=pad_id_of(tiny_lm.tokenizer))
    with torch.inference_mode():
        ext, logits = eng.begin([PROMPTS[0]])
        ext.repeat(3)
        out = eng.extend(ext, [4, 8, 1])
    assert ext.lengths == [5, 5, 5]
    for b, t in enumerate([4, 8, 1]):
        assert torch.allclose(out[b], _plain(tiny_lm, PROMPTS[0] + (t,)), atol=1e-5)
