"""The activation store: shards + metadata table, resume, crash safety, load."""

from __future__ import annotations

import json

import numpy as np
import pytest

from probe.activations import ActivationWriter, load
from probe.activations.store import SHARDS, TABLE
from probe.errors import ProbeError

KEYS = ["blocks.0.hook_resid_post@last", "blocks.1.hook_resid_post@last"]


def _batch(ids, d=3):
    base = np.array([[int(i[1:])] * d for i in ids], dtype=np.float32)
    return [{"id": i, "meta": {"g": int(i[1:]) % 2}} for i in ids], {KEYS[0]: base, KEYS[1]: -base}


def test_roundtrip_across_shards(tmp_path):
    with ActivationWriter(tmp_path, {"keys": KEYS, "d_model": 3}, shard_size=2) as w:
        w.add(*_batch(["i0", "i1", "i2"]))
        w.add(*_batch(["i3", "i4"]))
    ids, arrays = load(tmp_path)
    assert ids == ["i0", "i1", "i2", "i3", "i4"]
    assert arrays[KEYS[0]][:, 0].tolist() == [0, 1, 2, 3, 4]
    assert arrays[KEYS[1]].dtype == np.float32 and arrays[KEYS[1]].shape == (5, 3)
    assert len(list((tmp_path / SHARDS).glob("*.safetensors"))) == 3
    acts = load(tmp_path, keys=[KEYS[1]])
    assert acts.keys() == [KEYS[1]]
    assert list(acts.frame()["g"]) == [0, 1, 0, 1, 0]


def test_resume_skips_done_and_appends(tmp_path):
    with ActivationWriter(tmp_path, {"keys": KEYS}, shard_size=10) as w:
        w.add(*_batch(["i0", "i1"]))
    with ActivationWriter(tmp_path, {"keys": KEYS, "extra": {"note": "differs, ignored"}}, shard_size=10) as w:
        assert w.done == {"i0", "i1"}
        w.add(*_batch(["i2"]))
    assert load(tmp_path).ids == ["i0", "i1", "i2"]


def test_resume_refuses_a_different_run(tmp_path):
    with ActivationWriter(tmp_path, {"keys": KEYS}) as w:
        w.add(*_batch(["i0"]))
    with pytest.raises(ProbeError, match="keys"):
        ActivationWriter(tmp_path, {"keys": KEYS[:1]})


def test_crash_keeps_complete_shards_only(tmp_path):
    with pytest.raises(RuntimeError):
        with ActivationWriter(tmp_path, {"keys": KEYS}, shard_size=2) as w:
            w.add(*_batch(["i0", "i1", "i2"]))  # i0, i1 flushed; i2 buffered
            raise RuntimeError("crash")
    assert load(tmp_path).ids == ["i0", "i1"]
    # an orphan shard (written, never listed) is ignored and never overwritten
    (tmp_path / SHARDS / "00007.safetensors").write_bytes(b"junk")
    with ActivationWriter(tmp_path, {"keys": KEYS}, shard_size=2) as w:
        assert w.done == {"i0", "i1"}
        w.add(*_batch(["i2"]))
    acts = load(tmp_path)
    assert acts.ids == ["i0", "i1", "i2"] and acts[KEYS[0]][2, 0] == 2
    assert acts.records[2]["shard"] == "00008"


def test_shape_errors_and_empty_store(tmp_path):
    with ActivationWriter(tmp_path, {"keys": KEYS, "d_model": 3}) as w:
        with pytest.raises(ValueError, match="lacks"):
            w.add([{"id": "a"}], {KEYS[0]: np.zeros((1, 3))})
        with pytest.raises(ValueError, match="expected"):
            w.add([{"id": "a"}], {KEYS[0]: np.zeros((2, 3)), KEYS[1]: np.zeros((2, 3))})
    acts = load(tmp_path)
    assert acts.ids == [] and acts[KEYS[0]].shape == (0, 3)
    with pytest.raises(ProbeError, match="not an activation store"):
        load(tmp_path / "nowhere")
    with pytest.raises(ProbeError, match="no activations named"):
        load(tmp_path, keys=["blocks.9.hook_resid_post@last"])


def test_missing_shard_is_reported(tmp_path):
    with ActivationWriter(tmp_path, {"keys": KEYS}, shard_size=1) as w:
        w.add(*_batch(["i0", "i1"]))
    (tmp_path / SHARDS / "00001.safetensors").unlink()
    with pytest.raises(Exception, match="shard 00001 is missing"):
        load(tmp_path)
    rows = [json.loads(x) for x in (tmp_path / TABLE).read_text().splitlines()]
    assert [r["row"] for r in rows] == [0, 0]
