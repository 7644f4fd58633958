"""A model spread over several devices (``device_map``) and quantised single-device loads, mocked on the CPU.

No GPU runs here, so a two-device placement is mocked: the layers' KV caches
live on two devices (``meta`` standing for ``cuda:0``, ``cpu`` for ``cuda:1``)
and a cache layer refuses indices on another device than its own, as CUDA
does ("indices should be either on cpu or on the same device as the indexed
tensor"; the mock is stricter: the very same device). What stays to be proven
on real GPUs is listed in docs/parallel.md.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from probe.scoring.engine import Engine


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread):
    """One torch thread for the module."""


def _strict(monkeypatch):
    """Cache layers refuse indices that are not on their own device (what CUDA does across GPUs)."""
    from transformers.cache_utils import DynamicLayer

    original = DynamicLayer.batch_select_indices

    def checked(self, indices):
        if self.get_seq_length() > 0 and indices.device != self.keys.device:
            raise RuntimeError(f"indices on {indices.device}, cache on {self.keys.device}")
        return original(self, indices)

    monkeypatch.setattr(DynamicLayer, "batch_select_indices", checked)


def _two_device_cache(tiny_lm):
    """A real prefix cache of the tiny model, its layer 0 moved to 'meta' (cuda:0), layer 1 left on cpu (cuda:1)."""
    engine = Engine(tiny_lm.model, pad_id=0)
    cache, mask = engine.run_prefixes([(5, 6, 7), (8, 9)])
    layer0 = cache.layers[0]
    layer0.keys, layer0.values = layer0.keys.to("meta"), layer0.values.to("meta")
    return engine, cache, mask


def test_cache_rows_are_selected_on_each_layers_device(tiny_lm, monkeypatch):
    """Fails on the engine that moved the indices to the first parameter's device for every layer."""
    _strict(monkeypatch)
    engine, cache, mask = _two_device_cache(tiny_lm)
    want_keys = cache.layers[1].keys[torch.tensor([1, 0, 1])].clone()
    engine.device = torch.device("meta")  # the input embedding lives on 'cuda:0'
    seen = {}

    def fake_decoder(**kwargs):  # the forward itself would need the real GPUs; the cache it gets is checked
        seen.update(kwargs)
        n, w = kwargs["input_ids"].shape
        return SimpleNamespace(last_hidden_state=torch.zeros(n, w, 4))

    monkeypatch.setattr(engine, "_decoder", fake_decoder)
    engine.run_segments([((5, 6, 7, 1), 3), ((8, 9, 2), 2), ((5, 6, 7, 3), 3)], cache=cache, prefix_mask=mask,
                        cache_rows=[1, 0, 1])
    sub = next(v for k, v in seen.items() if "past" in k or "cache" in k)
    assert sub.layers[0].keys.device.type == "meta" and sub.layers[0].keys.shape[0] == 3
    assert sub.layers[1].keys.device.type == "cpu" and torch.equal(sub.layers[1].keys, want_keys)
    assert cache.layers[1].keys.shape[0] == 2  # the shared cache is left intact
    assert seen["attention_mask"].shape == (3, 3 + 1)  # prefix width 3, one new token per row


def test_select_rows_keeps_the_shared_cache_and_reuses_one_index_per_device(tiny_lm, monkeypatch):
    from probe.scoring.engine import select_rows

    _strict(monkeypatch)
    engine = Engine(tiny_lm.model, pad_id=0)
    cache, _ = engine.run_prefixes([(5, 6, 7), (8, 9, 4)])
    before = [layer.keys.clone() for layer in cache.layers]
    sub = select_rows(cache, torch.tensor([1]))
    assert all(torch.equal(a, layer.keys) for a, layer in zip(before, cache.layers))
    assert all(torch.equal(layer.keys, b[1:2]) for layer, b in zip(sub.layers, before))


