"""`probe run TASK --capture HOOK@POSITION` and `probe.evaluate(capture=...)`: activations aligned with the
records (same ids), streamed per chunk, resumed with the records (tiny model, the demo task)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from probe.activations import load
from probe.cli import main
from probe.scoring.scorer import Scorer

KEY = "blocks.1.hook_resid_post@last"


@pytest.fixture
def scored(monkeypatch):
    """Request ids scored by every Scorer.score call in this test."""
    seen: list[str] = []
    original = Scorer.score

    def spy(self, requests, *a, **kw):
        seen.extend(r.id for r in requests)
        return original(self, requests, *a, **kw)

    monkeypatch.setattr(Scorer, "score", spy)
    return seen


def _ids(out):
    return [json.loads(line)["id"] for line in (out / "records.jsonl").read_text().splitlines()]


def _run(model_dir, out, limit, *extra):
    return main(["run", "demo", "--model", str(model_dir), "--limit", str(limit), "--output", str(out),
                 "--no-progress", "--threads", "1", "--chunk-size", "4", "--capture", KEY, *extra])


def test_run_stores_one_vector_per_record_and_resumes(model_dir, tmp_path, scored, capsys):
    out = tmp_path / "run"
    assert _run(model_dir, out, 8) == 0  # one demo scenario: a group of 8, one chunk
    ids, arrays = load(out)
    assert ids == _ids(out) and len(ids) == 8
    assert set(arrays) == {KEY} and arrays[KEY].shape == (8, 64) and np.isfinite(arrays[KEY]).all()
    first = arrays[KEY].copy()
    scored.clear()
    assert _run(model_dir, out, 8) == 0  # nothing left: nothing recomputed
    assert scored == []
    assert _run(model_dir, out, 12) == 0  # more items: only the new chunk runs
    ids2, arrays2 = load(out)
    assert ids2[:8] == ids and len(ids2) == 12 and len(set(ids2)) == 12
    assert sorted(scored) == sorted(ids2[8:])
    np.testing.assert_array_equal(arrays2[KEY][:8], first)


def test_crash_between_stores_loses_nothing(model_dir, tmp_path, scored):
    out = tmp_path / "run"
    assert _run(model_dir, out, 16) == 0  # two scenario groups: two chunks
    ids, arrays = load(out)
    # a crash after a chunk's activations were stored but before its records were written
    lines = (out / "records.jsonl").read_text().splitlines()
    (out / "records.jsonl").write_text("\n".join(lines[:8]) + "\n")
    scored.clear()
    assert _run(model_dir, out, 16) == 0
    assert sorted(scored) == sorted(ids[8:])  # that chunk only
    ids2, arrays2 = load(out)
    assert ids2 == ids  # no duplicate rows
    np.testing.assert_allclose(arrays2[KEY], arrays[KEY], atol=1e-6)
    assert sorted(_ids(out)) == sorted(ids)


def test_other_capture_into_the_same_output_is_refused(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(model_dir, out, 4) == 0
    assert main(["run", "demo", "--model", str(model_dir), "--limit", "4", "--output", str(out), "--no-progress",
                 "--capture", "blocks.0.hook_resid_post@last"]) == 1
    assert "different run" in capsys.readouterr().err


def test_bad_capture_is_a_clear_error(model_dir, tmp_path, capsys):
    for bad in ("blocks.9.hook_resid_post@last", "blocks.0.hook_resid_post", "blocks.0.hook_resid_post@middle"):
        assert main(["run", "demo", "--model", str(model_dir), "--limit", "2", "--output", str(tmp_path / "x"),
                     "--no-progress", "--capture", bad]) == 1
        assert "--capture" in capsys.readouterr().err


def test_evaluate_with_capture_in_memory_and_on_disk(tiny_lm, tmp_path):
    import probe

    e = probe.evaluate(tiny_lm, "demo", limit=4, capture=[KEY, "blocks.0.hook_mlp_out@last"], progress=False)
    assert e.activations.ids == list(e.records["id"])
    assert e.activations[KEY].shape == (4, 64)
    on_disk = probe.evaluate(tiny_lm, "demo", limit=4, capture=[KEY], output=tmp_path / "e", progress=False)
    assert on_disk.activations.ids == list(on_disk.records["id"])
    np.testing.assert_allclose(on_disk.activations[KEY], e.activations[KEY], atol=1e-5)
    assert load(tmp_path / "e").ids == on_disk.activations.ids
