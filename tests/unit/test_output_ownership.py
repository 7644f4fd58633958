"""Outputs probe does not own are never touched: every command refuses, with one line and before any model loads,
an output that is the user's own file, another command's records, a symbolic link (at the output, inside an output
folder, or beside an output file), or a path under /proc, /sys or /dev; the file, the link's target and the folder
are byte-identical afterwards. ``probe score`` / ``probe perplexity`` replace a file only with ``--overwrite``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from probe.cli import main
from tests.unit.test_hostile_inputs import _one_line_error
from tests.unit.test_hostile_locks_merge import _two_shards, no_load  # noqa: F401 (a fixture)

GOOD = {"id": "q1", "prompt": "Who has wrinkles?", "options": ["A", "B", "C"]}
PRECIOUS = "PRECIOUS\n"


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread):
    """In-process runs use one thread."""


def _jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def _tree(d: Path) -> dict[str, object]:
    """Everything under ``d``: file bytes, link targets (never followed) and folders."""
    out: dict[str, object] = {}
    for p in sorted(d.rglob("*")):
        key = str(p.relative_to(d))
        if p.is_symlink():
            out[key] = ("link", os.readlink(p))
        elif p.is_dir():
            out[key] = "dir"
        else:
            out[key] = p.read_bytes()
    return out


def _score(model_dir: Path, inp: Path, out: Path | str, *extra: str, command: str = "score") -> int:
    return main([command, "--model", str(model_dir), "--input", str(inp), "--output", str(out), "--device", "cpu",
                 "--batch-size", "2", *extra])


@pytest.fixture
def scene(tmp_path):
    """``tmp_path/work`` (the outputs' folder, items and texts in it) and a victim file outside it."""
    work = tmp_path / "work"
    work.mkdir()
    _jsonl(work / "items.jsonl", [GOOD])
    _jsonl(work / "texts.jsonl", [{"id": "t1", "text": "a short text"}])
    victim = tmp_path / "victim.txt"
    victim.write_text("DATA\n")
    return work, victim


def _untouched(tmp_path: Path, before: dict) -> None:
    assert _tree(tmp_path) == before


# --- score and perplexity ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("command, inp", [("score", "items.jsonl"), ("perplexity", "texts.jsonl")])
def test_a_user_s_file_at_the_output_is_refused_untouched(tmp_path, scene, model_dir, capsys, no_load, command, inp):
    """The repro: ``echo PRECIOUS > out.jsonl; probe score ... --output out.jsonl`` replaced the file (rc 0)."""
    work, _ = scene
    (work / "out.jsonl").write_text(PRECIOUS)
    before = _tree(tmp_path)
    assert _score(model_dir, work / inp, work / "out.jsonl", command=command) == 1
    _one_line_error(capsys, "out.jsonl", "not a probe records file", "--overwrite")
    assert no_load == []
    _untouched(tmp_path, before)


@pytest.mark.parametrize("command, inp", [("score", "items.jsonl"), ("perplexity", "texts.jsonl")])
@pytest.mark.parametrize("dangling", [False, True])
def test_a_link_at_the_output_file_is_refused(tmp_path, scene, model_dir, capsys, no_load, command, inp, dangling):
    """A link at the output: the target outside the folder was overwritten; a dangling link created a file."""
    work, victim = scene
    target = tmp_path / "elsewhere.jsonl" if dangling else victim
    (work / "out.jsonl").symlink_to(target)
    before = _tree(tmp_path)
    for extra in ([], ["--overwrite"]):  # --overwrite never writes through (nor removes) a link either
        assert _score(model_dir, work / inp, work / "out.jsonl", *extra, command=command) == 1
        _one_line_error(capsys, "out.jsonl", "symbolic link")
    assert no_load == [] and not (tmp_path / "elsewhere.jsonl").exists()
    _untouched(tmp_path, before)


def test_foreign_jsonl_records_are_refused_untouched(tmp_path, scene, model_dir, capsys, no_load):
    """JSONL without probe's fields: a ``KeyError: 'id'`` traceback, the file left with appended records."""
    work, _ = scene
    _jsonl(work / "out.jsonl", [{"name": "mine", "value": 1}])
    before = _tree(tmp_path)
    assert _score(model_dir, work / "items.jsonl", work / "out.jsonl") == 1
    _one_line_error(capsys, "out.jsonl, line 1", "not a probe record")
    assert no_load == []
    _untouched(tmp_path, before)


def test_another_command_s_records_are_refused(tmp_path, scene, model_dir, capsys, no_load):
    work, _ = scene
    _jsonl(work / "out.jsonl", [{"task": "perplexity", "id": "t1", "kind": "perplexity", "model": "x"}])
    before = _tree(tmp_path)
    assert _score(model_dir, work / "items.jsonl", work / "out.jsonl") == 1
    _one_line_error(capsys, "out.jsonl, line 1, field 'task'", "'perplexity', not of 'score'")
    _untouched(tmp_path, before)


def test_a_link_at_a_sidecar_is_refused(tmp_path, scene, model_dir, capsys, no_load):
    work, victim = scene
    (work / "out.jsonl.input.json").symlink_to(victim)
    before = _tree(tmp_path)
    assert _score(model_dir, work / "items.jsonl", work / "out.jsonl") == 1
    _one_line_error(capsys, "out.jsonl.input.json", "symbolic link")
    _untouched(tmp_path, before)


@pytest.mark.parametrize("where", ["/proc/self/probe-out.jsonl", "/sys/probe-out.jsonl", "/dev/null"])
def test_kernel_and_device_paths_are_refused_before_the_model_loads(tmp_path, scene, model_dir, capsys, no_load,
                                                                   where):
    work, _ = scene
    assert _score(model_dir, work / "items.jsonl", where) == 1
    _one_line_error(capsys, where)
    assert no_load == []


def test_overwrite_replaces_a_user_s_file(tmp_path, scene, model_dir, other_model_dir, capsys):
    work, _ = scene
    out = work / "out.jsonl"
    out.write_text(PRECIOUS)
    assert _score(model_dir, work / "items.jsonl", out, "--overwrite") == 0
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["q1"]
    first = out.read_text()
    assert _score(model_dir, work / "items.jsonl", out) == 0  # a resume of its own records
    assert _score(model_dir, work / "items.jsonl", out, "--overwrite") == 0  # starts over: the same records
    assert out.read_text() == first
    assert _score(other_model_dir, work / "items.jsonl", out) == 1  # another model's: refused without it
    assert _score(other_model_dir, work / "items.jsonl", out, "--overwrite") == 0
    assert out.read_text() != first and len(out.read_text().splitlines()) == 1


def test_a_torn_first_record_is_still_resumed(tmp_path, scene, model_dir):
    """What a crash in the first write leaves (a record cut off, no newline) is probe's: resumed, not refused."""
    work, _ = scene
    out = work / "out.jsonl"
    out.write_text('{"finite": true, "id": "q1", "ki')
    assert _score(model_dir, work / "items.jsonl", out) == 0
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["q1"]


# --- run ---------------------------------------------------------------------------------------------------------

def _run(model_dir: Path, out: Path | str, *extra: str) -> int:
    return main(["run", "demo", "--model", str(model_dir), "--limit", "2", "--output", str(out), "--device", "cpu",
                 "--no-progress", *extra])


@pytest.mark.parametrize("dangling", [False, True])
def test_run_refuses_a_link_at_its_records(tmp_path, scene, model_dir, capsys, no_load, dangling):
    work, victim = scene
    out = work / "run"
    out.mkdir()
    (out / "records.jsonl").symlink_to(tmp_path / "elsewhere.jsonl" if dangling else victim)
    before = _tree(tmp_path)
    assert _run(model_dir, out) == 1
    _one_line_error(capsys, "records.jsonl", "symbolic link")
    assert no_load == []
    _untouched(tmp_path, before)


def test_run_refuses_a_link_at_the_run_directory_and_inside_it(tmp_path, scene, model_dir, capsys, no_load):
    work, _ = scene
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (work / "run").symlink_to(elsewhere, target_is_directory=True)
    before = _tree(tmp_path)
    assert _run(model_dir, work / "run") == 1
    _one_line_error(capsys, "run", "symbolic link")
    (work / "run").unlink()
    (work / "run").mkdir()
    _jsonl(work / "run" / "records.jsonl", [])
    (work / "run" / "tables").symlink_to(elsewhere, target_is_directory=True)
    before = _tree(tmp_path)
    assert _run(model_dir, work / "run") == 1
    _one_line_error(capsys, "tables", "symbolic link")
    assert no_load == []
    _untouched(tmp_path, before)


@pytest.mark.parametrize("lines, needle", [
    ([{"name": "mine"}], "not a probe record"),
    ([{"task": "bbq", "id": "x", "kind": "label"}], "'bbq', not of 'demo'"),
])
def test_run_refuses_records_that_are_not_this_task_s(tmp_path, scene, model_dir, capsys, no_load, lines, needle):
    work, _ = scene
    out = work / "run"
    out.mkdir()
    _jsonl(out / "records.jsonl", lines)
    before = _tree(tmp_path)
    assert _run(model_dir, out) == 1
    _one_line_error(capsys, "records.jsonl, line 1", needle)
    assert no_load == []
    _untouched(tmp_path, before)


def test_run_refuses_a_kernel_path_before_the_model_loads(tmp_path, model_dir, capsys, no_load):
    assert _run(model_dir, "/proc/self/probe-run") == 1
    _one_line_error(capsys, "/proc")
    assert no_load == []


def test_a_multi_model_run_refuses_a_user_s_report_in_its_folder(tmp_path, scene, model_dir, capsys, no_load):
    work, _ = scene
    out = work / "runs"
    out.mkdir()
    (out / "report.md").write_text("my own notes\n")
    before = _tree(tmp_path)
    assert main(["run", "demo", "--model", f"{model_dir},{model_dir}", "--limit", "2", "--output", str(out)]) == 1
    _one_line_error(capsys, "report.md", "not a probe report")
    assert no_load == []
    _untouched(tmp_path, before)


# --- activations -------------------------------------------------------------------------------------------------

def _activations(model_dir: Path, inp: Path, out: Path | str) -> int:
    return main(["activations", "--model", str(model_dir), "--input", str(inp), "--output", str(out),
                 "--device", "cpu"])


@pytest.mark.parametrize("plant", ["link-records", "link-store", "user-manifest", "other-records"])
def test_activations_refuses_a_store_that_is_not_its_own(tmp_path, scene, model_dir, capsys, no_load, plant):
    work, victim = scene
    store = work / "acts"
    needle = {"link-records": "symbolic link", "link-store": "symbolic link",
              "user-manifest": "not an activation store", "other-records": "'score', not of 'activations'"}[plant]
    if plant == "link-store":
        store.symlink_to(tmp_path, target_is_directory=True)
    else:
        store.mkdir()
    if plant == "link-records":
        (store / "records.jsonl").symlink_to(victim)
    elif plant == "user-manifest":
        (store / "manifest.json").write_text('{"mine": true}\n')
    elif plant == "other-records":
        _jsonl(store / "records.jsonl", [{"task": "score", "id": "q1", "kind": "label"}])
    before = _tree(tmp_path)
    assert _activations(model_dir, work / "items.jsonl", store) == 1
    _one_line_error(capsys, needle)
    assert no_load == []
    _untouched(tmp_path, before)


def test_activations_refuses_a_kernel_path(tmp_path, scene, model_dir, capsys, no_load):
    work, _ = scene
    assert _activations(model_dir, work / "items.jsonl", "/sys/probe-acts") == 1
    _one_line_error(capsys, "/sys")
    assert no_load == []


# --- report ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, model_dir) -> Path:
    """A finished run directory (the demo task, two items, the tiny model)."""
    out = tmp_path_factory.mktemp("demo-run") / "run"
    assert _run(model_dir, out) == 0
    return out


@pytest.mark.parametrize("plant", ["user-report", "link-html", "link-tables", "link-folder"])
def test_report_refuses_a_folder_that_is_not_its_own(tmp_path, scene, capsys, demo_run, plant):
    work, victim = scene
    out = work / "rep"
    if plant == "link-folder":
        out.symlink_to(tmp_path, target_is_directory=True)
    else:
        out.mkdir()
    if plant == "user-report":
        (out / "report.md").write_text("my own notes\n")
    elif plant == "link-html":
        (out / "report.html").symlink_to(victim)
    elif plant == "link-tables":
        (out / "tables").symlink_to(tmp_path, target_is_directory=True)
    before = _tree(tmp_path)
    capsys.readouterr()
    assert main(["report", str(demo_run), "--output", str(out)]) == 1
    _one_line_error(capsys, "not a probe report" if plant == "user-report" else "symbolic link")
    _untouched(tmp_path, before)


# --- merge -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("plant", ["link", "user-file"])
def test_merge_refuses_an_output_that_is_not_probe_s(tmp_path, model_dir, capsys, plant):
    _, _, out = _two_shards(tmp_path, model_dir, n=4)
    victim = tmp_path / "victim.txt"
    victim.write_text("DATA\n")
    if plant == "link":
        out.symlink_to(victim)
    else:
        out.write_text(PRECIOUS)
    capsys.readouterr()
    before = _tree(tmp_path)
    assert main(["merge", str(out.parent)]) == 1
    _one_line_error(capsys, "m.jsonl", "symbolic link" if plant == "link" else "not a probe records file")
    _untouched(tmp_path, before)


# --- validate ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("plant", ["user-report", "link-check", "link-folder", "kernel"])
def test_validate_refuses_a_folder_that_is_not_its_own(tmp_path, scene, model_dir, capsys, no_load, plant):
    work, victim = scene
    out: Path | str = work / "check"
    if plant == "link-folder":
        Path(out).symlink_to(tmp_path, target_is_directory=True)
    elif plant == "kernel":
        out = "/proc/self/probe-check"
    else:
        Path(out).mkdir()
    if plant == "user-report":
        (work / "check" / "report.md").write_text("my own notes\n")
    elif plant == "link-check":
        (work / "check" / "check.json").symlink_to(victim)
    before = _tree(tmp_path)
    assert main(["validate", "sampling", "hbb", "--model", str(model_dir), "--device", "cpu", "--output",
                 str(out)]) == 1
    needle = {"user-report": "not the output of an earlier", "kernel": "/proc"}.get(plant, "symbolic link")
    _one_line_error(capsys, needle)
    assert no_load == []
    _untouched(tmp_path, before)


# --- lm-eval -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("plant", ["link-folder", "link-inside", "kernel"])
def test_lm_eval_output_path_is_checked_before_the_model_loads(tmp_path, scene, plant):
    """lm-eval may not be installed here: the check runs in the namespace it is handed (before its model loads)."""
    import argparse

    from probe.commands.lm_eval import lm_eval_namespace
    from probe.errors import ProbeError

    work, victim = scene
    out: Path | str = work / "lm"
    if plant == "link-folder":
        Path(out).symlink_to(tmp_path, target_is_directory=True)
    elif plant == "link-inside":
        Path(out).mkdir()
        (Path(out) / "results.json").symlink_to(victim)
    else:
        out = "/proc/self/lm-eval-out"
    before = _tree(tmp_path)
    with pytest.raises(ProbeError, match="symbolic link" if plant != "kernel" else "/proc"):
        lm_eval_namespace(argparse.Namespace(model="smollm2", model_args={}, device="cpu", output_path=str(out)))
    _untouched(tmp_path, before)
    lm_eval_namespace(argparse.Namespace(model="smollm2", model_args={}, device="cpu", output_path=str(work / "ok")))


# --- the write gate itself ---------------------------------------------------------------------------------------

def test_every_write_refuses_a_link_even_when_planted_after_the_checks(tmp_path):
    """The writers (not only the commands' checks) refuse: a link made between the check and the write."""
    from probe.errors import InputError
    from probe.io import RecordWriter, write_atomic, write_json_atomic

    victim = tmp_path / "victim.txt"
    victim.write_text("DATA\n")
    for name in ("a.json", "b.md", "c.jsonl"):
        (tmp_path / name).symlink_to(victim)
    with pytest.raises(InputError, match="symbolic link"):
        write_json_atomic(tmp_path / "a.json", {"x": 1})
    with pytest.raises(InputError, match="symbolic link"):
        write_atomic(tmp_path / "b.md", "x")
    with pytest.raises(InputError, match="symbolic link"):
        RecordWriter(tmp_path / "c.jsonl")
    assert victim.read_text() == "DATA\n" and all((tmp_path / n).is_symlink() for n in ("a.json", "b.md", "c.jsonl"))


def test_record_writer_refuses_foreign_lines_without_truncating(tmp_path):
    from probe.errors import InputError
    from probe.io import RecordWriter

    for text in (PRECIOUS, '{"name": "mine"}\n'):
        path = tmp_path / "x.jsonl"
        path.write_text(text)
        with pytest.raises(InputError):
            RecordWriter(path)
        assert path.read_text() == text and not (tmp_path / "x.jsonl.lock").exists()
