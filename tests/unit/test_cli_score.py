"""`probe score` / `probe perplexity` end to end on a tiny model saved as a local directory."""

from __future__ import annotations

import json

import pytest

from probe.cli import main
from tests.tiny import tiny_lm


def _write(path, lines):
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


ITEMS = [
    {"id": "q1", "prompt": "Who has wrinkles?", "options": ["A", "B", "C"], "kind": "label", "group": "g"},
    {"id": "q2", "prompt": "Who has smooth skin?", "options": ["Person A", "Person B"], "kind": "continuation", "group": "g"},
    {"id": "q3", "messages": [{"role": "user", "content": "Was the woman the secretary?"}], "options": ["Yes", "No"]},
]


def test_score_writes_records_and_resumes(tmp_path, model_dir):
    inp = _write(tmp_path / "items.jsonl", ITEMS)
    out = tmp_path / "scores.jsonl"
    args = ["score", "--model", str(model_dir), "--input", str(inp), "--output", str(out), "--prefill", "Answer:"]
    assert main(args) == 0
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in recs] == ["q1", "q2", "q3"]
    assert set(recs[0]) >= {"id", "logprobs", "probs", "label_mass", "pred_index"}
    assert "token_counts" in recs[1] and len(recs[1]["token_counts"]) == 2
    assert abs(sum(recs[0]["probs"]) - 1) < 1e-9
    first = out.read_text()
    assert main(args) == 0  # resume: nothing new, nothing duplicated
    assert out.read_text() == first
    assert (tmp_path / "scores.jsonl.provenance.json").is_file()


def test_score_is_deterministic_across_batch_sizes(tmp_path, model_dir):
    inp = _write(tmp_path / "items.jsonl", ITEMS)
    outs = []
    for bs in (1, 8):
        out = tmp_path / f"s{bs}.jsonl"
        assert main(["score", "--model", str(model_dir), "--input", str(inp), "--output", str(out), "--batch-size", str(bs)]) == 0
        outs.append([json.loads(x) for x in out.read_text().splitlines()])
    for a, b in zip(*outs):
        assert max(abs(x - y) for x, y in zip(a["logprobs"], b["logprobs"])) <= 1e-4


@pytest.mark.parametrize(
    "lines, message",
    [
        ([{"id": "a", "prompt": "p", "options": ["A"], "kind": "nope"}], "line 1, field 'kind'"),
        ([{"id": "a", "prompt": "p", "options": []}], "line 1, field 'options'"),
        ([{"id": "a", "prompt": "p", "options": ["A"]}, {"id": "a", "prompt": "p", "options": ["A"]}], "line 2, field 'id': duplicate"),
        ([{"id": "a", "options": ["A"]}], "line 1, field 'prompt'"),
        ([{"id": "a", "prompt": "p", "options": "A"}], "line 1, field 'options'"),
        ([{"id": "a", "prompt": "p", "options": ["Person A", "Person B"]}], "same token"),
    ],
)
def test_bad_items_fail_clearly_before_scoring(tmp_path, model_dir, capsys, lines, message):
    inp = _write(tmp_path / "bad.jsonl", lines)
    out = tmp_path / "out.jsonl"
    assert main(["score", "--model", str(model_dir), "--input", str(inp), "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert message in err and "bad.jsonl" in err
    assert not out.exists()


def test_perplexity_command(tmp_path, model_dir):
    inp = _write(tmp_path / "t.jsonl", [{"id": "t1", "text": "The cat sat on the mat."}, {"id": "t2", "text": " sat.", "prefix": "The cat"}])
    out = tmp_path / "ppl.jsonl"
    assert main(["perplexity", "--model", str(model_dir), "--input", str(inp), "--output", str(out)]) == 0
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert {"id", "ppl", "nll", "n_tokens"} <= set(recs[0])
    assert recs[0]["ppl"] > 1


def test_unknown_model_path_is_a_clear_error(tmp_path, capsys):
    inp = _write(tmp_path / "items.jsonl", ITEMS)
    code = main(["score", "--model", str(tmp_path / "missing-model"), "--input", str(inp), "--output", str(tmp_path / "o.jsonl")])
    assert code == 1
    assert "model path does not exist" in capsys.readouterr().err
