"""The persistent score cache: exact round trips, exact keys, fingerprints, concurrency, damage."""

from __future__ import annotations

import argparse
import copy
import math
import shutil
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from probe.errors import ProbeError
from probe.models.fingerprint import fingerprint_parts, model_fingerprint
from probe.scoring.cache import ENGINE_VERSION, ScoreCache, forward_hooked, sequence_key
from probe.scoring.engine import RowOutput
from probe.scoring.tokens import Encoded, Sequence

ROOT = Path(__file__).resolve().parents[2]
FP = "f" * 64
KEY = ((3, 14, 15, 92), 2, (7, 5))


def _bits(values) -> list[bytes]:
    """Bit patterns: NaN == NaN and -0.0 != 0.0, unlike float comparison."""
    return [struct.pack("<d", v) for v in values]


def _same(a: RowOutput, b: RowOutput) -> bool:
    return (
        a.finite == b.finite
        and sorted(a.label_logprobs) == sorted(b.label_logprobs)
        and _bits(a.label_logprobs[k] for k in sorted(a.label_logprobs)) == _bits(b.label_logprobs[k] for k in sorted(b.label_logprobs))
        and _bits(a.token_logprobs) == _bits(b.token_logprobs)
    )


# -- values round-trip bit for bit -------------------------------------------------
@pytest.mark.parametrize(
    "out",
    [
        RowOutput({7: -0.1, 5: -2.718281828459045}, [], True),
        RowOutput({}, [-1e-300, -5e-324, -0.0, -123456.789, 0.1 + 0.2], True),
        RowOutput({7: -math.inf, 5: math.nan}, [math.nan, -math.inf, math.inf], False),
        RowOutput({}, [], True),
    ],
)
def test_values_round_trip_exactly_also_after_reopening(tmp_path, out):
    path = tmp_path / "c.sqlite"
    with ScoreCache(path, FP) as cache:
        cache.put_many({KEY: out})
        assert _same(cache.get_many([KEY])[KEY], out)
    with ScoreCache(path, FP) as again:
        got = again.get_many([KEY])[KEY]
        assert _same(got, out)
        assert len(again) == 1


def test_non_finite_flag_round_trips(tmp_path):
    with ScoreCache(tmp_path / "c.sqlite", FP) as cache:
        cache.put_many({KEY: RowOutput({7: 0.0, 5: 0.0}, [], False)})
        assert cache.get_many([KEY])[KEY].finite is False


# -- keys are exact -----------------------------------------------------------------
@pytest.mark.parametrize(
    "other, fingerprint",
    [
        (((3, 14, 15, 93), 2, (7, 5)), FP),  # one token id differs
        (((3, 14, 15), 2, (7, 5)), FP),  # a prefix of the ids
        (((3, 14, 15, 92), 3, (7, 5)), FP),  # score_from
        (((3, 14, 15, 92), 2, (7,)), FP),  # label ids
        (((3, 14, 15, 92), 2, (7, 5, 6)), FP),
        (KEY, "e" * 64),  # another model fingerprint
    ],
)
def test_any_change_in_the_key_is_a_miss(tmp_path, other, fingerprint):
    path = tmp_path / "c.sqlite"
    with ScoreCache(path, FP) as cache:
        cache.put_many({KEY: RowOutput({7: -1.0, 5: -2.0}, [], True)})
    with ScoreCache(path, fingerprint) as cache:
        assert cache.get_many([other]) == {}
        assert (cache.stats.hits, cache.stats.misses) == (0, 1)


def test_label_order_does_not_matter_and_stats_count(tmp_path):
    with ScoreCache(tmp_path / "c.sqlite", FP) as cache:
        cache.put_many({KEY: RowOutput({7: -1.0, 5: -2.0}, [], True)})
        swapped = (KEY[0], KEY[1], (5, 7))
        assert cache.get_many([swapped, ((1,), 1, ())])[swapped].label_logprobs == {7: -1.0, 5: -2.0}
        assert (cache.stats.hits, cache.stats.misses, cache.stats.writes) == (1, 1, 1)


def test_first_value_of_a_key_is_kept(tmp_path):
    with ScoreCache(tmp_path / "c.sqlite", FP) as cache:
        cache.put_many({KEY: RowOutput({7: -1.0, 5: -2.0}, [], True)})
        cache.put_many({KEY: RowOutput({7: -9.0, 5: -9.0}, [], True)})
        assert cache.get_many([KEY])[KEY].label_logprobs[7] == -1.0
        assert len(cache) == 1


