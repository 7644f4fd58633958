"""Crash-safe records: torn last lines are redone, nothing is duplicated, errors name file and line."""

from __future__ import annotations

import json

import pytest

from probe.errors import InputError
from probe.io import RecordWriter
from probe.io import dumps, iter_jsonl, read_records, write_json_atomic


def test_resume_skips_recorded_ids(tmp_path):
    path = tmp_path / "r.jsonl"
    with RecordWriter(path) as w:
        w.write_many([{"id": "a", "v": 1}, {"id": "b", "v": 2}])
    with RecordWriter(path) as w:
        assert w.done == {"a", "b"}
        w.write_many([{"id": "b", "v": 99}, {"id": "c", "v": 3}])
    recs, _ = read_records(path)
    assert [r["id"] for r in recs] == ["a", "b", "c"]
    assert recs[1]["v"] == 2


def test_torn_last_line_is_dropped_and_redone(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(dumps({"id": "a"}) + "\n" + '{"id": "b", "v"')
    with RecordWriter(path) as w:
        assert w.done == {"a"}
        w.write_many([{"id": "b", "v": 2}])
    lines = path.read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["a", "b"]


def test_corruption_in_the_middle_is_an_error(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "a"}\nnot json\n{"id": "c"}\n')
    with pytest.raises(InputError, match="line 2"):
        read_records(path)


def test_nan_becomes_null_and_keys_are_sorted():
    assert dumps({"b": float("nan"), "a": 1}) == '{"a": 1, "b": null}'


def test_write_json_atomic_leaves_no_temp_files(tmp_path):
    write_json_atomic(tmp_path / "s.json", {"x": [1, 2]})
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]


@pytest.mark.parametrize(
    "content, match",
    [
        (b'{"id": 1}\n{"id": \n', "line 2: invalid JSON"),
        (b'[1, 2]\n', "line 1: expected a JSON object"),
        (b'{"id": "\xff"}\n', "line 1: not valid UTF-8"),
        (b'{"x": 1}\n', "line 1, field 'id': missing"),
    ],
)
def test_iter_jsonl_errors_name_line_and_field(tmp_path, content, match):
    path = tmp_path / "in.jsonl"
    path.write_bytes(content)
    with pytest.raises(InputError, match=match):
        list(iter_jsonl(path, required=("id",)))
