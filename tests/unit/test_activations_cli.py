"""`probe activations` end to end on a tiny model saved to a local directory."""

from __future__ import annotations

import json

import numpy as np
import pytest

from probe.activations import load
from probe.cli import main
from tests.unit._tiny_models import tiny_llama, tiny_tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    tok = tiny_tokenizer()
    tiny_llama(tok, n_layers=2).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def _write_items(path):
    rows = [
        {"id": "p1", "user": "Background: Person A has wrinkles. Who is old?", "prefill": "Answer:",
         "labels": ["A", "B"], "cue": "has wrinkles", "template_id": "t1"},
        {"id": "p2", "prompt": "Person B uses a cane. Who is old? Answer:", "labels": ["A", "B"],
         "cue": "uses a cane", "template_id": "t2"},
        {"id": "b1", "source": "implicitbbq", "category": "age", "context": "Person A and Person B met.",
         "question": "Who is old?", "options": ["Person A", "Person B", "Unknown"], "label": 2,
         "target_index": 0, "unknown_index": 2, "question_polarity": "neg", "context_condition": "ambig",
         "context_kind": "implicit", "background": "Person A has wrinkles.", "template_id": "t3"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_cli_records_and_resumes(model_dir, tmp_path, capsys):
    items = tmp_path / "items.jsonl"
    _write_items(items)
    out = tmp_path / "acts"
    argv = ["activations", "--model", str(model_dir), "--input", str(items), "--output", str(out),
            "--layers", "0,-1", "--hooks", "resid_post,mlp_out", "--positions", "last,mean:cue", "--quiet"]
    assert main(argv) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["items_run"] == 3 and stats["keys"] == 8
    acts = load(out)
    assert sorted(acts.ids) == ["b1", "p1", "p2"]
    assert acts["blocks.1.hook_mlp_out@last"].shape == (3, 64)
    b1 = acts.ids.index("b1")
    assert np.isnan(acts["blocks.0.hook_resid_post@mean:cue"][b1]).all()  # BBQ item has no 'cue'
    from probe.tasks.bbq.prompts import prompts

    assert acts.records[b1]["labels"] == list(prompts()["labels"])  # the project's BBQ prompt, labelled
    frame = acts.frame()
    assert set(frame["template_id"]) == {"t1", "t2", "t3"}
    # the chat template rendered the user item; its span was found after the template text
    assert acts.manifest["chat_template"] is True
    assert main(argv) == 0 and json.loads(capsys.readouterr().out)["items_run"] == 0  # resumed: nothing to do


def test_cli_errors(model_dir, tmp_path, capsys):
    items = tmp_path / "items.jsonl"
    _write_items(items)
    base = ["activations", "--model", str(model_dir), "--input", str(items), "--output", str(tmp_path / "o")]
    assert main(base + ["--positions", "middle"]) == 1
    assert main(base + ["--layers", "7"]) == 1
    (tmp_path / "bad.jsonl").write_text('{"id": "x", "prompt": "Q?", "cue": "zebra"}\n')
    assert main(base[:4] + [str(tmp_path / "bad.jsonl"), "--output", str(tmp_path / "o2"),
                            "--positions", "span:cue"]) == 1
    err = capsys.readouterr().err
    assert "bad.jsonl, line 1, field 'cue'" in err