def test_many_keys_span_several_queries(tmp_path):
    items = {((i, i + 1), 1, ()): RowOutput({}, [-float(i)], True) for i in range(1234)}
    with ScoreCache(tmp_path / "c.sqlite", FP) as cache:
        cache.put_many(items)
        got = cache.get_many(items)
    assert len(got) == 1234 and all(got[k].token_logprobs == v.token_logprobs for k, v in items.items())


# -- fingerprints ------------------------------------------------------------------------
def test_fingerprint_is_stable_for_the_same_model():
    from tests.tiny import tiny_lm

    a, b = tiny_lm(), tiny_lm()
    assert model_fingerprint(a, ENGINE_VERSION) == model_fingerprint(b, ENGINE_VERSION)
    assert fingerprint_parts(a, ENGINE_VERSION)["weights"].startswith("tensors:")


def test_fingerprint_changes_with_a_weight_edited_in_place(tiny_lm):
    import torch

    lm = copy.deepcopy(tiny_lm)  # the session fixture stays untouched
    before = model_fingerprint(lm, ENGINE_VERSION)
    with torch.no_grad():
        lm.model.model.layers[1].mlp.down_proj.weight[0, 0] += 1e-6
    assert model_fingerprint(lm, ENGINE_VERSION) != before  # the memo sees the in-place edit
    assert model_fingerprint(tiny_lm, ENGINE_VERSION) == before


def test_fingerprint_changes_with_dtype(tiny_lm):
    import torch

    lm = copy.deepcopy(tiny_lm)
    lm.model.to(torch.bfloat16)
    lm.dtype = "bfloat16"
    parts, ref = fingerprint_parts(lm, ENGINE_VERSION), fingerprint_parts(tiny_lm, ENGINE_VERSION)
    assert parts["dtype"] != ref["dtype"] and model_fingerprint(lm, ENGINE_VERSION) != model_fingerprint(tiny_lm, ENGINE_VERSION)


def test_fingerprint_changes_with_tokenizer(tiny_lm):
    lm = copy.copy(tiny_lm)
    lm.tokenizer = copy.deepcopy(tiny_lm.tokenizer)
    lm.tokenizer.add_tokens(["<|new|>"])
    parts, ref = fingerprint_parts(lm, ENGINE_VERSION), fingerprint_parts(tiny_lm, ENGINE_VERSION)
    assert parts["tokenizer"] != ref["tokenizer"] and parts["weights"] == ref["weights"]
    assert model_fingerprint(lm, ENGINE_VERSION) != model_fingerprint(tiny_lm, ENGINE_VERSION)


def test_fingerprint_of_a_model_directory_hashes_its_weight_files(model_dir, tmp_path):
    from probe.models import load_model

    a, b = load_model(str(model_dir)), load_model(str(model_dir))
    assert fingerprint_parts(a, ENGINE_VERSION)["weights"].startswith("files:")
    assert model_fingerprint(a, ENGINE_VERSION) == model_fingerprint(b, ENGINE_VERSION)
    # the same directory with one weight changed on disk
    other = tmp_path / "other"
    shutil.copytree(model_dir, other)
    from safetensors.torch import load_file, save_file

    (weights,) = other.glob("*.safetensors")
    state = load_file(weights)
    name = sorted(state)[0]
    state[name] = state[name].clone()
    state[name].view(-1)[0] += 1.0
    save_file(state, weights, metadata={"format": "pt"})
    assert model_fingerprint(load_model(str(other)), ENGINE_VERSION) != model_fingerprint(a, ENGINE_VERSION)


def test_gguf_models_use_the_known_file_hash(tiny_lm):
    lm = copy.copy(tiny_lm)
    lm.file_sha256 = "ab" * 32
    assert fingerprint_parts(lm, ENGINE_VERSION)["weights"] == "gguf:" + "ab" * 32


# -- concurrency ---------------------------------------------------------------------------
def test_two_caches_on_one_file_see_each_other(tmp_path):
    path = tmp_path / "c.sqlite"
    a, b = ScoreCache(path, FP), ScoreCache(path, FP)
    try:
        a.put_many({KEY: RowOutput({7: -1.0, 5: -2.0}, [], True)})
        assert b.get_many([KEY])[KEY].label_logprobs == {7: -1.0, 5: -2.0}
        b.put_many({((1, 2), 1, ()): RowOutput({}, [-0.5], True)})
        assert a.get_many([((1, 2), 1, ())])[((1, 2), 1, ())].token_logprobs == [-0.5]
        assert len(a) == len(b) == 2
    finally:
        a.close()
        b.close()


