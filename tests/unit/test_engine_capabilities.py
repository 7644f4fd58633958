"""What the engine refuses or routes, decided per model: the head check (the engine's logits are the model's own),
capture where the stream is rescaled between blocks, sequences past the attention kernel's safe length (each alone,
the memory-efficient kernel excluded), and a refused family before any weight is read."""

from __future__ import annotations

import json

import pytest
import torch

from probe.errors import ProbeError
from probe.scoring.engine import Engine, pad_id_of


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread):
    """In-process runs use one thread."""


def _fresh_lm():
    from tests.tiny import tiny_lm

    return tiny_lm()


# -- the head check -------------------------------------------------------------------------------------------
def test_a_plain_head_is_the_output_embedding_and_checked_once_per_model():
    lm = _fresh_lm()
    calls = []
    lm.model.register_forward_hook(lambda *a: calls.append(1))
    eng = Engine(lm.model, pad_id=pad_id_of(lm.tokenizer))
    assert eng.head is lm.model.get_output_embeddings() and calls == [1]
    Engine(lm.model, pad_id=pad_id_of(lm.tokenizer))
    assert calls == [1]  # the second engine reuses the verdict


def test_a_prediction_head_before_the_output_embedding_is_found_and_used():
    from tests.unit import _architectures as zoo

    lm = zoo.build("modernbert-decoder")
    eng = Engine(lm.model, pad_id=pad_id_of(lm.tokenizer))
    assert isinstance(eng.head, torch.nn.Sequential) and eng.head[-1] is lm.model.get_output_embeddings()
    ids = torch.tensor([[5, 9, 11, 3]])
    with torch.inference_mode():
        want = lm.model(input_ids=ids).logits[0].float()
        got = eng.logits(eng.decoder(input_ids=ids).last_hidden_state[0])
    assert torch.allclose(got, want, atol=1e-4)


def test_a_head_the_engine_cannot_reproduce_is_refused_in_one_line():
    lm = _fresh_lm()
    forward = lm.model.forward

    def doubled(*args, **kwargs):  # a transform of the logits no module or config key says
        out = forward(*args, **kwargs)
        out.logits = out.logits * 2
        return out

    lm.model.forward = doubled
    with pytest.raises(ProbeError) as info:
        Engine(lm.model, pad_id=pad_id_of(lm.tokenizer))
    line = str(info.value)
    assert "\n" not in line and line.startswith("llama: ") and "head" in line


# -- capture where the stream is rescaled ---------------------------------------------------------------------
@pytest.mark.parametrize("every, refused", [(1, True), (2, True), (3, False), (0, False)])
def test_capture_is_refused_where_the_stream_is_rescaled_within_the_depth(every, refused):
    from transformers import RwkvConfig

    from probe.scoring.engine.capabilities import capabilities

    caps = capabilities(RwkvConfig(num_hidden_layers=2, hidden_size=32, rescale_every=every))
    assert bool(caps.capture) is refused
    if refused:
        assert "rescale_every" in caps.capture


# -- sequences past the kernel's safe length ------------------------------------------------------------------
def _requests():
    from probe.scoring import ContinuationRequest, LabelRequest, PerplexityRequest

    long = "Background: Person A wears a tilak. Person B attends Sunday service. They met at the market. "
    return [LabelRequest("l0", long + "Who? Answer:", ("A", "B")),
            ContinuationRequest("c0", long + "Who? Answer:", ("Person A", "Unknown")),
            LabelRequest("s0", "Yes? Answer:", ("Yes", "No")),
            PerplexityRequest("p0", long)]


@pytest.mark.parametrize("packed", [True, False])
def test_rows_past_the_kernel_limit_run_alone_with_the_efficient_kernel_excluded(monkeypatch, packed):
    from probe.scoring import Scorer
    from probe.scoring.engine import driver as driver_mod
    from probe.scoring.engine.capabilities import LONG_SDPA_BACKENDS
    from tests import reference

    lm = _fresh_lm()
    reqs = _requests()
    want = Scorer(lm, batch_size=4).score(reqs)
    scorer = Scorer(lm, batch_size=4)
    scorer.packed = packed
    limit = 12
    scorer.driver.kernel_limit = limit  # as on a CUDA device, with a limit the test's rows pass
    seen = []
    real = driver_mod.sdpa_preference
    runs = scorer.engine.run_segments

    def preference(names):
        seen.append(names)
        return real(names)

    def run_segments(segments, *args, **kwargs):
        if seen:  # inside the long rows' run: each alone, unpadded, from position 0
            assert len(segments) == 1 and len(segments[0][0]) > limit and segments[0][1] == 0
        return runs(segments, *args, **kwargs)

    monkeypatch.setattr(driver_mod, "sdpa_preference", preference)
    monkeypatch.setattr(scorer.engine, "run_segments", run_segments)
    got = scorer.score(reqs)
    assert seen == [LONG_SDPA_BACKENDS] and "EFFICIENT_ATTENTION" not in LONG_SDPA_BACKENDS
    for w, g in zip(want, got):
        assert reference.result_numbers(g) == pytest.approx(reference.result_numbers(w), abs=1e-5)


