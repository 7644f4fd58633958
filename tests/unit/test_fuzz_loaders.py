"""Fuzzing the readers: arbitrary bytes or JSON never crash with anything but a ProbeError.

``probe.errors.InputError`` (a ``ProbeError`` and a ``ValueError``) is the only
exception a reader may raise on bad input; the CLI prints it without a
traceback. Examples are few (``max_examples`` modest) so the file stays fast;
the seed is derandomized so a failure reproduces.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from probe.errors import InputError, ProbeError

FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                phases=[Phase.explicit, Phase.generate, Phase.shrink],
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# JSON values, biased towards the shapes the readers look at
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                             st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                           max_leaves=12)
KEYS = ["id", "prompt", "messages", "options", "kind", "group", "text", "prefix", "role", "content"]
item_objects = st.dictionaries(st.sampled_from(KEYS), st.one_of(
    json_values,
    st.lists(st.text(max_size=8), max_size=4),
    st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "x"]),
                                    "content": st.one_of(st.text(max_size=10), st.integers())}), max_size=3),
    st.sampled_from(["label", "continuation", "perplexity"]),
), max_size=7)


_COUNTER = itertools.count()
_DIR: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def fuzz_dir(tmp_path_factory):
    """One pytest-managed directory for every example (cleaned up like any tmp_path)."""
    _DIR[:] = [tmp_path_factory.mktemp("fuzz")]
    yield


def _tmp_file(data: bytes, name: str) -> Path:
    d = _DIR[0] / str(next(_COUNTER))  # a fresh folder: the file name stays the one the error must name
    d.mkdir()
    path = d / name
    path.write_bytes(data)
    return path


def _only_input_errors(fn, path: Path) -> None:
    try:
        fn()
    except InputError as exc:
        assert path.name in str(exc), f"error does not name the file: {exc}"
    except ProbeError:
        pass


@FUZZ
@given(st.binary(max_size=400))
def test_iter_jsonl_arbitrary_bytes(data):
    from probe.io import iter_jsonl

    path = _tmp_file(data, "in.jsonl")
    _only_input_errors(lambda: list(iter_jsonl(path, required=("id",))), path)


@FUZZ
@given(st.lists(st.one_of(json_values.map(json.dumps), st.text(max_size=40)), max_size=6))
def test_iter_jsonl_json_like_lines(lines):
    from probe.io import iter_jsonl

    path = _tmp_file("\n".join(lines).encode("utf-8", "surrogatepass"), "in.jsonl")
    _only_input_errors(lambda: list(iter_jsonl(path, required=("id", "options"))), path)


@FUZZ
@given(st.binary(max_size=400))
def test_read_records_arbitrary_bytes(data):
    """The resume reader: a torn tail is dropped, anything else corrupt is an InputError."""
    from probe.io import read_records

    path = _tmp_file(data, "out.jsonl")
    _only_input_errors(lambda: read_records(path), path)


@pytest.fixture(scope="module")
def tokenizer():
    from tests.tiny import tiny_tokenizer

    return tiny_tokenizer()


@FUZZ
@given(objs=st.lists(item_objects, min_size=1, max_size=4), template=st.booleans())
def test_read_score_items_arbitrary_objects(tokenizer, objs, template):
    from probe.prompts.items import PromptStyle, read_score_items, read_perplexity_items

    text = "\n".join(json.dumps(o, allow_nan=True) for o in objs)
    path = _tmp_file(text.encode("utf-8", "surrogatepass"), "items.jsonl")
    _only_input_errors(lambda: read_score_items(path, tokenizer, PromptStyle(chat_template=template)), path)
    _only_input_errors(lambda: read_perplexity_items(path), path)


@FUZZ
@given(st.binary(max_size=300))
def test_read_score_items_arbitrary_bytes(tokenizer, data):
    from probe.prompts.items import PromptStyle, read_score_items

    path = _tmp_file(data, "items.jsonl")
    _only_input_errors(lambda: read_score_items(path, tokenizer, PromptStyle()), path)


CROWS_HEADER = ",sent_more,sent_less,stereo_antistereo,bias_type\n"
csv_cells = st.one_of(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=10),
                      st.sampled_from(["stereo", "antistereo", "", '"', '""', ",", "\n", "0", "1"]))


@FUZZ
@given(st.lists(st.lists(csv_cells, min_size=0, max_size=7), min_size=1, max_size=5), st.booleans())
def test_crows_pairs_csv_arbitrary_text(rows, header):
    """Any UTF-8 text with or without the right header: only InputError (an empty file: see the xfail below)."""
    from probe.data.crows_pairs import load_crows_pairs

    text = (CROWS_HEADER if header else "x,") + "\n".join(",".join(r) for r in rows) + "\n"
    path = _tmp_file(text.encode("utf-8"), "crows.csv")
    _only_input_errors(lambda: load_crows_pairs(path), path)


@FUZZ
@given(st.lists(st.lists(csv_cells, min_size=0, max_size=8), min_size=1, max_size=5), st.booleans())
def test_hbb_concepts_csv_arbitrary_text(rows, header):
    from probe.data.hbb import load_concepts

    text = ("Context,s1,s2,bias type1,bias type2,bias_type\n" if header else "x,") \
        + "\n".join(",".join(r) for r in rows) + "\n"
    path = _tmp_file(text.encode("utf-8"), "questions.csv")
    _only_input_errors(lambda: load_concepts(path), path)


@FUZZ
@given(st.binary(max_size=300))
def test_crows_pairs_csv_arbitrary_bytes(data):
    from probe.data.crows_pairs import load_crows_pairs

    path = _tmp_file(CROWS_HEADER.encode() + data, "crows.csv")
    _only_input_errors(lambda: load_crows_pairs(path), path)


def test_huge_integer_is_an_input_error(tmp_path):
    """Python refuses to parse integers over 4300 digits with a plain ValueError; it must still name the line."""
    from probe.io import iter_jsonl

    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a"}\n{"id": ' + "9" * 5000 + "}\n")
    with pytest.raises(InputError, match="line 2"):
        list(iter_jsonl(path))
