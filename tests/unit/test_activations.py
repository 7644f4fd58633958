"""Capture hooks, positions and `probe activations` (items recorded through the Runner) on a tiny random Llama
(no downloads)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import json

from tests.unit._tiny_models import tiny_llama, tiny_tokenizer
from probe.activations.hooks import capture, discover, hook_names, intervene, wire
from probe.activations.positions import PositionSpec, locate, padded_positions_fn, parse_positions, span_tokens
from probe.activations.scoring_capture import CaptureSpec
from probe.activations.store import load
from probe.commands.activations import record
from probe.errors import InputError
from probe.models import LoadedModel
from probe.prompts.capture_items import read_capture_items
from probe.scoring import Scorer


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return tiny_llama(tok, n_layers=3)


def _items(n=5):
    return [{"id": f"q{i}", "prompt": "Background: Person A has wrinkles" + "." * i + " Who is old? Answer:",
             "labels": ["A", "B"], "cue": "has wrinkles", "answer_label": "B"} for i in range(n)]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# --- positions ---------------------------------------------------------------------------------

def test_parse_positions_names_and_errors():
    assert [p.name for p in parse_positions("last, span:cue ,last")] == ["last", "span:cue"]
    with pytest.raises(ValueError):
        parse_positions("middle")
    with pytest.raises(ValueError):
        PositionSpec("span")
    with pytest.raises(ValueError):
        PositionSpec("last", "cue")
    with pytest.raises(ValueError):
        parse_positions("")


def test_span_tokens_overlap_rules():
    offsets = [(0, 0), (0, 3), (3, 9), (9, 10)]  # BOS, "abc", "defghi", "."
    assert span_tokens(offsets, 0, 3) == [1]
    assert span_tokens(offsets, 2, 4) == [1, 2]  # partial overlaps count
    assert span_tokens(offsets, 9, 10) == [3]
    assert span_tokens(offsets, 5, 5) == []  # empty span
    assert span_tokens(offsets, 20, 30) == []


def test_locate_substring_and_offsets():
    text = "SYS cue. USER: the cue here"
    assert locate(text, "cue", base=9) == (19, 22)  # search starts at the user text
    assert locate(text, [4, 7], base=15) == (19, 22)
    assert locate(text, "absent") is None
    assert locate(text, [5, 3]) is None
    assert locate(text, [0, 999]) is None


def test_padded_positions_fn_single_and_mean():
    h = torch.arange(2 * 5 * 2, dtype=torch.float32).reshape(2, 5, 2)
    fn = padded_positions_fn({"last": [[2], [4]], "mean": [[0, 1], [3, 4]]}, offsets=[2, 0])
    out = fn(h)
    assert out["last"].tolist() == [h[0, 4].tolist(), h[1, 4].tolist()]
    assert out["mean"][0].tolist() == ((h[0, 2] + h[0, 3]) / 2).tolist()
    assert out["mean"][1].tolist() == ((h[1, 3] + h[1, 4]) / 2).tolist()


def _count_hooks(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


# --- hooks ---------------------------------------------------------------------------------------

def test_discover_and_hook_names(model):
    layout = discover(model)
    assert layout.n_layers == 3 and layout.d_model == 64
    assert layout.lm_head is model.lm_head and layout.final_norm is model.model.norm
    assert hook_names(layout, "0,-1", ["resid_post"]) == ["blocks.0.hook_resid_post", "blocks.2.hook_resid_post"]
    with pytest.raises(ValueError):
        hook_names(layout, "3")
    with pytest.raises(ValueError):
        hook_names(layout, "all", ["nope"])
    with pytest.raises(KeyError):
        layout.module_for("blocks.0.hook_q")


def test_capture_equals_output_hidden_states(model, tok):
    ids = torch.tensor([tok("Person A has wrinkles.").input_ids])
    layout = discover(model)
    names = hook_names(layout, "all", ["resid_pre", "resid_post"]) + ["ln_final.hook_normalized"]
    model(ids, output_hidden_states=True)  # transformers installs its own recorders on first use
    n_hooks = _count_hooks(model)
    with capture(model, names, lambda h: {"all": h[0]}) as cap:
        ref = model(ids, output_hidden_states=True)
    got = cap.pop()
    hs = ref.hidden_states  # embeddings, layer 0 .. layer L-2 outputs, final-norm output
    for i in range(3):
        np.testing.assert_array_equal(got[f"blocks.{i}.hook_resid_pre@all"], hs[i][0].numpy())
    for i in range(2):  # where they coincide: HF's last hidden state is after the final norm
        np.testing.assert_array_equal(got[f"blocks.{i}.hook_resid_post@all"], hs[i + 1][0].numpy())
    np.testing.assert_array_equal(got["ln_final.hook_normalized@all"], hs[-1][0].numpy())
    # hooks are gone after the block
    assert _count_hooks(model) == n_hooks


def test_attn_and_mlp_out_sum_to_residual_update(model, tok):
    ids = torch.tensor([tok("Who is old?").input_ids])
    names = [f"blocks.1.hook_{k}" for k in ("resid_pre", "attn_out", "mlp_out", "resid_post")]
    with capture(model, names, lambda h: {"x": h[0]}) as cap:
        model(ids)
    g = {k.split("hook_")[1].split("@")[0]: v for k, v in cap.pop().items()}
    np.testing.assert_allclose(g["resid_pre"] + g["attn_out"] + g["mlp_out"], g["resid_post"], atol=1e-5)


def test_intervene_identity_changes_nothing_and_edit_changes(model, tok):
    ids = torch.tensor([tok("Who is old?").input_ids])
    base = model(ids).logits
    with intervene(model, {"blocks.1.hook_resid_post": lambda h: h}):
        same = model(ids).logits
    with intervene(model, {"blocks.1.hook_resid_pre": lambda h: h + 1.0}):
        moved = model(ids).logits
    assert torch.equal(base, same)
    assert not torch.allclose(base, moved)
    assert torch.equal(model(ids).logits, base)


def _n_hooks(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_wire_reads_writes_and_always_unhooks(model, tok):
    """The one wiring: a tap sees [batch, pos, d_model] per hook, in forward order; a returned tensor
    replaces the value (pre-hook for resid_pre, output otherwise); hooks go on exit, error or not."""
    ids = torch.tensor([tok("Who is old?").input_ids])
    before, base = _n_hooks(model), model(ids).logits
    seen = []
    with wire(model, ["blocks.2.hook_resid_pre", "blocks.0.hook_mlp_out", "blocks.0.hook_mlp_out"],
              lambda name, h: seen.append((name, tuple(h.shape)))):
        assert _n_hooks(model) == before + 2  # a repeated name is wired once
        assert torch.equal(model(ids).logits, base)  # a tap returning None changes nothing
    assert seen == [("blocks.0.hook_mlp_out", (1, ids.shape[1], 64)), ("blocks.2.hook_resid_pre", (1, ids.shape[1], 64))]
    # writing resid_pre of layer 1 is writing resid_post of layer 0: the same edit, the same logits
    with wire(model, ["blocks.1.hook_resid_pre"], lambda _n, h: h * 0.5):
        pre = model(ids).logits
    with wire(model, ["blocks.0.hook_resid_post"], lambda _n, h: h * 0.5):
        post = model(ids).logits
    assert torch.allclose(pre, post, atol=1e-6) and not torch.allclose(pre, base)
    with pytest.raises(RuntimeError, match="boom"):
        with wire(model, ["blocks.0.hook_attn_out"], lambda _n, h: h):
            raise RuntimeError("boom")
    with pytest.raises(KeyError, match="3 layers"):  # checked before any hook is registered
        with wire(model, ["blocks.0.hook_resid_post", "blocks.3.hook_resid_post"], lambda _n, h: None):
            pass
    assert _n_hooks(model) == before and torch.equal(model(ids).logits, base)


# --- recording items through the Runner (probe activations) ----------------------------------------

KINDS = ("resid_post", "attn_out", "mlp_out")


def _lm(model, tok):
    return LoadedModel(model=model, tokenizer=tok, name="tiny", source="tests")


def _run(model, tok, items, batch_size, token_budget=8192, positions="last,label,span:cue,mean:cue", tmp=None,
         **kw):
    keys = [f"blocks.{i}.hook_{k}@{positions}" for i in range(3) for k in KINDS] if positions != "last" else \
        ["blocks.*.hook_resid_post@last"]
    inp = _write(tmp.with_suffix(".jsonl"), items)
    record(_lm(model, tok), inp, tmp, keys, batch_size=batch_size, token_budget=token_budget, chunk_size=3,
           device="cpu", progress=False, **kw)
    return load(tmp)


def test_batch_size_and_padding_invariance(model, tok, tmp_path):
    items = _items(5)
    runs = [_run(model, tok, items, bs, budget, tmp=tmp_path / f"{bs}_{budget}")
            for bs, budget in ((1, 8192), (5, 8192), (2, 64), (5, 128))]
    ref = runs[0]
    assert ref.manifest["hooks"] == hook_names(discover(model), "all", KINDS)  # layer-major, as always
    for other in runs[1:]:
        assert other.ids == ref.ids
        for k in ref.keys():
            np.testing.assert_allclose(other[k], ref[k], atol=2e-5, err_msg=k)
        for a, b in zip(other.records, ref.records):
            np.testing.assert_allclose(a["label_logprobs"], b["label_logprobs"], atol=2e-5)


def test_label_logprobs_and_positions_match_direct_forward(model, tok, tmp_path):
    items = _items(3)
    acts = _run(model, tok, items, 2, tmp=tmp_path / "a")
    it = items[1]
    row = acts.ids.index(it["id"])
    ids = tok(it["prompt"]).input_ids
    a_id = tok(" A", add_special_tokens=False).input_ids[0]
    b_id = tok(" B", add_special_tokens=False).input_ids[0]
    with torch.no_grad():
        out = model(torch.tensor([ids + [b_id]]), output_hidden_states=True)
    logp = torch.log_softmax(out.logits[0, len(ids) - 1], -1)
    np.testing.assert_allclose(acts.records[row]["label_logprobs"], [logp[a_id].item(), logp[b_id].item()],
                               atol=1e-5)
    h1 = out.hidden_states[1][0]  # blocks.0.hook_resid_post
    np.testing.assert_allclose(acts["blocks.0.hook_resid_post@last"][row], h1[len(ids) - 1].numpy(), atol=1e-5)
    np.testing.assert_allclose(acts["blocks.0.hook_resid_post@label"][row], h1[len(ids)].numpy(), atol=1e-5)
    start = it["prompt"].index("has wrinkles")
    toks = [i for i, (s, e) in enumerate(tok(it["prompt"], return_offsets_mapping=True)["offset_mapping"])
            if e > s and s < start + len("has wrinkles") and e > start]
    np.testing.assert_allclose(acts["blocks.0.hook_resid_post@span:cue"][row], h1[toks[-1]].numpy(), atol=1e-5)
    np.testing.assert_allclose(acts["blocks.0.hook_resid_post@mean:cue"][row], h1[toks].mean(0).numpy(), atol=1e-5)
    rec = acts.records[row]
    assert rec["pred_index"] == int(np.argmax(rec["label_probs"]))
    assert abs(sum(rec["label_probs"]) - 1) < 1e-6 and 0 < rec["label_mass"] <= 1
    assert rec["meta"] == {"cue": "has wrinkles"}  # the item's other fields, as the store always kept them


def test_missing_span_is_nan_and_counted(model, tok, tmp_path):
    items = _items(2) + [{"id": "nocue", "prompt": "Who is old? Answer:", "labels": ["A", "B"]}]
    acts = _run(model, tok, items, 3, positions="last,mean:cue", tmp=tmp_path / "m")
    r = acts.ids.index("nocue")
    assert np.isnan(acts["blocks.0.hook_resid_post@mean:cue"][r]).all()
    assert np.isfinite(acts["blocks.0.hook_resid_post@last"][r]).all()
    assert acts.records[r]["missing_positions"] == ["mean:cue"]


def test_span_not_in_prompt_is_input_error(model, tok, tmp_path):
    bad = [{"id": "x", "prompt": "Who? Answer:", "labels": ["A", "B"], "cue": "zebra"}]
    with pytest.raises(InputError, match="cue"):
        _run(model, tok, bad, 1, positions="span:cue", tmp=tmp_path / "e")
    assert not (tmp_path / "e" / "manifest.json").exists()  # checked before any work


def test_label_position_needs_answer_label(model, tok):
    from probe.scoring.requests import LabelRequest

    scorer = Scorer(_lm(model, tok))
    req = LabelRequest("x", "Who? Answer:", ("A", "B"))
    with pytest.raises(ValueError, match="answer_label"):
        CaptureSpec(("blocks.0.hook_resid_post",), "label").target(scorer, scorer.encode(req))


def test_scorer_matches_recorded_records(model, tok, tmp_path):
    items = _items(4)
    acts = _run(model, tok, items, 2, positions="last", tmp=tmp_path / "s")
    reqs = read_capture_items(tmp_path / "s.jsonl", tok).requests
    for r in Scorer(_lm(model, tok), batch_size=3).score(reqs):
        np.testing.assert_allclose(r.logprobs, acts.records[acts.ids.index(r.id)]["label_logprobs"], atol=2e-5)


def test_resume_and_shards_give_the_one_process_store(model, tok, tmp_path):
    """The store is the Runner's: a re-run adds only what is missing, and --shard I/N jobs fold into the
    store one process writes (same items table and arrays)."""
    items = _items(7)
    ref = _run(model, tok, items, 2, positions="last", tmp=tmp_path / "ref")
    part = _run(model, tok, items[:4], 2, positions="last", tmp=tmp_path / "resumed")
    assert len(part.ids) == 4
    again = _run(model, tok, items, 2, positions="last", tmp=tmp_path / "resumed")
    assert again.ids == ref.ids and (tmp_path / "resumed" / "records.jsonl").is_file()
    inp = _write(tmp_path / "sharded.jsonl", items)
    for i in (0, 1):
        stats = record(_lm(model, tok), inp, tmp_path / "sharded", ["blocks.*.hook_resid_post@last"],
                       batch_size=2, chunk_size=3, device="cpu", progress=False, shard=f"{i}/2")
        assert stats["shard"] == f"{i}/2" and stats["items_stored"] == (4 if i == 0 else 3)  # chunks 0, 2 | 1
    assert (tmp_path / "sharded.rank0-of-2" / "shard.json").is_file()
    assert not (tmp_path / "sharded" / "manifest.json").exists()
    folded = _run(model, tok, items, 2, positions="last", tmp=tmp_path / "sharded")
    assert folded.ids == ref.ids and not (tmp_path / "sharded.rank1-of-2").exists()
    for k in ref.keys():
        np.testing.assert_allclose(folded[k], ref[k], atol=1e-6, err_msg=k)
    strip = lambda recs: [{k: v for k, v in r.items() if k != "shard"} for r in recs]  # noqa: E731
    assert strip(folded.records) == strip(ref.records)
    assert {k: v for k, v in folded.manifest.items() if k != "extra"} == \
        {k: v for k, v in ref.manifest.items() if k != "extra"}


def test_capture_syntax_and_older_options_name_the_same_keys(model, tok, tmp_path):
    import argparse

    from probe.commands.activations import capture_keys

    old = argparse.Namespace(capture=None, layers="0,-1", hooks="resid_post,mlp_out", positions="last,span:cue")
    keys = capture_keys(old, 3)
    assert CaptureSpec.parse(keys).keys == CaptureSpec.parse(
        ["blocks.0.hook_resid_post@last,span:cue", "blocks.0.hook_mlp_out@last,span:cue",
         "blocks.2.hook_resid_post@last,span:cue", "blocks.2.hook_mlp_out@last,span:cue"]).keys
    assert CaptureSpec.parse(["blocks.*.hook_resid_post@last"], n_layers=3).hooks == tuple(
        hook_names(discover(model), "all", ["resid_post"]))
    with pytest.raises(ValueError, match="needs the model"):
        CaptureSpec.parse(["blocks.*.hook_resid_post@last"])
    with pytest.raises(ValueError, match="out of range"):
        CaptureSpec.parse(["blocks.5.hook_resid_post@last", "blocks.0,7.hook_resid_post@last"], n_layers=3)