def test_two_processes_write_at_once_and_nothing_is_lost(tmp_path):
    path = tmp_path / "c.sqlite"
    child = (
        "import sys; from probe.scoring.cache import ScoreCache; from probe.scoring.engine import RowOutput\n"
        "with ScoreCache(sys.argv[1], 'f' * 64) as c:\n"
        "    for i in range(500):\n"
        "        c.put_many({((i, 1), 1, ()): RowOutput({}, [-float(i)], True)})\n"
        "        if i == 0: print('started', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", child, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "started\n"  # blocks until the child is writing: the loops overlap
    with ScoreCache(path, FP) as cache:
        for i in range(500):  # one transaction each, interleaving with the child's
            cache.put_many({((i, 2), 1, ()): RowOutput({}, [-float(i)], True)})
        proc.stdout.read()
        assert proc.wait(timeout=120) == 0
        keys = [((i, j), 1, ()) for i in range(500) for j in (1, 2)]
        got = cache.get_many(keys)
    assert len(got) == 1000 and all(got[k].token_logprobs == [-float(k[0][0])] for k in keys)


# -- damage is an error naming the file -----------------------------------------------------
def test_a_file_that_is_not_a_cache_is_a_clear_error(tmp_path):
    path = tmp_path / "scores.sqlite"
    path.write_bytes(b"this is not a database at all\n" * 200)
    with pytest.raises(ProbeError, match="scores.sqlite is not a probe score cache.*left untouched"):
        ScoreCache(path, FP)
    assert path.read_bytes() == b"this is not a database at all\n" * 200


def test_a_truncated_cache_file_is_a_clear_error(tmp_path):
    path = tmp_path / "scores.sqlite"
    items = {((i, i + 1), 1, ()): RowOutput({}, [-float(i)] * 20, True) for i in range(2000)}
    with ScoreCache(path, FP) as cache:
        cache.put_many(items)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # a disk-full or a copy cut short
    with pytest.raises(ProbeError, match="scores.sqlite.*malformed"):
        with ScoreCache(path, FP) as cache:
            cache.get_many(items)


def test_a_damaged_value_is_an_error_not_a_wrong_score(tmp_path):
    path = tmp_path / "scores.sqlite"
    with ScoreCache(path, FP) as cache:
        cache.put_many({KEY: RowOutput({7: -1.0, 5: -2.0}, [], True)})
    (blob,) = sqlite3.connect(path).execute("SELECT value FROM scores").fetchone()
    damaged = bytearray(blob)
    damaged[12] ^= 0x01  # one flipped bit in a stored id or float
    _edit(path, "UPDATE scores SET value = ?", (bytes(damaged),))
    with ScoreCache(path, FP) as cache, pytest.raises(ProbeError, match="scores.sqlite.*damaged"):
        cache.get_many([KEY])


def _edit(path, sql: str, params: tuple = ()) -> None:
    """Change the cache file behind the cache's back (what damage on disk would do)."""
    db = sqlite3.connect(path)
    db.execute(sql, params)
    db.commit()
    db.close()


def test_a_value_moved_to_another_key_is_detected(tmp_path):
    path = tmp_path / "scores.sqlite"
    other = ((1, 2, 3), 1, ())
    with ScoreCache(path, FP) as cache:
        cache.put_many({KEY: RowOutput({7: -1.0, 5: -2.0}, [], True), other: RowOutput({}, [-1.0, -2.0], True)})
        digest = cache.key_digest(other)
    (blob,) = sqlite3.connect(path).execute("SELECT value FROM scores WHERE key != ?", (digest,)).fetchone()
    _edit(path, "UPDATE scores SET value = ? WHERE key = ?", (blob, digest))
    with ScoreCache(path, FP) as cache, pytest.raises(ProbeError, match="damaged"):
        cache.get_many([other])


def test_unknown_format_and_directory_are_refused(tmp_path):
    path = tmp_path / "scores.sqlite"
    ScoreCache(path, FP).close()
    _edit(path, "UPDATE meta SET value = '99' WHERE name = 'format'")
    with pytest.raises(ProbeError, match="scores.sqlite has format 99"):
        ScoreCache(path, FP)
    with pytest.raises(ProbeError, match="not a file"):
        ScoreCache(tmp_path, FP)


# -- ScoreCache.outputs: what the scorer calls ------------------------------------------------------
def _label(ids, labels, rid="r"):
    return Encoded(request=rid, sequences=(Sequence(tuple(ids), len(ids), tuple(labels)),), n_prompt_tokens=len(ids))


def _cont(prompt, options, rid="c"):
    seqs = tuple(Sequence(tuple(prompt) + tuple(o), len(prompt)) for o in options)
    return Encoded(request=rid, sequences=seqs, n_prompt_tokens=len(prompt))


class FakeRun:
    """Stands in for the scorer's _run: a deterministic output per row, and a log of what it ran."""

    def __init__(self) -> None:
        self.ran: list[list] = []

    def __call__(self, todo):
        self.ran.append(todo)
        out: dict = {}
        for e in todo:
            for s in e.sequences:
                row = out.setdefault((s.ids, s.score_from), RowOutput({}, [-0.5 * t for t in s.ids[s.score_from:]], True))
                row.label_logprobs.update({t: -float(t + len(s.ids)) for t in s.label_ids})
        return out


def test_outputs_compute_only_what_is_missing(tmp_path):
    run = FakeRun()
    batch = [_label([1, 2, 3], [4, 5], "a"), _cont([1, 2], [[6], [7, 8]], "b")]
    with ScoreCache(tmp_path / "c.sqlite", FP) as cache:
        first = cache.outputs(batch, run)
        again = cache.outputs(batch, run)
        assert len(run.ran) == 1 and again == first
        more = batch + [_label([9, 9], [4], "n")]
        cache.outputs(more, run)
        assert [e.request for e in run.ran[-1]] == ["n"]
        assert cache.stats.hits == 3 + 3 and cache.stats.writes == 3 + 1


def test_outputs_merge_label_ids_of_one_sequence(tmp_path):
    """Two requests on one prompt with different labels: cached separately, served as one row."""
    run = FakeRun()
    with ScoreCache(tmp_path / "c.sqlite", FP) as cache:
        cache.outputs([_label([1, 2], [4], "a")], run)
        cache.outputs([_label([1, 2], [5], "b")], run)
        both = cache.outputs([_label([1, 2], [4], "a"), _label([1, 2], [5], "b")], run)
        assert len(run.ran) == 2 and both[((1, 2), 2)].label_logprobs == {4: -6.0, 5: -7.0}
        # one of two label sets missing: the shared row is recomputed whole, for both requests
        mixed = cache.outputs([_label([1, 2], [4], "a"), _label([1, 2], [6], "c")], run)
        assert [e.request for e in run.ran[-1]] == ["a", "c"] and set(mixed[((1, 2), 2)].label_logprobs) == {4, 6}


def test_outputs_bypass_the_cache_while_a_hook_is_registered(tmp_path, tiny_lm):
    run = FakeRun()
    lm = copy.deepcopy(tiny_lm)
    batch = [_label([1, 2, 3], [4, 5], "a")]
    handle = lm.model.model.layers[0].register_forward_hook(lambda *a: None)
    with ScoreCache(tmp_path / "c.sqlite", FP) as cache:
        assert forward_hooked(lm.model)
        cache.outputs(batch, run, model=lm.model)
        cache.outputs(batch, run, model=lm.model)
        assert len(run.ran) == 2 and len(cache) == 0 and cache.stats.bypassed == 2
        handle.remove()
        assert not forward_hooked(lm.model)
        cache.outputs(batch, run, model=lm.model)
        cache.outputs(batch, run, model=lm.model)
        assert len(run.ran) == 3 and len(cache) == 1


def test_outputs_bypass_the_cache_once_a_weight_is_edited_in_place(tmp_path, tiny_lm):
    import torch

    run = FakeRun()
    lm = copy.deepcopy(tiny_lm)
    batch = [_label([1, 2, 3], [4, 5], "a")]
    with ScoreCache(tmp_path / "c.sqlite", FP) as cache:
        cache.outputs(batch, run, model=lm.model)
        cache.outputs(batch, run, model=lm.model)
        assert len(run.ran) == 1
        with torch.no_grad():
            lm.model.lm_head.weight[0, 0] += 1.0
        cache.outputs(batch, run, model=lm.model)
        assert len(run.ran) == 2 and cache.stats.bypassed == 1


def test_sequence_key_sorts_labels():
    assert sequence_key(Sequence((1, 2), 2, (9, 3))) == ((1, 2), 2, (3, 9))


# -- end to end around the real scorer ---------------------------------------------------------
def test_scorer_with_cache_gives_identical_results_without_forward_passes(tmp_path, tiny_lm):
    """A second scorer on the same cache runs no forward pass and returns the same numbers bit for bit."""
    from probe.scoring import ContinuationRequest, LabelRequest, PerplexityRequest, Scorer

    reqs = [
        LabelRequest("l1", "Who has wrinkles? Answer:", ("A", "B", "C")),
        LabelRequest("l2", "Who has wrinkles? Answer:", ("B", "Unknown")),
        ContinuationRequest("c1", "The cat sat on the", ("mat.", "grandson"), group="g"),
        ContinuationRequest("c2", "The cat sat on the", ("mat.", "phone"), group="g"),
        PerplexityRequest("p1", "I saw a man and a woman at the market."),
    ]
    plain = Scorer(tiny_lm).score(reqs)
    cache = ScoreCache(tmp_path / "c.sqlite", model_fingerprint(tiny_lm, ENGINE_VERSION))
    first_scorer = Scorer(tiny_lm, cache=cache)
    first = first_scorer.score(reqs)
    second_scorer = Scorer(tiny_lm, cache=cache)
    second = second_scorer.score(reqs)
    with pytest.raises(ValueError, match="another model fingerprint"):
        Scorer(tiny_lm, cache=ScoreCache(tmp_path / "d.sqlite", "not-this-model"),
               fingerprint=model_fingerprint(tiny_lm, ENGINE_VERSION))
    cache.close()
    assert second_scorer.engine.forward_passes == 0 and first_scorer.engine.forward_passes > 0
    assert second == first  # bit for bit (dataclass equality on the floats)
    for a, b in zip(first, plain):
        for name in ("logprobs", "nll"):
            if hasattr(a, name):
                assert getattr(a, name) == pytest.approx(getattr(b, name), abs=1e-5)


# -- the CLI option ------------------------------------------------------------------------------------
def test_score_cache_option_and_environment(tmp_path, monkeypatch, tiny_lm):
    from probe.cli import build_parser
    from probe.commands.common import run_options, score_cache_path
    from probe.runs.runner import Runner

    monkeypatch.delenv("PROBE_SCORE_CACHE", raising=False)
    args = build_parser().parse_args(["score", "--input", "i.jsonl", "--output", "o.jsonl"])
    assert score_cache_path(args) is None and run_options(args).score_cache is None
    monkeypatch.setenv("PROBE_SCORE_CACHE", str(tmp_path / "env.sqlite"))
    assert score_cache_path(args) == tmp_path / "env.sqlite"
    args = build_parser().parse_args(["score", "--input", "i", "--output", "o", "--score-cache", str(tmp_path / "x.sqlite")])
    assert score_cache_path(args) == tmp_path / "x.sqlite"  # the option wins over the environment
    with Runner(tiny_lm, run_options(args)) as runner:
        cache = runner.scorer.cache
        assert cache.fingerprint == model_fingerprint(tiny_lm, ENGINE_VERSION) and (tmp_path / "x.sqlite").is_file()
    assert score_cache_path(argparse.Namespace()) == tmp_path / "env.sqlite"


def test_cli_rerun_into_a_new_output_reads_the_cache(tmp_path, model_dir, capsys):
    """`probe score --score-cache`: a second run (new output) computes nothing and writes the same bytes."""
    import json

    from probe.cli import main

    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Who has item {i}?", "options": ["A", "B"]}) + "\n"
                             for i in range(6)))
    common = ["--model", str(model_dir), "--input", str(items), "--score-cache", str(tmp_path / "s.sqlite")]
    assert main(["score", *common, "--output", str(tmp_path / "a.jsonl")]) == 0
    assert "6 written" in capsys.readouterr().err
    assert main(["score", *common, "--output", str(tmp_path / "b.jsonl")]) == 0
    assert "6 sequence(s) read, 0 written" in capsys.readouterr().err
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_transformers_output_recorders_do_not_bypass_the_cache(tiny_lm):
    """A call with output_hidden_states=True leaves transformers' recording hooks on the model for good; they
    change no output, so the cache stays on. A user's hook still switches it off."""
    import torch

    from probe.scoring.cache import forward_hooked

    tiny_lm.model(input_ids=torch.tensor([[1, 2, 3]]), output_hidden_states=True)
    if not any(m._forward_hooks for m in tiny_lm.model.modules()):
        pytest.skip("this transformers release leaves no recording hook behind")
    assert not forward_hooked(tiny_lm.model)
    handle = tiny_lm.model.model.layers[0].register_forward_hook(lambda *a: None)
    try:
        assert forward_hooked(tiny_lm.model)
    finally:
        handle.remove()
