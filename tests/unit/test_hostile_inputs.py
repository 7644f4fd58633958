"""Hostile input: every malformed file gives a clear error naming file, line and field; the CLI exits non-zero
and leaves no output file that looks complete.

Each case builds a small hand-made file in ``tmp_path`` and calls the real loader
(or ``probe.cli.main``). A case that shows a loader giving a poor error (a
traceback, or no file/line) is marked ``xfail(strict=True)`` with the fix needed:
the loaders belong to other modules' owners, and strict xfail turns into a
failure the day the fix lands, so the marker is then removed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import pytest

from probe.cli import main
from probe.errors import InputError, ProbeError


# --- helpers --------------------------------------------------------------------------------------------------

def _expect(fn: Callable[[], Any], path: Path, line: int | None = None, field: str | None = None,
            match: str | None = None, exc: type[Exception] = InputError) -> Exception:
    """``fn()`` must raise ``exc`` whose message names ``path`` (and ``line`` / ``field`` when given)."""
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    assert path.name in msg, f"error does not name the file: {msg}"
    if line is not None:
        assert f"line {line}" in msg, f"error does not name line {line}: {msg}"
    if field is not None:
        assert f"field {field!r}" in msg, f"error does not name field {field!r}: {msg}"
    if match is not None:
        assert re.search(match, msg), msg
    return info.value


def _jsonl(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def _csv(path: Path, text: str | bytes) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _xfail(reason: str):
    return pytest.mark.xfail(strict=True, reason=reason)


@pytest.fixture(scope="module")
def tokenizer():
    from tests.tiny import tiny_tokenizer

    return tiny_tokenizer()


GOOD = {"id": "q1", "prompt": "Who has wrinkles?", "options": ["A", "B", "C"]}


# --- 1. probe score item files (probe.prompts.items.read_score_items) -----------------------------------------

SCORE_ITEM_CASES = [
    # (case id, lines of the file (dicts or raw strings), bad line, field, message pattern)
    ("invalid-json", [GOOD, '{"id": "q2", "prompt": "x", "options": ["A"'], 2, None, "invalid JSON"),
    ("json-array-not-object", [GOOD, "[1, 2, 3]"], 2, None, "expected a JSON object"),
    ("json-scalar", ['"just a string"'], 1, None, "expected a JSON object"),
    ("missing-id", [{"prompt": "p", "options": ["A"]}], 1, "id", "missing"),
    ("missing-options", [{"id": "a", "prompt": "p"}], 1, "options", "missing"),
    ("missing-prompt-and-messages", [{"id": "a", "options": ["A"]}], 1, "prompt", "non-empty 'prompt'"),
    ("id-wrong-type-list", [{**GOOD, "id": ["a"]}], 1, "id", "non-empty string or integer"),
    ("id-bool", [{**GOOD, "id": True}], 1, "id", "non-empty string or integer"),
    ("id-empty", [{**GOOD, "id": ""}], 1, "id", "non-empty"),
    ("id-nan", ['{"id": NaN, "prompt": "p", "options": ["A"]}'], 1, "id", "non-empty string or integer"),
    ("duplicate-ids", [GOOD, {**GOOD, "prompt": "again"}], 2, "id", "duplicate id 'q1' \\(first on line 1\\)"),
    ("duplicate-ids-int-vs-str", [{**GOOD, "id": 7}, {**GOOD, "id": "7"}], 2, "id", "duplicate"),
    ("empty-options", [{**GOOD, "options": []}], 1, "options", "non-empty list"),
    ("options-not-list", [{**GOOD, "options": "A"}], 1, "options", "list"),
    ("options-non-string", [{**GOOD, "options": ["A", 2]}], 1, "options", "strings"),
    ("options-empty-string", [{**GOOD, "options": ["A", ""]}], 1, "options", "non-empty strings"),
    ("options-duplicate-labels", [{**GOOD, "options": ["A", "A"]}], 1, "options", "duplicates"),
    ("unknown-kind", [{**GOOD, "kind": "multiple-choice"}], 1, "kind", "unknown kind 'multiple-choice'"),
    ("group-wrong-type", [{**GOOD, "group": {"a": 1}}], 1, "group", "string or integer"),
    ("prompt-wrong-type", [{**GOOD, "prompt": 42}], 1, "prompt", "non-empty 'prompt'"),
    ("prompt-empty", [{**GOOD, "prompt": ""}], 1, "prompt", "non-empty 'prompt'"),
    ("messages-not-list", [{"id": "a", "messages": "hi", "options": ["A"]}], 1, "messages", "non-empty list"),
    ("messages-empty", [{"id": "a", "messages": [], "options": ["A"]}], 1, "messages", "non-empty list"),
    ("bom-on-a-later-line", [GOOD, "\ufeff" + json.dumps({**GOOD, "id": "q2"})], 2, None, "invalid JSON"),
    ("prompt-and-messages", [{**GOOD, "messages": [{"role": "user", "content": "x"}]}], 1, "messages",
     "either 'prompt' or 'messages', not both"),
    ("lone-surrogate-in-prompt", ['{"id": "a", "prompt": "x\\ud800", "options": ["A"]}'], 1, "prompt",
     "lone surrogate"),
    ("error-on-later-line", [GOOD, {**GOOD, "id": "q2"}, {**GOOD, "id": "q3"}, {**GOOD, "id": "q4", "options": 5}],
     4, "options", "list"),
]


@pytest.mark.parametrize("lines, line, field, match", [c[1:] for c in SCORE_ITEM_CASES],
                         ids=[c[0] for c in SCORE_ITEM_CASES])
def test_score_items_rejected(tmp_path, tokenizer, lines, line, field, match):
    from probe.prompts.items import PromptStyle, read_score_items

    path = _jsonl(tmp_path / "items.jsonl", lines)
    _expect(lambda: read_score_items(path, tokenizer, PromptStyle()), path, line, field, match)


def test_score_items_extra_fields_are_kept_not_rejected(tmp_path, tokenizer):
    """Extra fields are item metadata (category, label, ...) and pass through: documented, not an error."""
    from probe.prompts.items import PromptStyle, read_score_items

    path = _jsonl(tmp_path / "items.jsonl", [{**GOOD, "category": "Age", "label": 2}])
    [(obj, req)] = read_score_items(path, tokenizer, PromptStyle())
    assert obj["category"] == "Age" and req.id == "q1"


def test_message_without_content_names_the_field(tmp_path, tokenizer):
    from probe.prompts.items import PromptStyle, read_score_items

    path = _jsonl(tmp_path / "items.jsonl", [{"id": "a", "messages": [{"role": "user"}], "options": ["A"]}])
    _expect(lambda: read_score_items(path, tokenizer, PromptStyle()), path, 1, "messages")


@pytest.mark.parametrize("content, line, match", [
    (b'{"id": "a"}\n{"id": "\xff\xfe"}\n', 2, "not valid UTF-8"),
    (b"\xef\xbb\xbf\xff" + b"x" * 10 + b"\n", 1, "not valid UTF-8"),
    (b'{"id": "a"}\n' + b"[" * 100_000 + b"]" * 100_000 + b"\n", 2, "nested"),
    (b'{"id": "a"}\n{"id": "b", "junk": "' + b"x" * 2_000_000 + b'\n', 2, "invalid JSON"),
], ids=["non-utf8", "non-utf8-after-bom", "deeply-nested-json", "huge-unterminated-line"])
def test_iter_jsonl_hostile_bytes(tmp_path, content, line, match):
    from probe.io import iter_jsonl

    path = tmp_path / "in.jsonl"
    path.write_bytes(content)
    _expect(lambda: list(iter_jsonl(path, required=("id",))), path, line, None, match)


def test_iter_jsonl_input_is_a_directory(tmp_path):
    from probe.io import iter_jsonl

    d = tmp_path / "items.jsonl"
    d.mkdir()
    _expect(lambda: list(iter_jsonl(d)), d, None, None, "not a file")


@pytest.mark.parametrize("lines, line, field", [
    ([{"id": "t", "prefix": "x"}], 1, "text"),
    ([{"id": "t", "text": 5}], 1, "text"),
    ([{"id": "t", "text": ""}], 1, "text"),
    ([{"id": "t", "text": "a", "prefix": ["x"]}], 1, "prefix"),
    ([{"id": "t", "text": "a"}, {"id": "t", "text": "b"}], 2, "id"),
    ([{"id": None, "text": "a"}], 1, "id"),
], ids=["missing-text", "text-int", "text-empty", "prefix-list", "duplicate-id", "id-null"])
def test_perplexity_items_rejected(tmp_path, lines, line, field):
    from probe.prompts.items import read_perplexity_items

    path = _jsonl(tmp_path / "texts.jsonl", lines)
    _expect(lambda: read_perplexity_items(path), path, line, field)


# --- 2. the CLI: exit codes and no partial output --------------------------------------------------------------

def _score(model_dir: Path, inp: Path, out: Path, *extra: str) -> int:
    return main(["score", "--model", str(model_dir), "--input", str(inp), "--output", str(out), *extra])


def _no_output(out: Path) -> None:
    assert not out.exists(), "a failed run must not leave an output file"
    assert not out.with_name(out.name + ".provenance.json").exists()


def test_cli_prompt_longer_than_context_window(tmp_path, model_dir, capsys):
    # the tiny model has 256 positions; this prompt is thousands of tokens
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD, {"id": "long", "prompt": "wrinkles " * 3000, "options": ["A", "B"]}])
    out = tmp_path / "out.jsonl"
    assert _score(model_dir, inp, out) == 1
    err = capsys.readouterr().err
    assert "items.jsonl, line 2, field 'prompt'" in err and "Traceback" not in err
    _no_output(out)


def test_cli_bad_item_fails_before_any_output(tmp_path, model_dir, capsys):
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD, {**GOOD, "id": "q2", "options": []}])
    out = tmp_path / "out.jsonl"
    assert _score(model_dir, inp, out) == 1
    assert "items.jsonl, line 2, field 'options'" in capsys.readouterr().err
    _no_output(out)


def test_cli_empty_input_file_is_an_error(tmp_path, model_dir, capsys):
    inp = tmp_path / "items.jsonl"
    inp.write_text("\n\n")
    out = tmp_path / "out.jsonl"
    assert _score(model_dir, inp, out) == 1
    assert "items.jsonl" in capsys.readouterr().err
    _no_output(out)


def test_cli_missing_input_file(tmp_path, model_dir, capsys):
    out = tmp_path / "out.jsonl"
    assert _score(model_dir, tmp_path / "nope.jsonl", out) == 1
    assert "nope.jsonl: file does not exist" in capsys.readouterr().err
    _no_output(out)


def test_cli_output_is_a_directory(tmp_path, model_dir, capsys):
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    out = tmp_path / "out.jsonl"
    out.mkdir()
    assert _score(model_dir, inp, out) == 1
    err = capsys.readouterr().err
    assert "out.jsonl" in err and "directory" in err


def test_cli_model_path_does_not_exist(tmp_path, capsys):
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    out = tmp_path / "out.jsonl"
    assert _score(tmp_path / "no-such-model", inp, out) == 1
    assert "model path does not exist" in capsys.readouterr().err
    _no_output(out)


def test_cli_model_path_is_a_plain_file(tmp_path, capsys):
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    fake = tmp_path / "model.bin"
    fake.write_bytes(b"\0" * 64)
    out = tmp_path / "out.jsonl"
    assert _score(fake, inp, out) == 1
    assert "not a .gguf file" in capsys.readouterr().err
    _no_output(out)


def test_cli_truncated_gguf(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PROBE_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "model.gguf"
    # valid magic and version, then the file stops in the middle of the header
    gguf.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (10).to_bytes(8, "little") + b"\x05")
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    out = tmp_path / "out.jsonl"
    assert _score(gguf, inp, out) == 1
    err = capsys.readouterr().err
    assert "model.gguf" in err and "Traceback" not in err
    _no_output(out)
    assert not list((tmp_path / "cache").rglob("*.safetensors")), "no half conversion may be cached"


def test_cli_empty_model_directory(tmp_path, capsys):
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    empty = tmp_path / "empty-model"
    empty.mkdir()
    out = tmp_path / "out.jsonl"
    assert _score(empty, inp, out) == 1
    assert "cannot load model" in capsys.readouterr().err
    _no_output(out)


@pytest.mark.parametrize("argv", [
    ["score", "--input", "x.jsonl"],  # --output missing
    ["score", "--input", "x.jsonl", "--output", "o.jsonl", "--batch-size", "0"],
    ["score", "--input", "x.jsonl", "--output", "o.jsonl", "--batch-size", "abc"],
    ["score", "--input", "x.jsonl", "--output", "o.jsonl", "--flush-every", "-3"],
    ["score", "--input", "x.jsonl", "--output", "o.jsonl", "--dtype", "float8"],
    ["score", "--input", "x.jsonl", "--output", "o.jsonl", "--no-such-flag"],
    ["score", "--input", "x.jsonl", "--output", "o.jsonl", "--chat-template", "--no-chat-template"],
    ["no-such-command"],
], ids=["missing-output", "batch-size-0", "batch-size-abc", "flush-every-negative", "bad-dtype", "unknown-flag",
        "exclusive-flags", "unknown-command"])
def test_cli_bad_arguments_exit_2(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "error" in capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists()


# --- 3. data loaders (probe/data/*.py) -------------------------------------------------------------------------

CROWS_HEADER = ",sent_more,sent_less,stereo_antistereo,bias_type\n"
CROWS_ROW = '0,"He is old.","She is young.",stereo,age\n'


@pytest.mark.parametrize("text, line, field", [
    (",sent_more,sent_less,bias_type\n0,a,b,age\n", 1, "stereo_antistereo"),
    (CROWS_HEADER + CROWS_ROW + '1,"a","b",sideways,age\n', 3, "stereo_antistereo"),
    (CROWS_HEADER + CROWS_ROW + '1,"","b",stereo,age\n', 3, "sent_more"),
    (CROWS_HEADER + CROWS_ROW + '0,"a","b",stereo,age\n', None, None),
    (CROWS_HEADER + '0,"unterminated,b,stereo,age\n1,a,b,stereo,age\n', None, None),
], ids=["missing-column", "unknown-direction", "empty-field", "duplicate-row-id", "bad-csv-quote"])
def test_crows_pairs_rejected(tmp_path, text, line, field):
    from probe.tasks.crows_pairs.data import load_crows_pairs

    path = _csv(tmp_path / "crows.csv", text)
    _expect(lambda: load_crows_pairs(path), path, line, field)


@pytest.mark.parametrize("content", [
    pytest.param(b""),
    pytest.param(CROWS_HEADER.encode() + b'0,"caf\xe9","b",stereo,age\n',
                 ),
], ids=["empty-file", "non-utf8"])
def test_crows_pairs_unreadable(tmp_path, content):
    from probe.tasks.crows_pairs.data import load_crows_pairs

    path = _csv(tmp_path / "crows.csv", content)
    _expect(lambda: load_crows_pairs(path), path)


CMP_HEADER = "instance_id,context_pair_id,task_type,is_focused_p,target_1,target_2,prompts\n"


def _cmp_row(iid: int, cp: Any, tt: str, focused: str, t1: str, t2: str, prompts: str = '"[""x""]"') -> str:
    return f"{iid},{cp},{tt},{focused},{t1},{t2},{prompts}\n"


@pytest.mark.parametrize("text, line, field", [
    ("instance_id,context_pair_id,task_type,is_focused_p,target_1,target_2\n", 1, "prompts"),
    (CMP_HEADER + _cmp_row(0, "abc", "iso", "True", "a", ""), 2, "context_pair_id"),
    (CMP_HEADER + _cmp_row(0, 1, "compare", "True", "a", ""), 2, "task_type"),
    (CMP_HEADER + _cmp_row(0, 1, "iso", "yes", "a", ""), 2, "is_focused_p"),
    (CMP_HEADER + _cmp_row(0, 1, "iso", "True", "a", "") + _cmp_row(1, 1, "iso", "True", "a", ""), 3,
     "context_pair_id"),
    (CMP_HEADER + _cmp_row(0, 1, "iso", "True", "a", ""), 2, "task_type"),
    (CMP_HEADER + _cmp_row(0, 1, "iso", "True", "a", "", "not json") + _cmp_row(1, 1, "iso", "False", "b", "")
     + _cmp_row(2, 1, "cmp", "True", "a", "b") + _cmp_row(3, 1, "cmp", "False", "b", "a"), 2, "prompts"),
], ids=["missing-column", "pair-id-not-int", "unknown-task-type", "bad-bool", "duplicate-row", "missing-rows",
        "prompts-not-json"])
def test_cmp_iso_csv_rejected(tmp_path, text, line, field):
    from probe.tasks.cmp_iso.data import load_csv

    path = _csv(tmp_path / "bench.csv", text)
    _expect(lambda: load_csv(path), path, line, field)


def test_cmp_iso_csv_non_utf8(tmp_path):
    from probe.tasks.cmp_iso.data import load_csv

    path = _csv(tmp_path / "bench.csv", CMP_HEADER.encode() + b"0,1,iso,True,caf\xe9,,x\n")
    _expect(lambda: load_csv(path), path)


def test_cmp_iso_csv_missing_file(tmp_path):
    from probe.tasks.cmp_iso.data import load_csv

    path = tmp_path / "nope.csv"
    _expect(lambda: load_csv(path), path)


HBB_HEADER = "Context,s1,s2,bias type1,bias type2,bias_type\n"


@pytest.mark.parametrize("text, line, field", [
    ("Context,s1,s2\nx,a,b\n", 1, "bias type1"),
    (HBB_HEADER + "A [[X]] walks in.,a,b,t1,t2,age\nNo slot here.,a,b,t1,t2,age\n", 3, "Context"),
    (HBB_HEADER + "A [[X]] walks in.,,b,t1,t2,age\n", 2, "s1"),
], ids=["missing-column", "no-slot", "empty-option"])
def test_hbb_concepts_rejected(tmp_path, text, line, field):
    from probe.tasks.hbb.data import load_concepts

    path = _csv(tmp_path / "questions.csv", text)
    _expect(lambda: load_concepts(path), path, line, field)


@pytest.mark.parametrize("text, field", [
    ('{"age": {}', None),
    ('{"age": {"young": [], "old": []}}', None),
], ids=["bad-json", "missing-section"])
def test_hbb_descriptors_rejected(tmp_path, text, field):
    from probe.tasks.hbb.data import load_descriptors

    path = _csv(tmp_path / "descriptors.json", text)
    _expect(lambda: load_descriptors(path), path, None, field)


def test_hbb_descriptors_not_an_object(tmp_path):
    from probe.tasks.hbb.data import JSON_SECTION, load_descriptors

    path = _csv(tmp_path / "descriptors.json", json.dumps([*JSON_SECTION.values(), "name"]))
    _expect(lambda: load_descriptors(path), path)


@pytest.mark.parametrize("lines, line, field", [
    ([{"concept_id": 1, "s1": ["a"], "s2": "b"}], 1, "s2"),
    ([{"concept_id": "1", "s1": ["a"], "s2": ["b"]}], 1, "concept_id"),
    ([{"concept_id": 1, "s1": ["a"], "s2": ["b"]}, {"concept_id": 1, "s1": ["a"], "s2": ["b"]}], 2, "concept_id"),
    ([{"concept_id": 1, "s1": ["a"]}], 1, "s2"),
], ids=["options-not-list", "id-wrong-type", "duplicate-id", "missing-field"])
def test_hbb_sg_variations_rejected(tmp_path, lines, line, field):
    from probe.tasks.hbb.data import load_sg_variations

    path = _jsonl(tmp_path / "sg.jsonl", lines)
    _expect(lambda: load_sg_variations(path), path, line, field)


def _bbq_record(**over: Any) -> dict:
    rec = {
        "example_id": 0, "question_index": "1", "question_polarity": "neg", "context_condition": "ambig",
        "category": "Age", "context": "A grandfather and a grandson met.", "question": "Who forgot?",
        "ans0": "The grandfather", "ans1": "The grandson", "ans2": "Unknown", "label": 2,
        "answer_info": {"ans0": ["grandfather", "old"], "ans1": ["grandson", "nonOld"], "ans2": ["Unknown", "unknown"]},
        "additional_metadata": {"subcategory": "None", "stereotyped_groups": ["old"], "version": "a", "source": "x"},
    }
    rec.update(over)
    return rec


@pytest.mark.parametrize("rec, line, field", [
    ({k: v for k, v in _bbq_record().items() if k != "context"}, 1, "context"),
    (_bbq_record(label=7), 1, None),
    (_bbq_record(label="two"), 1, None),
    (_bbq_record(question_polarity="sideways"), 1, None),
    (_bbq_record(answer_info={"ans0": ["a", "old"], "ans1": ["b", "nonOld"], "ans2": ["c", "young"]}), 1, "answer_info"),
    (_bbq_record(additional_metadata={"stereotyped_groups": ["martian"]}), 1, "additional_metadata.stereotyped_groups"),
], ids=["missing-field", "label-out-of-range", "label-not-int", "unknown-polarity", "no-unknown-answer",
        "unknown-target-group"])
def test_bbq_jsonl_rejected(tmp_path, rec, line, field):
    from probe.tasks.bbq.data import load_bbq_jsonl

    path = _jsonl(tmp_path / "Age.jsonl", [_bbq_record(), rec] if line == 2 else [rec])
    _expect(lambda: load_bbq_jsonl(path), path, line, field)


def test_bbq_jsonl_wrong_type_answer_info(tmp_path):
    from probe.tasks.bbq.data import load_bbq_jsonl

    path = _jsonl(tmp_path / "Age.jsonl", [_bbq_record(answer_info=["a", "b", "c"])])
    _expect(lambda: load_bbq_jsonl(path), path, 1, "answer_info")


TEMPLATE_HEADER = ("Q_id,Category,Known_stereotyped_groups,Ambiguous_Context,Disambiguating_Context,"
                   "Question_negative_stereotype,Question_non_negative,Answer_negative,Answer_non_negative\n")


def test_bbq_template_missing_column(tmp_path):
    from probe.tasks.bbq.templates import read_templates

    path = _csv(tmp_path / "Age.csv", "Q_id,Category\n1,Age\n")
    _expect(lambda: read_templates(path), path, None, "Known_stereotyped_groups")


def test_bbq_template_bad_stereotyped_groups(tmp_path):
    from probe.tasks.bbq.templates import read_templates

    path = _csv(tmp_path / "Age.csv", TEMPLATE_HEADER + '1,Age,"[old",ctx {{NAME1}},d,q?,q2?,{{NAME1}},{{NAME2}}\n')
    _expect(lambda: read_templates(path), path, 2, "Known_stereotyped_groups")


def test_bbq_template_unknown_slot(tmp_path):
    from probe.tasks.bbq.templates import read_templates

    path = _csv(tmp_path / "Age.csv", TEMPLATE_HEADER
                + "1,Age,\"['old']\",{{NAME1}} met {{NAME3}}.,d,Who forgot?,Who did not?,{{NAME1}},{{NAME2}}\n")
    _expect(lambda: read_templates(path), path, 2, "Ambiguous_Context", "NAME3")


@pytest.mark.parametrize("name", ["nonexistent"])
def test_bharatbbq_missing_file(tmp_path, name):
    from probe.tasks.bbq.bharatbbq import load_bharatbbq_examples

    _expect(lambda: load_bharatbbq_examples(tmp_path / name), Path("Caste_examples.csv"), None, None, "not found")


BHARAT_HEADER = "Qid,Context_type,Context,Question,Question_polarity,Option1,Option2,Option3,Label,Target,id\n"


@pytest.mark.parametrize("row, field", [
    ("1,amb,ctx,q?,neg,A,B,Unknown,x,1,7\n", "Label/Target"),
    ("1,vague,ctx,q?,neg,A,B,Unknown,3,1,7\n", "Context_type/Question_polarity"),
    ("1,amb,ctx,q?,neg,A,B,C,3,1,7\n", "Option1..3"),
], ids=["label-not-int", "unknown-context-type", "no-unknown-option"])
def test_bharatbbq_rows_rejected(tmp_path, row, field):
    from probe.tasks.bbq.bharatbbq import load_bharatbbq_examples

    _csv(tmp_path / "Caste_examples.csv", BHARAT_HEADER + row)
    _expect(lambda: load_bharatbbq_examples(tmp_path), tmp_path / "Caste_examples.csv", 2, field)


# --- 4. probe activations item files (probe.prompts.capture_items) and run configs ---------------------------

@pytest.mark.parametrize("lines, line, field, match", [
    (['{"id": "a", "prompt": "Q", "labels": "AB"}'], 1, "labels", "list of non-empty strings"),
    (['{"id": "a", "prompt": "Q", "answer_label": ""}'], 1, "answer_label", "non-empty"),
    (['{"id": "a", "prompt": "Q"}', '{"id": "a", "prompt": "R"}'], 2, "id", "duplicate"),
    (['{"id": "a"}'], 1, None, "needs a non-empty"),
    (['{"id": "b1", "context": "c", "question": "q?", "options": ["A", "B", "Unknown"], "label": 9}'], 1, None,
     None),
], ids=["labels-not-a-list", "empty-answer-label", "duplicate-id", "no-prompt", "bad-bbq-item"])
def test_capture_items_rejected(tmp_path, tokenizer, lines, line, field, match):
    from probe.commands.activations import task_item_reader
    from probe.prompts.capture_items import read_capture_items

    path = _csv(tmp_path / "items.jsonl", "".join(x + "\n" for x in lines))
    _expect(lambda: read_capture_items(path, tokenizer, task_items=task_item_reader(tokenizer)), path, line, field,
            match)


@pytest.mark.parametrize("text", ["task: [unclosed\n", "- a\n- b\n", "!!python/object/apply:os.system ['true']\n",
                                  "model: smollm2\n"],
                         ids=["invalid-yaml", "not-a-mapping", "python-tag", "no-task"])
def test_run_config_malformed_yaml(tmp_path, text):
    from probe.commands.run import read_config

    path = _csv(tmp_path / "run.yaml", text)
    _expect(lambda: read_config(path), path, exc=ProbeError)
    _expect(lambda: read_config(tmp_path / "missing.yaml"), tmp_path / "missing.yaml", exc=ProbeError)


def test_probe_errors_are_user_facing():
    """Every loader error above is an InputError, hence a ProbeError the CLI prints without a traceback."""
    assert issubclass(InputError, ProbeError) and issubclass(InputError, ValueError)


# --- 5. reports and run directories from hostile data ----------------------------------------------------------

EVIL = '"><img src=x onerror=alert(4)>'


def _fake_run(d: Path, task: str, model: str, tables: dict[str, str]) -> Path:
    """A run directory as ``probe report`` reads it: summary.json and the task's own tables/*.csv."""
    (d / "tables").mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"task": task, "model": model, "n_items": 1}), encoding="utf-8")
    for name, text in tables.items():
        (d / "tables" / f"{name}.csv").write_text(text, encoding="utf-8")
    return d


