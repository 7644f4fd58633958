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
    from probe.tasks.crows_pairs.data import load_crows_pairs

    text = (CROWS_HEADER if header else "x,") + "\n".join(",".join(r) for r in rows) + "\n"
    path = _tmp_file(text.encode("utf-8"), "crows.csv")
    _only_input_errors(lambda: load_crows_pairs(path), path)


@FUZZ
@given(st.lists(st.lists(csv_cells, min_size=0, max_size=8), min_size=1, max_size=5), st.booleans())
def test_hbb_concepts_csv_arbitrary_text(rows, header):
    from probe.tasks.hbb.data import load_concepts

    text = ("Context,s1,s2,bias type1,bias type2,bias_type\n" if header else "x,") \
        + "\n".join(",".join(r) for r in rows) + "\n"
    path = _tmp_file(text.encode("utf-8"), "questions.csv")
    _only_input_errors(lambda: load_concepts(path), path)


@FUZZ
@given(st.binary(max_size=300))
def test_crows_pairs_csv_arbitrary_bytes(data):
    from probe.tasks.crows_pairs.data import load_crows_pairs

    path = _tmp_file(CROWS_HEADER.encode() + data, "crows.csv")
    _only_input_errors(lambda: load_crows_pairs(path), path)


def test_huge_integer_is_an_input_error(tmp_path):
    """Python refuses to parse integers over 4300 digits with a plain ValueError; it must still name the line."""
    from probe.io import iter_jsonl

    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a"}\n{"id": ' + "9" * 5000 + "}\n")
    with pytest.raises(InputError, match="line 2"):
        list(iter_jsonl(path))


# --- every reader, random bytes and random JSON: only probe's own error type ----------------------------------

def _readers() -> dict[str, tuple[str, Any]]:
    """reader name -> (the file name it reads, a function of the file's path). Each reads one user file."""
    from probe.commands.run import read_config
    from probe.tasks.bbq.data import load_bbq_jsonl
    from probe.tasks.bbq.templates import read_templates
    from probe.tasks.cmp_iso.data import load_csv
    from probe.tasks.cmp_iso.sources import read_pair_csv
    from probe.tasks.crows_pairs.data import load_crows_pairs
    from probe.tasks.hbb.data import load_concepts, load_descriptors, load_sg_variations
    from probe.tasks.stereoset.data import load_stereoset
    from probe.io import RecordWriter, iter_jsonl, read_records
    from probe.commands.activations import task_item_reader
    from probe.prompts.capture_items import read_capture_items
    from probe.prompts.items import read_perplexity_items
    from probe.reports.compare.runs import load_run
    from probe.scoring.cache import ScoreCache

    def record_writer(p: Path) -> None:
        RecordWriter(p).close()

    def run_dir(p: Path) -> None:  # a run directory whose summary.json holds the bytes
        d = p.parent / "run"
        d.mkdir()
        (d / "summary.json").write_bytes(p.read_bytes())
        load_run(d)

    def score_cache(p: Path) -> None:
        ScoreCache(p, "fp").close()

    from tests.unit._tiny_models import tiny_tokenizer

    tok = tiny_tokenizer()

    return {
        "iter_jsonl": ("in.jsonl", lambda p: list(iter_jsonl(p, required=("id",)))),
        "read_records": ("out.jsonl", read_records),
        "record_writer": ("out.jsonl", record_writer),
        "perplexity_items": ("texts.jsonl", read_perplexity_items),
        "bbq_jsonl": ("Age.jsonl", load_bbq_jsonl),
        "bbq_templates": ("Age.csv", read_templates),
        "cmp_iso_csv": ("bench.csv", load_csv),
        "cmp_iso_pairs": ("pairs.csv", read_pair_csv),
        "crows_pairs": ("crows.csv", load_crows_pairs),
        "hbb_concepts": ("questions.csv", load_concepts),
        "hbb_descriptors": ("descriptors.json", load_descriptors),
        "hbb_sg_variations": ("sg.jsonl", load_sg_variations),
        "stereoset": ("dev.json", load_stereoset),
        "capture_items": ("items.jsonl", lambda p: read_capture_items(p, tok, task_items=task_item_reader(tok))),
        "run_config": ("run.yaml", read_config),
        "run_summary": ("summary.json", run_dir),
        "score_cache": ("scores.sqlite", score_cache),
    }


READERS = list(_readers())
FEW = settings(FUZZ, max_examples=25)


def _only_probe_errors(name: str, data: bytes) -> None:
    fname, fn = _readers()[name]
    path = _tmp_file(data, fname)
    try:
        fn(path)
    except ProbeError:
        pass


@pytest.mark.parametrize("name", READERS)
@FEW
@given(data=st.binary(max_size=300))
def test_every_reader_random_bytes(name, data):
    _only_probe_errors(name, data)


@pytest.mark.parametrize("name", READERS)
@FEW
@given(value=json_values)
def test_every_reader_random_json(name, value):
    _only_probe_errors(name, json.dumps(value, allow_nan=True).encode("utf-8", "surrogatepass"))
