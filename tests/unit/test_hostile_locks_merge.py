"""Hostile inputs on shared folders: lock files that cannot be turned against the user, and a merge that checks
what it folds.

Locks: ``<output>.lock`` (``probe score`` / ``probe perplexity``) and ``DIR/.probe.lock`` (``probe run``) are
created with ``O_CREAT | O_EXCL | O_NOFOLLOW``; a link (symbolic or hard) at the lock path is refused with one
line and left alone, a stale lock of a killed process is taken over without being written through, and nothing is
left behind when taking or using the lock fails. Merge: a shard whose records no longer match its manifest is
refused, naming the shard and the missing ids, and nothing is folded or deleted.
"""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import pytest

from probe.cli import main
from tests.unit.test_hostile_inputs import _one_line_error, held_lock  # noqa: F401 (a fixture)
from tests.tiny import score_items, write_items

GOOD = {"id": "q1", "prompt": "Who has wrinkles?", "options": ["A", "B", "C"]}


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread):
    """In-process runs use one thread."""


def _jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def _score(model_dir: Path, inp: Path, out: Path, *extra: str) -> int:
    return main(["score", "--model", str(model_dir), "--input", str(inp), "--output", str(out), "--device", "cpu",
                 "--batch-size", "2", "--flush-every", "4", *extra])


# --- locks ------------------------------------------------------------------------------------------------------

def test_symlink_at_the_score_lock_path_is_refused_and_the_target_untouched(tmp_path, model_dir, capsys):
    """The repro: ``ln -s $PWD/v d/o.jsonl.lock; probe score ... --output d/o.jsonl`` wrote its pid into ``v``."""
    victim = tmp_path / "v"
    victim.write_text("DATA\n")
    d = tmp_path / "d"
    d.mkdir()
    (d / "o.jsonl.lock").symlink_to(victim)
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    assert _score(model_dir, inp, d / "o.jsonl") == 1
    _one_line_error(capsys, "o.jsonl.lock", "symbolic link")
    assert victim.read_text() == "DATA\n"
    assert (d / "o.jsonl.lock").is_symlink()  # not ours to remove
    assert sorted(p.name for p in d.iterdir()) == ["o.jsonl.lock"]


def test_dangling_symlink_at_the_lock_path_creates_nothing(tmp_path, model_dir, capsys):
    """A link to a file that does not exist yet: O_CREAT would create it wherever the link points."""
    target = tmp_path / "elsewhere" / "planted"
    target.parent.mkdir()
    d = tmp_path / "d"
    d.mkdir()
    (d / "o.jsonl.lock").symlink_to(target)
    assert _score(model_dir, _jsonl(tmp_path / "items.jsonl", [GOOD]), d / "o.jsonl") == 1
    _one_line_error(capsys, "symbolic link")
    assert not target.exists()