def _live_markup(page: str) -> list[str]:
    """Every element of ``page`` (as a browser parses it) that the report itself does not write: an unknown
    tag, an ``on*`` handler attribute, or an image that is not the report's own inline PNG."""
    from html.parser import HTMLParser

    own = {"html", "head", "meta", "link", "title", "style", "body", "header", "h1", "h2", "h3", "p", "nav", "b",
           "ol", "li", "a", "main", "section", "figure", "div", "table", "thead", "tbody", "tr", "th", "td",
           "figcaption", "strong", "img"}
    bad: list[str] = []

    class Parser(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if (tag not in own or any(k.startswith("on") for k, _ in attrs)
                    or (tag == "img" and not str(dict(attrs).get("src", "")).startswith("data:image/png"))):
                bad.append(self.get_starttag_text())

    Parser().feed(page)
    return bad


def test_report_html_escapes_every_name_from_data(tmp_path):
    """Task, model, directory and table file names with markup: no live element, ids from the one sanitiser."""
    run = _fake_run(tmp_path / EVIL, EVIL, EVIL, {EVIL: "a,b\n<script>x</script>,2\n"})
    out = tmp_path / "report"
    assert main(["report", str(run), "--output", str(out)]) == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    assert _live_markup(page) == [], _live_markup(page)
    ids = re.findall(r'\b(?:id|href)="#?([^"]*)"', page)
    assert ids and all(re.fullmatch(r"[A-Za-z0-9_.+:,-]*", i) for i in ids), ids
    md = (out / "report.md").read_text(encoding="utf-8")
    # Markdown escapes with a backslash ("\\<img" reads as the text "<img"): no tag may open unescaped
    assert not re.search(r"(?<!\\)<(?:img|script)", md), md
    assert all(re.fullmatch(r"[A-Za-z0-9_.+-]+", p.name) for p in (out / "tables").iterdir())


def test_report_never_writes_outside_its_output(tmp_path):
    """A summary.json naming its task '../../../../ESCAPED' writes only under --output."""
    base = tmp_path / "a" / "b" / "c"
    run = _fake_run(base / "run", "../../../../ESCAPED", "m", {"by_category_labels": "x,y\n1,2\n"})
    out = base / "report"
    before = {p for p in tmp_path.rglob("*")}
    assert main(["report", str(run), "--output", str(out)]) == 0
    new = {p for p in tmp_path.rglob("*")} - before
    assert new and all(p == out or out in p.parents for p in new), sorted(map(str, new - {p for p in new if out in p.parents}))
    assert not [p for p in tmp_path.rglob("*ESCAPED*") if out not in p.parents]


def test_inside_refuses_a_path_outside_the_root(tmp_path):
    from probe.io import inside

    with pytest.raises(ProbeError, match="outside the output directory"):
        inside(tmp_path / "out", tmp_path / "out" / ".." / "x.md")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "link").symlink_to(tmp_path)
    with pytest.raises(ProbeError, match="outside"):
        inside(tmp_path / "out", tmp_path / "out" / "link" / "x.md")


