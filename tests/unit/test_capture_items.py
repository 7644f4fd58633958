"""Reading items for `probe activations` into scorer requests: prompt items (as `probe score` takes them) and
BBQ items."""

from __future__ import annotations

import json

import pytest

from probe.errors import InputError
from probe.commands.activations import task_item_reader
from probe.prompts.capture_items import parse_line, read_capture_items
from probe.tasks.bbq.capture import is_bbq_item
from probe.scoring.requests import ContinuationRequest, LabelRequest
from tests.unit._tiny_models import tiny_tokenizer


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_prompt_user_messages_and_score_style_options(tmp_path):
    tok = tiny_tokenizer()
    p = _write(tmp_path / "i.jsonl", [
        {"id": "a", "prompt": "Q? Answer:", "labels": ["A", "B"], "cue": "Q"},
        {"id": "b", "user": "Person A has wrinkles.", "system": "Be fair.", "prefill": "Answer:",
         "options": ["A", "B"], "kind": "label"},
        {"id": "c", "messages": [{"role": "user", "content": "Who?"}], "options": ["x y", "z"],
         "kind": "continuation"},
        {"id": 7, "prompt": "Plain"},
    ])
    got = read_capture_items(p, tok)
    items = got.requests
    assert [it.id for it in items] == ["a", "b", "c", "7"]
    assert isinstance(items[0], LabelRequest) and items[0].labels == ("A", "B") and items[0].meta == {"cue": "Q"}
    assert "a" not in got.search_from
    b = items[1]
    assert b.labels == ("A", "B") and b.prompt.endswith("Answer:")
    assert b.prompt[got.search_from["b"]:].startswith("Person A has wrinkles.")  # spans are searched from here
    assert "Be fair." in b.prompt[: got.search_from["b"]]
    # continuation options are not labels: a one-option continuation, its prompt tokenized the same way
    assert isinstance(items[2], ContinuationRequest) and "Who?" in items[2].prompt
    assert got.spec_kwargs() == {"answer_labels": {}, "search_from": got.search_from}
    plain = read_capture_items(p, tok, chat_template=False).requests[1]
    assert plain.prompt == "Be fair.\n\nPerson A has wrinkles.\nAnswer:"
    assert [r.id for r in read_capture_items(p, tok, limit=2).requests] == ["a", "b"]


def test_errors_name_line_and_field(tmp_path):
    tok = tiny_tokenizer()
    cases = [
        ({"id": "a"}, None),
        ({"id": "a", "prompt": "Q", "labels": "AB"}, "labels"),
        ({"id": "a", "prompt": "Q", "answer_label": ""}, "answer_label"),
    ]
    for row, fld in cases:
        p = _write(tmp_path / "bad.jsonl", [{"id": "ok", "prompt": "Q"}, row])
        with pytest.raises(InputError) as exc:
            read_capture_items(p, tok)
        assert exc.value.line == 2 and exc.value.field == fld
    p = _write(tmp_path / "dup.jsonl", [{"id": "a", "prompt": "Q"}, {"id": "a", "prompt": "R"}])
    with pytest.raises(InputError, match="duplicate"):
        read_capture_items(p, tok)
    with pytest.raises(ValueError, match="tokenizer"):
        parse_line({"id": "a", "user": "Q"})
    answer = parse_line({"id": "a", "prompt": "Q", "answer_label": "B"})
    assert answer.answer_label == "B" and answer.request.options == ("B",)  # the label position reads it


def test_bbq_items_use_the_project_prompt(tmp_path):
    from probe.tasks.bbq.prompts import prepare, prompts
    from probe.tasks.bbq.items import BBQItem

    tok = tiny_tokenizer()
    row = {"id": "b1", "source": "implicitbbq", "category": "age", "context": "Person A and Person B met.",
           "question": "Who is old?", "options": ["Person A", "Person B", "Unknown"], "label": 2,
           "target_index": 0, "unknown_index": 2, "question_polarity": "neg", "context_condition": "ambig",
           "context_kind": "implicit", "background": "Person A has wrinkles.", "template_id": "t3"}
    assert is_bbq_item(row) and not is_bbq_item({**row, "prompt": "x"})
    got = read_capture_items(_write(tmp_path / "b.jsonl", [row]), tok, task_items=task_item_reader(tok))
    (it,) = got.requests
    assert it.prompt == prepare(BBQItem.from_dict(row), tok, "zero_shot", "labels").prompt
    assert it.labels == tuple(prompts()["labels"])
    assert it.meta["template_id"] == "t3"
    assert it.prompt[got.search_from["b1"]:].startswith("Person A has wrinkles.")
    with pytest.raises(InputError, match="line 1"):
        read_capture_items(_write(tmp_path / "c.jsonl", [{**row, "target_index": 2}]), tok,
                           task_items=task_item_reader(tok))