def test_symlink_at_the_run_directory_lock_is_refused(tmp_path, model_dir, capsys):
    victim = tmp_path / "v"
    victim.write_text("DATA\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / ".probe.lock").symlink_to(victim)
    assert main(["run", "demo", "--model", str(model_dir), "--limit", "2", "--output", str(out)]) == 1
    _one_line_error(capsys, ".probe.lock", "symbolic link")
    assert victim.read_text() == "DATA\n"
    assert sorted(p.name for p in out.iterdir()) == [".probe.lock"]


def test_hard_link_at_the_lock_path_is_refused(tmp_path, model_dir, capsys):
    victim = tmp_path / "v"
    victim.write_text("DATA\n")
    d = tmp_path / "d"
    d.mkdir()
    os.link(victim, d / "o.jsonl.lock")
    assert _score(model_dir, _jsonl(tmp_path / "items.jsonl", [GOOD]), d / "o.jsonl") == 1
    _one_line_error(capsys, "o.jsonl.lock", "hard link")
    assert victim.read_text() == "DATA\n"


class _Loaded(Exception):
    """Raised by the spied model loader and data build: the refusal must come before either."""


@pytest.fixture
def no_load(monkeypatch):
    """Every model loader and task data build a command reaches is a spy that records the call and stops."""
    import probe.runs.multi
    import probe.runs.runner
    import probe.runs.task_run
    from probe.tasks import get

    calls: list[str] = []

    def spy(what):
        def called(*a, **k):
            calls.append(what)
            raise _Loaded(what)
        return called

    for module in (probe.runs.runner, probe.runs.multi, probe.runs.task_run):
        monkeypatch.setattr(module, "load", spy("model"))
    monkeypatch.setattr(type(get("demo")), "items", spy("data"))
    return calls


@pytest.mark.parametrize("name, shard", [("o.jsonl.lock", []), ("o.jsonl.shard-1-of-2.lock", ["--shard", "1/2"])])
def test_a_linked_score_lock_is_refused_before_the_model_loads(tmp_path, model_dir, capsys, no_load, name, shard):
    victim = tmp_path / "v"
    victim.write_text("DATA\n")
    d = tmp_path / "d"
    d.mkdir()
    (d / name).symlink_to(victim)
    assert _score(model_dir, _jsonl(tmp_path / "items.jsonl", [GOOD]), d / "o.jsonl", *shard) == 1
    _one_line_error(capsys, name, "symbolic link")
    assert no_load == [] and victim.read_text() == "DATA\n"


def test_a_linked_perplexity_lock_is_refused_before_the_model_loads(tmp_path, model_dir, capsys, no_load):
    victim = tmp_path / "v"
    victim.write_text("DATA\n")
    (tmp_path / "p.jsonl.lock").symlink_to(victim)
    inp = _jsonl(tmp_path / "texts.jsonl", [{"id": "t1", "text": "a short text"}])
    assert main(["perplexity", "--model", str(model_dir), "--input", str(inp), "--output",
                 str(tmp_path / "p.jsonl"), "--device", "cpu"]) == 1
    _one_line_error(capsys, "p.jsonl.lock", "symbolic link")
    assert no_load == []


@pytest.mark.parametrize("name", [".probe.lock", ".probe.lock.shard-1-of-2", "records.jsonl.lock"])
def test_a_linked_run_directory_lock_is_refused_before_the_model_loads_or_the_data_is_built(
        tmp_path, model_dir, capsys, no_load, name):
    victim = tmp_path / "v"
    victim.write_text("DATA\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / name).symlink_to(victim)
    assert main(["run", "demo", "--model", str(model_dir), "--limit", "2", "--output", str(out)]) == 1
    _one_line_error(capsys, name, "symbolic link")
    assert no_load == [] and victim.read_text() == "DATA\n"
    assert sorted(p.name for p in out.iterdir()) == [name]


def test_a_linked_lock_of_a_later_run_is_refused_before_the_first_model_loads(tmp_path, model_dir, capsys, no_load):
    """Two models: the second one's run directory has a link at its lock; the first model's run never starts."""
    other = tmp_path / "other-model"
    other.symlink_to(model_dir, target_is_directory=True)
    out = tmp_path / "runs"
    (out / "other-model").mkdir(parents=True)
    (out / "other-model" / ".probe.lock").symlink_to(tmp_path / "planted")
    assert main(["run", "demo", "--model", f"{model_dir},{other}", "--limit", "2", "--output", str(out)]) == 1
    _one_line_error(capsys, ".probe.lock", "symbolic link")
    assert no_load == [] and not (tmp_path / "planted").exists()


def test_a_linked_activation_store_lock_is_refused_before_the_model_loads(tmp_path, model_dir, capsys, no_load):
    store = tmp_path / "acts"
    store.mkdir()
    (store / "records.jsonl.lock").symlink_to(tmp_path / "planted")
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    assert main(["activations", "--model", str(model_dir), "--input", str(inp), "--output", str(store),
                 "--device", "cpu"]) == 1
    _one_line_error(capsys, "records.jsonl.lock", "symbolic link")
    assert no_load == [] and not (tmp_path / "planted").exists()


def test_api_run_task_refuses_a_linked_lock_before_building_the_data(tmp_path, tiny_lm, no_load):
    from probe.errors import ProbeError
    from probe.runs.runner import RunOptions, Runner
    from probe.runs.task_run import run_task
    from probe.tasks import get

    out = tmp_path / "run"
    out.mkdir()
    (out / ".probe.lock").symlink_to(tmp_path / "planted")
    task = get("demo")
    with Runner(tiny_lm, RunOptions(progress=False)) as runner, pytest.raises(ProbeError, match="symbolic link"):
        run_task(task, task.make_config({}), tiny_lm, output=out, limit=2, runner=runner)
    assert no_load == [] and not (tmp_path / "planted").exists()


def test_a_held_score_lock_is_refused_before_the_model_loads(tmp_path, model_dir, capsys, no_load, held_lock):
    """Another process writing the same output: one line naming its pid, before a minute of loading."""
    pid = held_lock(tmp_path / "o.jsonl.lock")
    assert _score(model_dir, _jsonl(tmp_path / "items.jsonl", [GOOD]), tmp_path / "o.jsonl") == 1
    _one_line_error(capsys, f"pid {pid}", "another probe process")
    assert no_load == [] and not (tmp_path / "o.jsonl").exists()


def test_a_held_run_directory_lock_is_refused_before_the_model_loads(tmp_path, model_dir, capsys, no_load,
                                                                     held_lock):
    out = tmp_path / "run"
    out.mkdir()
    pid = held_lock(out / ".probe.lock")
    assert main(["run", "demo", "--model", str(model_dir), "--limit", "2", "--output", str(out)]) == 1
    _one_line_error(capsys, f"pid {pid}", "another probe process")
    assert no_load == []


def test_another_shard_s_held_lock_does_not_stop_this_shard(tmp_path, held_lock):
    """Shard jobs run side by side: only this run's own lock is checked (a stale one, or one this process
    holds, passes too)."""
    from probe.errors import ProbeError
    from probe.io import OutputLock, check_lock_free

    held_lock(tmp_path / ".probe.lock.shard-1-of-2")
    check_lock_free(tmp_path / ".probe.lock.shard-0-of-2")
    with pytest.raises(ProbeError, match="another probe process"):
        check_lock_free(tmp_path / ".probe.lock.shard-1-of-2", str(tmp_path))
    (tmp_path / "stale.lock").write_text("999999\n")
    check_lock_free(tmp_path / "stale.lock")
    with OutputLock(tmp_path / "mine.lock"):
        check_lock_free(tmp_path / "mine.lock")
    assert (tmp_path / "stale.lock").read_text() == "999999\n"


def test_check_locks_refuses_only_unsafe_locks_of_this_output(tmp_path):
    from probe.errors import ProbeError
    from probe.io import check_locks

    (tmp_path / "o.jsonl.lock").write_text("1\n")  # a plain lock (stale or held) is the lock's own business
    (tmp_path / "o.jsonl2.lock").symlink_to(tmp_path / "x")  # another output's lock
    (tmp_path / "o.jsonl").write_text("")
    check_locks(tmp_path, "o.jsonl.")
    check_locks(tmp_path / "absent")  # a folder not made yet holds no lock
    with pytest.raises(ProbeError, match="o.jsonl2.lock: it is a symbolic link"):
        check_locks(tmp_path)
    os.link(tmp_path / "o.jsonl.lock", tmp_path / "kept")
    with pytest.raises(ProbeError, match="hard link"):
        check_locks(tmp_path, "o.jsonl.")
    (tmp_path / "d.lock").mkdir()
    with pytest.raises(ProbeError, match="d.lock: it is not a plain file"):
        check_locks(tmp_path, "d.")


def test_a_stale_lock_of_a_killed_process_is_taken_over(tmp_path, model_dir):
    """A plain lock file nobody holds (its process was killed): the run goes on and leaves no lock."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "o.jsonl.lock").write_text("999999\n")
    assert _score(model_dir, _jsonl(tmp_path / "items.jsonl", [GOOD]), d / "o.jsonl") == 0
    assert not (d / "o.jsonl.lock").exists()
    assert [json.loads(x)["id"] for x in (d / "o.jsonl").read_text().splitlines()] == ["q1"]


def test_lock_is_created_exclusively_without_following_links(tmp_path, monkeypatch):
    """Every open of a lock path asks for O_NOFOLLOW; the creating one for O_CREAT | O_EXCL."""
    from probe.io import OutputLock

    seen = []
    real = os.open

    def spy(path, flags, *a, **k):
        if str(path).endswith(".lock"):
            seen.append(flags)
        return real(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", spy)
    with OutputLock(tmp_path / "x.lock"):
        pass
    (tmp_path / "y.lock").write_text("1\n")  # stale
    with OutputLock(tmp_path / "y.lock"):
        pass
    monkeypatch.undo()
    assert seen and all(f & os.O_NOFOLLOW for f in seen)
    created = [f for f in seen if f & os.O_CREAT]
    assert created and all(f & os.O_EXCL for f in created)
    assert not (tmp_path / "x.lock").exists() and not (tmp_path / "y.lock").exists()


def test_no_lock_left_after_a_full_disk_while_taking_it(tmp_path, model_dir, capsys, monkeypatch):
    """The disk fills up while the pid is written into a new lock file: one line naming it, no ``.lock`` left."""
    real = os.write

    def full(fd, data):
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).endswith(".lock"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", full)
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    assert _score(model_dir, inp, tmp_path / "o.jsonl") == 1
    monkeypatch.undo()
    _one_line_error(capsys, "No space left on device", "o.jsonl.lock")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["items.jsonl"]


def test_no_input_sidecar_without_records_after_an_error(tmp_path, model_dir, capsys, monkeypatch):
    """Scoring fails before the first record: neither the records file nor its ``.input.json`` is left."""
    import probe.runs.runner as runner_mod

    def broken(self, part, fn):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runner_mod.Runner, "_timed", broken)
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    assert _score(model_dir, inp, tmp_path / "o.jsonl") == 1
    capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["items.jsonl"]
    out = tmp_path / "run"
    assert main(["run", "demo", "--model", str(model_dir), "--limit", "2", "--output", str(out)]) == 1
    _one_line_error(capsys, "No space left on device")
    assert not [p.name for p in out.rglob("*") if p.name.endswith((".input.json", ".lock"))]


@pytest.mark.parametrize("victim", ["o.jsonl", "o.jsonl.input.json"])
def test_disk_full_names_the_file(tmp_path, model_dir, capsys, monkeypatch, victim):
    """The disk fills up while the records or a sidecar are made durable: the one line names that file."""
    real = os.fsync

    def full(fd):
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if name == victim or re.fullmatch(rf"\.{re.escape(victim)}\.[a-z0-9_]+\.tmp", name):  # write_atomic's temp
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", full)
    inp = _jsonl(tmp_path / "items.jsonl", [GOOD])
    assert _score(model_dir, inp, tmp_path / "o.jsonl") == 1
    monkeypatch.undo()
    line = _one_line_error(capsys, "No space left on device")
    assert re.search(re.escape(str(tmp_path / victim)) + r"\b(?!\.)", line), line
    assert not (tmp_path / "o.jsonl.lock").exists()


@pytest.mark.parametrize("command", ["score", "run"])
def test_output_under_a_symlink_loop_is_one_line(tmp_path, model_dir, capsys, command):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    if command == "score":
        rc = _score(model_dir, _jsonl(tmp_path / "items.jsonl", [GOOD]), tmp_path / "a" / "o.jsonl")
    else:
        rc = main(["run", "demo", "--model", str(model_dir), "--limit", "2", "--output", str(tmp_path / "a" / "r")])
    assert rc == 1
    _one_line_error(capsys, "symbolic link loop")


# --- merge ------------------------------------------------------------------------------------------------------

def _two_shards(tmp_path: Path, model_dir: Path, n: int = 16) -> tuple[Path, Path, Path]:
    inp = write_items(tmp_path / "items.jsonl", score_items(n))
    one = tmp_path / "one.jsonl"
    assert _score(model_dir, inp, one) == 0
    out = tmp_path / "run" / "m.jsonl"
    for i in range(2):
        assert _score(model_dir, inp, out, "--shard", f"{i}/2") == 0
    return inp, one, out


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("where", ["last", "middle"])
def test_merge_refuses_a_shard_that_lost_a_record(tmp_path, model_dir, capsys, where):
    from probe.runs.shard import shard_path

    inp, one, out = _two_shards(tmp_path, model_dir)
    shard = shard_path(out, 1, 2)
    lines = shard.read_text().splitlines(keepends=True)
    k = len(lines) - 1 if where == "last" else len(lines) // 2
    lost = json.loads(lines[k])["id"]
    shard.write_text("".join(lines[:k] + lines[k + 1:]))
    before = _snapshot(tmp_path / "run")
    for strict in ([], ["--strict"]):
        assert main(["merge", str(tmp_path / "run"), *strict]) == 1
        msg = _one_line_error(capsys, shard.name, repr(lost))
        assert "missing" in msg
        assert _snapshot(tmp_path / "run") == before  # nothing folded, nothing deleted
    # a plain run refuses too, and folds nothing
    assert _score(model_dir, inp, out) == 1
    _one_line_error(capsys, shard.name, repr(lost))
    assert _snapshot(tmp_path / "run") == before


def test_merge_refuses_a_shard_whose_record_changed(tmp_path, model_dir, capsys):
    """Same ids and count, one value edited: the checksum of the manifest no longer matches."""
    from probe.runs.shard import shard_path

    inp, one, out = _two_shards(tmp_path, model_dir)
    shard = shard_path(out, 0, 2)
    lines = shard.read_text().splitlines(keepends=True)
    rec = json.loads(lines[0])
    rec["probs"] = list(reversed(rec["probs"]))
    lines[0] = json.dumps(rec, sort_keys=True, ensure_ascii=False) + "\n"
    shard.write_text("".join(lines))
    before = _snapshot(tmp_path / "run")
    assert main(["merge", str(tmp_path / "run")]) == 1
    _one_line_error(capsys, shard.name, "checksum")
    assert _snapshot(tmp_path / "run") == before


def test_merge_of_intact_shards_still_equals_one_process(tmp_path, model_dir, capsys):
    inp, one, out = _two_shards(tmp_path, model_dir)
    assert main(["merge", str(tmp_path / "run"), "--strict"]) == 0
    assert out.read_bytes() == one.read_bytes()


def test_merge_checks_every_output_before_folding_any(tmp_path, model_dir, capsys):
    """Two outputs under one folder, the second damaged: the first is not folded either."""
    from probe.runs.shard import shard_path

    inp = write_items(tmp_path / "items.jsonl", score_items(8))
    for name in ("a.jsonl", "b.jsonl"):
        for i in range(2):
            assert _score(model_dir, inp, tmp_path / "run" / name, "--shard", f"{i}/2") == 0
    shard = shard_path(tmp_path / "run" / "b.jsonl", 0, 2)
    shard.write_text("".join(shard.read_text().splitlines(keepends=True)[:-1]))
    before = _snapshot(tmp_path / "run")
    assert main(["merge", str(tmp_path / "run")]) == 1
    _one_line_error(capsys, shard.name, "missing")
    assert _snapshot(tmp_path / "run") == before


@pytest.mark.parametrize("strict", [[], ["--strict"]])
def test_merge_of_a_path_that_does_not_exist_fails(tmp_path, capsys, strict):
    assert main(["merge", str(tmp_path / "nonexistent"), *strict]) == 1
    _one_line_error(capsys, "nonexistent", "no such file or directory")
    assert main(["merge", "/nonexistent", *strict]) == 1
    _one_line_error(capsys, "/nonexistent")