# --- 6. two writers, remote code from data, run directories that hold something else --------------------------

_HOLD_LOCK = """
import sys
from probe.io import OutputLock
with OutputLock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.read()  # held until the test closes our stdin
"""


@pytest.fixture
def held_lock():
    """``held_lock(path)``: another process holds the OS lock on ``path`` until the test ends; returns its pid."""
    import os
    import subprocess
    import sys

    procs = []

    def hold(path: Path) -> int:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        p = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
        procs.append(p)
        assert p.stdout.readline().strip() == "locked"
        return p.pid

    yield hold
    for p in procs:
        p.stdin.close()
        p.wait(timeout=60)


def test_second_score_writer_is_refused(tmp_path, model_dir, capsys, held_lock):
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD, {**GOOD, "id": "q2"}])
    out = tmp_path / "out.jsonl"
    pid = held_lock(tmp_path / "out.jsonl.lock")
    assert _score(model_dir, inp, out) == 1
    err = capsys.readouterr().err
    assert f"pid {pid}" in err and "another probe process" in err and "Traceback" not in err
    assert not out.exists() or out.read_text() == ""


def test_score_lock_is_released_and_reentrant(tmp_path, model_dir):
    """After a run the lock file is gone; a second run in the same process resumes (0 duplicates)."""
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD, {**GOOD, "id": "q2"}])
    out = tmp_path / "out.jsonl"
    assert _score(model_dir, inp, out) == 0
    assert _score(model_dir, inp, out) == 0
    assert not (tmp_path / "out.jsonl.lock").exists()
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["q1", "q2"]


