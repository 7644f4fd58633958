"""Resuming an output checks that its records came from the same input and model (`<output>.input.json`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probe.cli import main
from probe.runs.resume import check_input, input_sidecar, request_digest
from probe.errors import ProbeError
from probe.scoring import ContinuationRequest, LabelRequest

ITEMS = [
    {"id": "q1", "prompt": "Who has wrinkles?", "options": ["A", "B", "C"], "kind": "label", "group": "g"},
    {"id": "q2", "prompt": "Who has smooth skin?", "options": ["Person A", "Person B"], "kind": "continuation", "group": "g"},
    {"id": "q3", "prompt": "Was the woman the secretary?", "options": ["Yes", "No"]},
]


def _write(path: Path, items: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in items))
    return path


def _score(model: Path, inp: Path, out: Path, *extra: str) -> int:
    return main(["score", "--model", str(model), "--input", str(inp), "--output", str(out), *extra])


def _changed(i: int, **fields) -> list[dict]:
    items = [dict(x) for x in ITEMS]
    items[i].update(fields)
    return items


def test_same_input_resumes_and_the_sidecar_is_written_first(tmp_path, model_dir):
    inp, out = _write(tmp_path / "items.jsonl", ITEMS), tmp_path / "scores.jsonl"
    assert _score(model_dir, inp, out) == 0
    side = json.loads(input_sidecar(out).read_text())
    assert sorted(side["requests"]) == ["q1", "q2", "q3"] and side["model"]["parts"]["weights"].startswith("files:")
    from probe.models import load_model
    from probe.models.fingerprint import model_fingerprint
    from probe.scoring.cache import ENGINE_VERSION

    assert side["model"]["fingerprint"] == model_fingerprint(load_model(str(model_dir)), ENGINE_VERSION)
    before = out.read_bytes()
    assert _score(model_dir, inp, out) == 0
    assert out.read_bytes() == before


@pytest.mark.parametrize(
    "items, field",
    [
        (_changed(0, prompt="Who has no wrinkles?"), "prompt"),
        (_changed(2, options=["No", "Yes"]), "options"),
        (_changed(1, kind="label", options=["A", "B"]), "kind"),
        (_changed(2, group="h"), "group"),
    ],
)
def test_a_changed_request_under_a_scored_id_is_refused(tmp_path, model_dir, capsys, items, field):
    out = tmp_path / "scores.jsonl"
    assert _score(model_dir, _write(tmp_path / "items.jsonl", ITEMS), out) == 0
    before = out.read_bytes()
    capsys.readouterr()
    assert _score(model_dir, _write(tmp_path / "items2.jsonl", items), out) == 1, field
    err = capsys.readouterr().err
    assert f"{out} was produced from a different input" in err and "new --output" in err, err
    assert out.read_bytes() == before  # the records are left alone


def test_a_changed_prompt_option_changes_every_prompt_and_is_refused(tmp_path, model_dir, capsys):
    inp, out = _write(tmp_path / "items.jsonl", ITEMS), tmp_path / "scores.jsonl"
    assert _score(model_dir, inp, out) == 0
    assert _score(model_dir, inp, out, "--prefill", "Answer:") == 1
    assert "3 already-scored id(s)" in capsys.readouterr().err


def test_a_different_model_is_refused(tmp_path, model_dir, other_model_dir, capsys):
    inp, out = _write(tmp_path / "items.jsonl", ITEMS), tmp_path / "scores.jsonl"
    assert _score(model_dir, inp, out) == 0
    before = out.read_bytes()
    capsys.readouterr()
    assert _score(other_model_dir, inp, out) == 1
    err = capsys.readouterr().err
    # refused before the other model loads, from its weight files (the full fingerprint is checked after loading)
    assert f"{out} holds records of another model" in err and "weights files:" in err and "nothing was loaded" in err
    assert str(model_dir) in err and str(other_model_dir) in err  # both models are named
    assert out.read_bytes() == before


def test_a_different_dtype_is_refused(tmp_path, model_dir, capsys):
    inp, out = _write(tmp_path / "items.jsonl", ITEMS), tmp_path / "scores.jsonl"
    assert _score(model_dir, inp, out) == 0
    assert _score(model_dir, inp, out, "--dtype", "bfloat16") == 1
    assert "dtype: float32/float32 -> bfloat16/bfloat16" in capsys.readouterr().err


def test_added_items_and_unscored_ids_may_change(tmp_path, model_dir):
    """Only records already written are protected: new ids, or a fix to an id not yet scored, are fine."""
    out = tmp_path / "scores.jsonl"
    assert _score(model_dir, _write(tmp_path / "one.jsonl", ITEMS[:1]), out) == 0
    grown = ITEMS + [{"id": "q4", "prompt": "The cat sat on the", "options": ["mat", "phone"]}]
    assert _score(model_dir, _write(tmp_path / "all.jsonl", grown), out) == 0
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["q1", "q2", "q3", "q4"]
    assert sorted(json.loads(input_sidecar(out).read_text())["requests"]) == ["q1", "q2", "q3", "q4"]
    # the scored records' requests are still checked after the sidecar was extended
    assert _score(model_dir, _write(tmp_path / "bad.jsonl", _changed(2, prompt="Changed?")), out) == 1


def test_records_without_a_sidecar_are_refused(tmp_path, model_dir, capsys):
    inp, out = _write(tmp_path / "items.jsonl", ITEMS), tmp_path / "scores.jsonl"
    assert _score(model_dir, inp, out) == 0
    input_sidecar(out).unlink()
    assert _score(model_dir, inp, out) == 1
    err = capsys.readouterr().err
    assert "already holds 3 record(s)" in err and "scores.jsonl.input.json is missing" in err


@pytest.mark.parametrize("text", ["{not json", "[]", '{"format": 99, "model": {}, "requests": {}}'])
def test_an_unreadable_sidecar_is_refused(tmp_path, model_dir, capsys, text):
    inp, out = _write(tmp_path / "items.jsonl", ITEMS), tmp_path / "scores.jsonl"
    assert _score(model_dir, inp, out) == 0
    input_sidecar(out).write_text(text)
    assert _score(model_dir, inp, out) == 1
    assert "scores.jsonl.input.json (the input check of" in capsys.readouterr().err


def test_an_empty_output_starts_over_with_a_fresh_sidecar(tmp_path, model_dir):
    """A stale sidecar next to an output without records (a crash before the first flush) is replaced."""
    out = tmp_path / "scores.jsonl"
    input_sidecar(out).write_text('{"stale": true}')
    out.write_text('{"id": "q1", "torn')  # a torn first line holds no record
    assert _score(model_dir, _write(tmp_path / "items.jsonl", ITEMS), out) == 0
    assert json.loads(input_sidecar(out).read_text())["format"] == 1


def test_batch_size_does_not_block_a_resume(tmp_path, model_dir):
    inp, out = _write(tmp_path / "items.jsonl", ITEMS), tmp_path / "scores.jsonl"
    assert _score(model_dir, _write(tmp_path / "one.jsonl", ITEMS[:1]), out, "--batch-size", "1") == 0
    assert _score(model_dir, inp, out, "--batch-size", "8", "--token-budget", "512") == 0


# -- the function itself -----------------------------------------------------------------------
def test_request_digest_covers_every_field():
    base = LabelRequest("a", "p", ("A", "B"))
    variants = [
        LabelRequest("b", "p", ("A", "B")),
        LabelRequest("a", "p ", ("A", "B")),
        LabelRequest("a", "p", ("B", "A")),
        LabelRequest("a", "p", ("A", "B"), group="g"),
        LabelRequest("a", "p", ("A", "B"), space="none"),
        LabelRequest("a", "p", ("A", "B"), add_special_tokens=True),
        ContinuationRequest("a", "p", ("A", "B")),
    ]
    digests = {request_digest(r) for r in [base, *variants]}
    assert len(digests) == 1 + len(variants)
    assert request_digest(LabelRequest("a", "p", ("A", "B"))) == request_digest(base)


def test_check_without_write_leaves_no_file(tmp_path, tiny_lm):
    out = tmp_path / "o.jsonl"
    reqs = [LabelRequest("a", "p", ("A", "B"))]
    check_input(out, set(), reqs, tiny_lm, write=False)
    assert not input_sidecar(out).exists()
    check_input(out, set(), reqs, tiny_lm)
    check_input(out, {"a"}, reqs, tiny_lm, write=False)  # matches
    with pytest.raises(ProbeError, match="not listed in o.jsonl.input.json, e.g. 'zz'"):
        check_input(out, {"a", "zz"}, reqs, tiny_lm, write=False)