def test_scores_with_the_strict_mock_equal_plain_ones(tiny_lm, monkeypatch):
    """The whole scorer (prefix sharing on) under the per-device rule: same numbers as without it."""
    from probe.scoring import LabelRequest, Scorer

    reqs = [LabelRequest(id=f"r{i}", prompt=f"Person A has item {i // 2}. Who?", labels=("A", "B", "C"))
            for i in range(6)]
    plain = Scorer(tiny_lm, batch_size=2).score(reqs)
    _strict(monkeypatch)
    strict = Scorer(tiny_lm, batch_size=2).score(reqs)
    assert [r.logprobs for r in strict] == [r.logprobs for r in plain]


def test_input_device_is_the_embeddings_not_the_first_parameter():
    from probe.scoring.engine import input_device

    class Split(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first = torch.nn.Parameter(torch.zeros(1, device="meta"))  # e.g. a rotary buffer placed first
            self.emb = torch.nn.Embedding(4, 2)

        def get_input_embeddings(self):
            return self.emb

    assert next(Split().parameters()).device.type == "meta"
    assert input_device(Split()).type == "cpu"


# --------------------------------------------------------------------------- quantised loads


@pytest.fixture
def fake_cuda(monkeypatch, tiny_lm):
    """A machine with 4 GPUs as far as the loader can tell; from_pretrained returns the tiny model."""
    import probe.models.loader as loader

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    calls = []

    def fake(model_dir, torch_dtype, kwargs, name):
        calls.append(kwargs)
        return tiny_lm.model, tiny_lm.tokenizer

    monkeypatch.setattr(loader, "_from_pretrained", fake)
    return calls


@pytest.mark.parametrize("device,want", [("cuda:1", {"": "cuda:1"}), ("cuda", {"": "cuda:0"}),
                                         ("auto", {"": "cuda:0"}), ("cuda:3", {"": "cuda:3"})])
@pytest.mark.parametrize("bits", ["load_in_8bit", "load_in_4bit"])
def test_quantised_loads_stay_on_the_requested_device(fake_cuda, model_dir, device, want, bits):
    pytest.importorskip("transformers").BitsAndBytesConfig  # the config object only; bitsandbytes is not needed
    from probe.models import load_model

    load_model(str(model_dir), device=device, **{bits: True})
    assert fake_cuda[-1]["device_map"] == want  # not "auto": never spread over every visible GPU


def test_quantised_load_keeps_an_explicit_device_map(fake_cuda, model_dir):
    from probe.models import load_model

    load_model(str(model_dir), device="cuda", load_in_4bit=True, device_map="auto")
    assert fake_cuda[-1]["device_map"] == "auto"


def test_quantised_load_under_a_launcher_takes_the_ranks_gpu(fake_cuda, model_dir, monkeypatch):
    from probe.runs.runner import RunOptions, load

    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("LOCAL_RANK", "2")
    load(str(model_dir), RunOptions(device="cuda", load_in_8bit=True))
    assert fake_cuda[-1]["device_map"] == {"": "cuda:2"}


def test_engine_counts_tokens_computed_against_raw(tiny_lm):
    """Prefix sharing runs a shared prompt once: tokens computed < raw tokens; both and the passes are counted."""
    from probe.scoring import LabelRequest, Scorer

    prompt = "Person A has wrinkles. Person B has smooth skin. Who was not comfortable using the phone?"
    reqs = [LabelRequest(id=f"r{i}", prompt=prompt + f" Item {i}.", labels=("A", "B", "C"))
            for i in range(4)]
    scorer = Scorer(tiny_lm, batch_size=8)
    scorer.score(reqs)
    counts = scorer.engine.counts()
    assert counts["forward_passes"] >= 1
    assert 0 < counts["tokens_computed"] < counts["tokens_raw"]
    raw = sum(len(s.ids) for r in reqs for s in scorer.encode(r).sequences)
    assert counts["tokens_raw"] == raw