def test_second_task_run_writer_is_refused(tmp_path, tiny_lm, held_lock):
    import probe

    out = tmp_path / "run"
    out.mkdir()
    pid = held_lock(out / ".probe.lock")
    with pytest.raises(ProbeError, match=f"another probe process \\(pid {pid}\\)"):
        probe.evaluate(tiny_lm, "demo", limit=2, output=out, progress=False)
    assert not (out / "records.jsonl").exists()


def test_resume_removes_a_duplicated_record_line_and_says_so(tmp_path, model_dir, capsys):
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD, {**GOOD, "id": "q2"}])
    out = tmp_path / "out.jsonl"
    assert _score(model_dir, inp, out) == 0
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines + [lines[0]]) + "\n")  # a hand-duplicated line (or two writers)
    capsys.readouterr()
    assert _score(model_dir, inp, out) == 0
    assert "removed 1 duplicate record line" in capsys.readouterr().err
    assert out.read_text().splitlines() == lines


def test_resume_refuses_two_different_records_under_one_id(tmp_path, model_dir, capsys):
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD, {**GOOD, "id": "q2"}])
    out = tmp_path / "out.jsonl"
    assert _score(model_dir, inp, out) == 0
    lines = out.read_text().splitlines()
    other = {**json.loads(lines[0]), "pred_index": 99}
    out.write_text("\n".join(lines + [json.dumps(other)]) + "\n")
    assert _score(model_dir, inp, out) == 1
    err = capsys.readouterr().err
    assert "line 3, field 'id'" in err and "duplicate record id 'q1' (first on line 1)" in err
    assert len(out.read_text().splitlines()) == 3  # untouched