def test_no_kernel_for_a_long_row_is_refused_in_one_line(monkeypatch):
    from probe.scoring import Scorer

    lm = _fresh_lm()
    scorer = Scorer(lm, batch_size=4)
    scorer.driver.kernel_limit = 12

    def no_kernel(*args, **kwargs):
        raise RuntimeError("No available kernel. Aborting execution.")

    monkeypatch.setattr(scorer.engine, "run_segments", no_kernel)
    with pytest.raises(ProbeError) as info:
        scorer.score(_requests()[-1:])
    line = str(info.value)
    assert "\n" not in line and line.startswith("llama: a sequence of") and "longer than 12" in line


def test_a_tree_less_some_rows_folds_segments_left_with_one_child():
    from probe.scoring.engine.batching import build_tree
    from probe.scoring.engine.driver import _leaves, _without
    from probe.scoring.engine.rows import Row

    rows = [Row((1, 2, 3, 4, 5, 6), 5), Row((1, 2, 3, 4, 7, 8), 5), Row((9, 9, 9), 2)]
    tree = build_tree(rows, min_shared=2)
    rest = _without(tree, {id(rows[1])})
    assert sorted((n.start, n.row.ids) for n in _leaves(rest)) == [(0, rows[0].ids), (0, rows[2].ids)]
    assert all(n.is_leaf for n in rest)


# -- refused before the weights load --------------------------------------------------------------------------
def test_a_refused_family_is_refused_from_its_config_before_weights_load(tmp_path, capsys):
    from transformers import BartConfig

    from probe.cli import main
    from tests.unit.test_hostile_inputs import _one_line_error

    model = tmp_path / "tiny-bart"
    BartConfig(d_model=16, encoder_layers=1, decoder_layers=1, vocab_size=64).save_pretrained(model)
    assert not any(p.suffix == ".safetensors" for p in model.iterdir())  # no weights: the config decides
    inp = tmp_path / "items.jsonl"
    inp.write_text(json.dumps({"id": "q1", "prompt": "Who?", "options": ["A", "B"]}) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["score", "--model", str(model), "--input", str(inp), "--output", str(out), "--device", "cpu"]) == 1
    _one_line_error(capsys, "bart", "encoder-decoder")
    assert not out.exists()


# -- generation for models whose state padding would enter ----------------------------------------------------
def test_a_stateful_model_generates_in_batches_of_one_prompt_length():
    from probe.scoring.generate import _batches, greedy_generate
    from tests.unit import _architectures as zoo

    lm = zoo.build("falcon_h1")  # attention and state-space layers: padding would enter the state
    prompts = ["Tell me about cats", "Tell me about rats", "Why is the sky blue?", "Tell me about bats"]
    lengths = [len(ids) for _, encs in _batches(lm.tokenizer, prompts, 8) for ids in encs]
    batches = _batches(lm.tokenizer, prompts, 8, one_length=True)
    assert len(set(lengths)) > 1 and all(len({len(i) for i in encs}) == 1 for _, encs in batches)
    assert any(len(idx) > 1 for idx, _ in batches)  # some batch still holds several prompts
    alone = [greedy_generate(lm, [p], max_new_tokens=3, batch_size=1)[0] for p in prompts]
    assert greedy_generate(lm, prompts, max_new_tokens=3, batch_size=8) == alone


def test_a_decoder_whose_state_no_cache_argument_carries_is_refused_extension():
    from tests.unit import _architectures as zoo

    lm = zoo.build("mamba")  # its state goes by its own argument (5.23: ``cache_params``; 5.25: ``cache``, which
    eng = Engine(lm.model, pad_id=pad_id_of(lm.tokenizer))  # the key/value cache the engine passes does not fill)
    with pytest.raises(ProbeError, match="^mamba: (no key/value cache|its state is not carried)"):
        eng.begin([(5, 9, 11), (7, 2, 19)])


# -- the memory plan on configs whose sizes vary by layer -----------------------------------------------------
def test_the_widest_head_is_read_per_layer_where_the_whole_config_refuses_it():
    from types import SimpleNamespace

    from probe.scoring.engine.memory import widest_head

    class PerLayer:  # transformers 5.25's Gemma 4: reading head_dim of the whole config raises
        per_layer_config = [SimpleNamespace(head_dim=16), SimpleNamespace(head_dim=32)]
        global_head_dim = None

        @property
        def head_dim(self):
            raise RuntimeError("'head_dim' is a per-layer attribute")

    assert widest_head(PerLayer(), 0) == 32


def test_the_memory_plan_of_gemma4_text_holds_its_widest_layer():
    from probe.scoring.engine.memory import ModelShape, plan
    from tests.unit import _architectures as zoo

    lm = zoo.build("gemma4_text")  # one layer's head_dim is 32 (per_layer_config), the others' 16
    assert ModelShape.of(lm.model).head_dim == 32
    assert plan(lm, "auto", "auto").batch_size >= 1
