"""parse_exact's frontier passes over one key/value store (probe.scoring.engine.tree_cache): the same next-token
logits as a plain forward over prompt + path, on tiny random models of several architecture families, and the
same enumeration as the cached rows it replaces."""

from __future__ import annotations

import pytest
import torch

from probe.models import LoadedModel
from probe.scoring.engine import Engine, pad_id_of
from probe.scoring.engine.tree_cache import tree_ok
from tests.unit.test_architecture_parity import ARCHITECTURES, _model

TOL = 1e-4

#: the parity test's families with SDPA attention (Gemma 2 has none: it runs eager, and keeps the cached rows)
FAMILIES = sorted(set(ARCHITECTURES) - {"gemma2"})


def _plain(lm: LoadedModel, ids: tuple[int, ...]) -> torch.Tensor:
    with torch.inference_mode():
        return lm.model(input_ids=torch.tensor([list(ids)])).logits[0, -1].float()


@pytest.mark.parametrize("arch", FAMILIES)
def test_frontier_passes_equal_plain_forwards(arch):
    try:
        lm = _model(arch, attn="sdpa")
    except (ValueError, KeyError, ImportError) as exc:  # a family this transformers release does not have
        pytest.skip(f"{arch}: not in this transformers release ({exc})")
    eng = Engine(lm.model, pad_id=pad_id_of(lm.tokenizer))
    prompts = [(5, 9, 11, 3, 14, 6), (7, 2), (12, 4, 4)]
    with torch.inference_mode():
        ext, _ = eng.begin(prompts)
        store = eng.tree_store(ext)
        assert store is not None
        # pass 1: two branches of prompt 0 (one query per slot), one of prompt 2; prompt 1 has none
        first, at1 = eng.extend_tree(store, [8, 10, 9], [0, 0, 2], [[], [], []], [6, 6, 3])
        # pass 2: deeper paths under the first pass's nodes, and a first token of prompt 1
        second, at2 = eng.extend_tree(store, [13, 3, 15, 1], [0, 0, 2, 1], [[at1[0]], [at1[1]], [at1[2]], []],
                                      [7, 7, 4, 2])
        third, _ = eng.extend_tree(store, [2], [0], [[at1[1], at2[1]]], [8])
    want = [prompts[0] + (8,), prompts[0] + (10,), prompts[2] + (9,)]
    want2 = [prompts[0] + (8, 13), prompts[0] + (10, 3), prompts[2] + (9, 15), prompts[1] + (1,)]
    worst = max(float((got - _plain(lm, ids)).abs().max()) for logits, seqs in ((first, want), (second, want2),
                                                                                  (third, [prompts[0] + (10, 3, 2)]))
                for got, ids in zip(logits, seqs))
    assert worst <= TOL, f"{arch}: max |frontier pass - plain forward| = {worst:.3g}"
    assert store.count == 8 and at2 == [3, 4, 5, 6]
    # the hybrid tail's store, from the prompts' exported vectors: the same first pass
    with torch.inference_mode():
        exported = eng.tree_store_of(ext.own(), 9)
        if exported is not None:
            again, _ = eng.extend_tree(exported, [8, 10, 9], [0, 0, 2], [[], [], []], [6, 6, 3])
            assert float((again - first).abs().max()) <= 1e-5


def test_models_it_does_not_compute_keep_the_cached_rows():
    assert tree_ok(_model("llama", attn="sdpa").model)
    assert not tree_ok(_model("llama").model)  # eager: soft-capping and the like live there
    capped = _model("llama", attn="sdpa")
    capped.model.config.attn_logit_softcapping = 50.0  # soft-capped scores (gemma2's, which runs eager anyway)
    assert not tree_ok(capped.model)
    sinks = _model("llama", attn="sdpa")
    sinks.model.model.layers[0].self_attn.sinks = torch.nn.Parameter(torch.zeros(4))  # gpt-oss-style sinks
    assert not tree_ok(sinks.model)
    unknown = _model("llama", attn="sdpa")
    del unknown.model.model.layers[1].self_attn.layer_idx  # an attention module that does not know its layer
    assert not tree_ok(unknown.model)
    eng = Engine(capped.model, pad_id=0)
    with torch.inference_mode():
        ext, _ = eng.begin([(5, 9)])
    assert eng.tree_store(ext) is None  # the engine keeps the cached rows for it


def test_the_enumeration_is_the_same_over_the_store(tiny_lm, monkeypatch):
    """Over the store or with a cache per row: the same nodes, the same masses (float rounding apart), the same
    exported prompt vectors for the hybrid's tail."""
    from probe.scoring.parse.exact import Enumerator, parse_exact
    from probe.scoring.parse.schema import ParseSettings
    from probe.scoring.sampler.sampling import SamplingSpec

    prompts = ["The cat sat on the", "Who was there? Answer:", "A b c d e f g"]

    def first_char(text: str):
        return text.strip()[:1] or None

    out = {}
    for tree in (True, False):
        monkeypatch.setattr(Enumerator, "use_tree", tree)
        out[tree] = parse_exact(tiny_lm, prompts, SamplingSpec(1.0, 0.9), first_char,
                                ParseSettings(4, residual=0.0, max_nodes=300, prune=0.0, batch_size=16, frontier=True))
    for a, b in zip(out[True], out[False]):
        assert a.nodes == b.nodes and abs(a.residual - b.residual) < 1e-6
        assert set(a.probs) == set(b.probs) and all(abs(a.probs[k] - b.probs[k]) < 1e-6 for k in a.probs)
        assert torch.equal(a.prompt_cache[0], b.prompt_cache[0])
    assert max(d.residual for d in out[True]) > 0  # the node cap bit: a frontier was exported