def _remote_code_model(tmp_path: Path) -> tuple[Path, Path]:
    """A model folder whose config.json maps to its own Python file; that file leaves a marker when run."""
    d = tmp_path / "evil-model"
    d.mkdir()
    marker = tmp_path / "REMOTE_CODE_RAN"
    (d / "config.json").write_text(json.dumps({"model_type": "evil", "auto_map": {
        "AutoConfig": "modeling_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilModel"}}))
    (d / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return d, marker


@pytest.mark.parametrize("how", ["set", "config"])
def test_trust_remote_code_only_from_the_command_line(tmp_path, capsys, how):
    d, marker = _remote_code_model(tmp_path)
    out = tmp_path / "run"
    if how == "set":
        argv = ["run", "demo", "--model", str(d), "--set", "trust_remote_code=true", "--output", str(out)]
    else:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(f"task: demo\nmodel: {d}\ntrust_remote_code: true\n")
        argv = ["run", str(cfg), "--output", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "trust_remote_code cannot be set here" in err and "--trust-remote-code" in err
    assert not marker.exists() and not out.exists()


def test_analysis_never_takes_trust_remote_code_from_a_run_directory():
    from probe.studies.analyze.run import _KEPT

    assert "trust_remote_code" not in _KEPT


def test_run_refuses_a_folder_that_holds_no_run(tmp_path, tiny_lm):
    import probe

    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.md").write_text("my own notes\n")
    with pytest.raises(ProbeError, match="holds files but no probe run"):
        probe.evaluate(tiny_lm, "demo", limit=2, output=out, progress=False)
    assert (out / "report.md").read_text() == "my own notes\n" and sorted(p.name for p in out.iterdir()) == ["report.md"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ProbeError, match="not a directory"):
        probe.evaluate(tiny_lm, "demo", limit=2, output=afile, progress=False)


# --- 7. a shared score cache rewritten by someone without its key ---------------------------------------------

def _cache_with_one_row(tmp_path: Path):
    from probe.scoring.cache import ScoreCache
    from probe.scoring.engine import RowOutput

    path = tmp_path / "scores.sqlite"
    key = ((1, 5, 7), 3, (8, 9))
    with ScoreCache(path, "fp") as cache:
        cache.put_many({key: RowOutput({8: -0.5, 9: -3.0}, [], True)})
    return path, key


def test_score_cache_value_swapped_and_rehashed_is_detected(tmp_path):
    """A writer of the shared file swaps the two labels' scores and recomputes an unkeyed hash: refused."""
    import hashlib
    import sqlite3
    import struct

    from probe.scoring.cache import MAC_BYTES, ScoreCache

    path, key = _cache_with_one_row(tmp_path)
    db = sqlite3.connect(path)
    (k, blob), = db.execute("SELECT key, value FROM scores").fetchall()
    body = bytearray(blob[:-MAC_BYTES])
    a, b = struct.unpack_from("<dd", body, 10 + 16)
    struct.pack_into("<dd", body, 10 + 16, b, a)
    forged = bytes(body) + hashlib.blake2b(k + bytes(body), digest_size=MAC_BYTES).digest()
    db.execute("UPDATE scores SET value = ? WHERE key = ?", (forged, k))
    db.commit()
    db.close()
    with ScoreCache(path, "fp") as cache, pytest.raises(ProbeError, match="MAC mismatch"):
        cache.get_many([key])


def test_score_cache_key_file_is_user_only_and_required(tmp_path):
    import os
    import stat

    from probe.scoring.cache import ScoreCache

    path, key = _cache_with_one_row(tmp_path)
    key_file = tmp_path / "scores.sqlite.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    os.chmod(key_file, 0o644)
    with pytest.raises(ProbeError, match="readable by you only"):
        ScoreCache(path, "fp")
    key_file.unlink()
    with pytest.raises(ProbeError, match="key file .* is missing"):
        ScoreCache(path, "fp")



# --- 8. every OS error, encoding error and bad value: one line, exit 1, before the model loads ----------------

def _one_line_error(capsys, *needles: str) -> str:
    err = capsys.readouterr().err
    lines = re.findall(r"probe: error:[^\n]*", err)  # a progress bar may share the line (\r)
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_bom_at_the_start_is_read(tmp_path, tokenizer):
    from probe.prompts.items import PromptStyle, read_score_items

    path = tmp_path / "items.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode() + b"\n")
    [(obj, req)] = read_score_items(path, tokenizer, PromptStyle())
    assert req.id == "q1"


def test_cli_output_parent_is_a_file(tmp_path, model_dir, capsys):
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    (tmp_path / "afile").write_text("x")
    assert _score(model_dir, inp, tmp_path / "afile" / "out.jsonl") == 1
    _one_line_error(capsys, "afile is a file, not a directory")


def test_cli_unwritable_output(tmp_path, model_dir, capsys, monkeypatch):
    """A folder the user may not write to (mode 0555; as root, where modes do not bind, the OS call is made to
    fail as it would): one line naming the path, exit 1."""
    import os

    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.geteuid() == 0:
        real_open = os.open

        def deny(path, *a, **k):
            if str(path).startswith(str(ro)):
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(path, *a, **k)

        monkeypatch.setattr(os, "open", deny)
    try:
        assert _score(model_dir, inp, ro / "out.jsonl") == 1
    finally:
        monkeypatch.undo()
        ro.chmod(0o755)
    _one_line_error(capsys, "Permission denied", str(ro))


def test_cli_disk_full_is_one_line(tmp_path, model_dir):
    """A file-size limit (``ulimit -f``) hit while writing records: one line, exit 1, no traceback."""
    import os
    import resource
    import subprocess
    import sys

    inp = _jsonl(tmp_path / "items.jsonl", [{**GOOD, "id": f"q{i}"} for i in range(8)])
    out = tmp_path / "out.jsonl"

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (300, 300))

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    p = subprocess.run([sys.executable, "-m", "probe.cli", "score", "--model", str(model_dir), "--input", str(inp),
                        "--output", str(out), "--no-chat-template"], preexec_fn=limit, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr[-2000:]
    lines = [x for x in p.stderr.splitlines() if x.startswith("probe: error:")]
    assert len(lines) == 1 and "File too large" in lines[0] and "Traceback" not in p.stderr, p.stderr[-2000:]


def test_cli_perplexity_text_longer_than_the_context(tmp_path, model_dir, capsys):
    inp = _jsonl(tmp_path / "texts.jsonl", [{"id": "a", "text": "hello"}, {"id": "b", "text": "wrinkles " * 3000}])
    out = tmp_path / "out.jsonl"
    assert main(["perplexity", "--model", str(model_dir), "--input", str(inp), "--output", str(out)]) == 1
    _one_line_error(capsys, "texts.jsonl, line 2, field 'text'", "context window")
    _no_output(out)


def test_cli_lone_surrogate_in_perplexity_text(tmp_path, model_dir, capsys):
    inp = _jsonl(tmp_path / "texts.jsonl", ['{"id": "a", "text": "x\\udfff"}'])
    out = tmp_path / "out.jsonl"
    assert main(["perplexity", "--model", str(model_dir), "--input", str(inp), "--output", str(out)]) == 1
    _one_line_error(capsys, "line 1, field 'text'", "lone surrogate")
    _no_output(out)


def _no_model_load(monkeypatch):
    """Any model load fails the test: the case must be refused before it."""
    import probe.models.loader as loader

    def boom(*a, **k):
        raise AssertionError("the model was loaded before the input was validated")

    monkeypatch.setattr(loader, "_from_pretrained", boom)


@pytest.mark.parametrize("extra, needle", [
    (["--set", "device=tpu"], "device must be"),
    (["--device", "tpu"], "device must be"),
    (["--set", "threads=abc"], "threads must be a positive integer"),
    (["--set", "n_boot=lots"], "n_boot must be an integer"),
    (["--set", "n_boot=-5"], "n_boot must not be negative"),
    (["--set", "progress=maybe"], "progress must be true or false"),
    (["--set", "source=[a, b]"], "source must be a string"),
], ids=["set-device-tpu", "device-tpu", "set-threads-abc", "set-n_boot-lots", "set-n_boot-negative",
        "set-progress-str", "set-str-field-list"])
def test_cli_run_bad_value_refused_before_the_model_loads(tmp_path, model_dir, capsys, monkeypatch, extra, needle):
    _no_model_load(monkeypatch)
    out = tmp_path / "run"
    assert main(["run", "bbq", "--model", str(model_dir), "--limit", "2", "--output", str(out), *extra]) == 1
    _one_line_error(capsys, needle)
    assert not out.exists()


def test_cli_score_bad_device_and_bad_json_refused_before_the_model_loads(tmp_path, model_dir, capsys, monkeypatch):
    _no_model_load(monkeypatch)
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    assert _score(model_dir, inp, tmp_path / "o.jsonl", "--device", "tpu") == 1
    _one_line_error(capsys, "device must be")
    bad = _jsonl(tmp_path / "bad.jsonl", [GOOD, "{not json"])
    assert _score(model_dir, bad, tmp_path / "o.jsonl") == 1
    _one_line_error(capsys, "bad.jsonl, line 2", "invalid JSON")
    bad = _jsonl(tmp_path / "bad2.jsonl", [GOOD, {**GOOD, "id": "q2", "options": []}])
    assert _score(model_dir, bad, tmp_path / "o.jsonl") == 1
    _one_line_error(capsys, "bad2.jsonl, line 2, field 'options'")
    assert not (tmp_path / "o.jsonl").exists()


def test_pickle_weights_refused_without_the_flag(tmp_path, model_dir, capsys):
    """A model folder whose only weights are a pickle that runs code when loaded: refused, nothing runs."""
    import pickle
    import shutil

    marker = tmp_path / "PICKLE_RAN"

    class Evil:
        def __reduce__(self):
            return (exec, (f"open({str(marker)!r}, 'w').write('ran')",))

    d = tmp_path / "pickled-model"
    d.mkdir()
    for f in model_dir.iterdir():  # config and tokenizer of a real model, its weights replaced by the pickle
        if not f.name.endswith(".safetensors"):
            shutil.copy(f, d / f.name)
    (d / "pytorch_model.bin").write_bytes(pickle.dumps(Evil(), protocol=2))
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    assert _score(d, inp, tmp_path / "out.jsonl") == 1
    _one_line_error(capsys, "pickle weights", "--allow-pickle-weights")
    assert not marker.exists()
    # with the flag the pickle is read, by torch's weights-only unpickler: refused again, one line, nothing ran
    assert _score(d, inp, tmp_path / "out.jsonl", "--allow-pickle-weights") == 1
    _one_line_error(capsys, "cannot load model", "UnpicklingError")
    assert not marker.exists()


def test_model_directory_without_config_json(tmp_path, model_dir, capsys):
    import shutil

    d = tmp_path / "no-config"
    shutil.copytree(model_dir, d)
    (d / "config.json").unlink()
    assert _score(d, _jsonl(tmp_path / "items.jsonl", [GOOD]), tmp_path / "out.jsonl") == 1
    _one_line_error(capsys, "no config.json")


def test_report_output_is_a_file(tmp_path, capsys):
    run = _fake_run(tmp_path / "run", "sometask", "m", {"t": "a\n1\n"})
    (tmp_path / "afile").write_text("x")
    assert main(["report", str(run), "--output", str(tmp_path / "afile")]) == 1
    _one_line_error(capsys, "is not a directory")


def test_metrics_bbq_on_an_empty_file(tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("")
    assert main(["metrics", "bbq", "--input", str(tmp_path / "empty.jsonl")]) == 1
    _one_line_error(capsys, "empty.jsonl", "no records")


def test_a_file_named_like_a_task_does_not_shadow_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").write_text("not: a config\n")

    def stop(task, *a, **k):
        raise ProbeError(f"would run task {task.name}")

    monkeypatch.setattr("probe.runs.task_run.run_task", stop)
    monkeypatch.setattr("probe.runs.multi.run_task", stop, raising=False)
    assert main(["run", "demo", "--limit", "1", "--output", str(tmp_path / "o")]) == 1
    _one_line_error(capsys, "would run task demo")


def test_sidecars_have_the_records_permissions(tmp_path, model_dir):
    import stat

    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    out = tmp_path / "out.jsonl"
    assert _score(model_dir, inp, out) == 0
    mode = stat.S_IMODE(out.stat().st_mode)
    for side in (tmp_path / "out.jsonl.input.json", tmp_path / "out.jsonl.provenance.json"):
        assert stat.S_IMODE(side.stat().st_mode) == mode, side


def test_no_empty_output_after_an_error_before_the_first_record(tmp_path, model_dir, capsys):
    """A score cache whose values are damaged (a digest error while scoring) leaves no empty records file."""
    import sqlite3

    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    cache = tmp_path / "c.sqlite"
    assert _score(model_dir, inp, tmp_path / "first.jsonl", "--score-cache", str(cache)) == 0
    db = sqlite3.connect(cache)
    for k, v in db.execute("SELECT key, value FROM scores").fetchall():
        db.execute("UPDATE scores SET value = ? WHERE key = ?", (bytes([v[0] ^ 1]) + bytes(v[1:]), k))
    db.commit()
    db.close()
    out = tmp_path / "out.jsonl"
    assert _score(model_dir, inp, out, "--score-cache", str(cache)) == 1
    _one_line_error(capsys, "damaged value")
    assert not out.exists()


def test_smaller_limit_on_resume_keeps_the_complete_summary(tmp_path, tiny_lm):
    import probe

    out = tmp_path / "run"
    probe.evaluate(tiny_lm, "demo", limit=4, output=out, progress=False)
    summary = (out / "summary.json").read_text()
    with pytest.raises(ProbeError, match="of items this run does not select"):
        probe.evaluate(tiny_lm, "demo", limit=2, output=out, progress=False)
    assert (out / "summary.json").read_text() == summary


def test_report_record_with_an_invalid_context_condition(tmp_path, capsys):
    """A bbq run whose records.jsonl holds a record with context_condition 'sideways': one line, exit 1."""
    from tests.unit._report_runs import tiny_named
    import probe

    run = tmp_path / "bbq"
    probe.evaluate(tiny_named("tiny-a", 0), "bbq", limit=4, output=run, progress=False, threads=1,
                   answer_formats=["labels"], n_boot=5)
    lines = (run / "records.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["meta"]["context_condition"] = "sideways"
    (run / "records.jsonl").write_text("\n".join([json.dumps(rec)] + lines[1:]) + "\n")
    assert main(["report", str(run), "--output", str(tmp_path / "rep")]) == 1
    _one_line_error(capsys, "records.jsonl", "context_condition")


def test_task_report_md_has_no_raw_html_from_a_model_name(tmp_path):
    """A model named with markup: the run's own report.md and tables/*.md carry it as text, not as HTML."""
    import probe
    from tests.tiny import tiny_lm

    lm = tiny_lm()
    lm.name = EVIL
    out = tmp_path / "run"
    probe.evaluate(lm, "demo", limit=2, output=out, progress=False)
    for md in [out / "report.md", *sorted((out / "tables").glob("*.md"))]:
        assert not re.search(r"(?<!\\)<[A-Za-z/!?]", md.read_text(encoding="utf-8")), md
    assert _live_markup((out / "report.html").read_text(encoding="utf-8")) == []


def test_second_probe_run_writer_is_refused_on_the_command_line(tmp_path, model_dir, capsys, held_lock):
    """`probe run` into a run directory another process is writing: one line naming its pid, exit 1."""
    out = tmp_path / "run"
    out.mkdir()
    pid = held_lock(out / ".probe.lock")
    assert main(["run", "demo", "--model", str(model_dir), "--limit", "2", "--output", str(out)]) == 1
    _one_line_error(capsys, f"pid {pid}", "another probe process")
    assert sorted(p.name for p in out.iterdir()) == [".probe.lock"]


def test_task_tables_never_leave_the_run_directory(tmp_path):
    from probe.tasks.base import write_tables
    import pandas as pd

    with pytest.raises(ProbeError, match="outside the output directory"):
        write_tables({"../../escaped": pd.DataFrame({"a": [1]})}, tmp_path / "run")
    assert not list(tmp_path.rglob("escaped*"))
