"""`probe score` survives SIGKILL: re-running resumes with nothing lost and nothing duplicated.

A real ``python -m probe.cli score`` subprocess (tiny random Llama saved as a
local model directory) is killed with SIGKILL at seeded random points, chosen
by polling how many records the output file holds, then the same command is
re-run to completion. The records must equal those of an uninterrupted run.
Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from probe.cli import main
from tests.tiny import score_items, tiny_lm
from tests.tiny import write_items as _write_items

ROOT = Path(__file__).resolve().parents[2]
N_ITEMS = 200
SEED = 8
N_KILLS = 4
POLL_S = 0.005  # one poll step; the loop is bounded by MAX_POLLS, never a fixed sleep
MAX_POLLS = int(120 / POLL_S)


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread):
    """In-process runs use one thread like the subprocesses (fast and contention-free on a busy machine)."""


def _items(n: int = N_ITEMS) -> list[dict]:
    return score_items(n)


def _args(model_dir: Path, inp: Path, out: Path, batch_size: int = 2, flush_every: int = 4) -> list[str]:
    return ["score", "--model", str(model_dir), "--input", str(inp), "--output", str(out),
            "--batch-size", str(batch_size), "--flush-every", str(flush_every)]


def _complete_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def _assert_same_records(got: list[dict], want: list[dict], tol: float = 1e-6) -> int:
    """Same ids, same fields; numbers within ``tol``. Returns how many records are byte-identical."""
    by_id = {r["id"]: r for r in got}
    assert len(by_id) == len(got)
    identical = 0
    for ref in want:
        rec = by_id[ref["id"]]
        assert rec.keys() == ref.keys(), ref["id"]
        for key, value in ref.items():
            if key in ("logprobs", "probs", "mean_logprobs", "per_byte_logprobs"):
                assert rec[key] == pytest.approx(value, abs=tol, rel=0), (ref["id"], key)
            elif key in ("label_mass", "mass"):
                assert rec[key] == pytest.approx(value, abs=tol, rel=0), ref["id"]
            else:
                assert rec[key] == value, (ref["id"], key)
        identical += json.dumps(rec, sort_keys=True) == json.dumps(ref, sort_keys=True)
    return identical


def _run_until(cmd: list[str], out: Path, target: int, env: dict) -> tuple[bool, int]:
    """Start ``cmd``; SIGKILL it once ``out`` holds >= ``target`` complete lines. Returns (killed, lines at kill)."""
    log = out.with_name(out.name + f".stderr-{target}.txt")  # a file, not a pipe: a full pipe would block the child
    with open(log, "wb") as err_fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err_fh)
    try:
        for _ in range(MAX_POLLS):
            if _complete_lines(out) >= target:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return True, _complete_lines(out)
            try:
                proc.wait(timeout=POLL_S)  # bounded poll step, returns at once when the process ends
            except subprocess.TimeoutExpired:
                continue
            assert proc.returncode == 0, log.read_text(errors="replace")[-2000:]
            return False, _complete_lines(out)
        pytest.fail(f"run did not reach {target} records in {MAX_POLLS * POLL_S:.0f} s")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def reference(tmp_path_factory, model_dir) -> tuple[Path, Path, list[dict]]:
    """An uninterrupted run (in process: same code path, no interpreter start-up)."""
    d = tmp_path_factory.mktemp("ref")
    inp = _write_items(d / "items.jsonl", _items())
    out = d / "ref.jsonl"
    assert main(_args(model_dir, inp, out)) == 0
    return inp, out, _records(out)


def test_sigkill_at_random_points_then_resume(tmp_path, model_dir, reference):
    inp, _, want = reference
    out = tmp_path / "out.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "probe.cli", *_args(model_dir, inp, out)]
    rng = random.Random(SEED)
    # one kill point in each of N_KILLS equal bins, so every run makes progress before its kill
    width = (N_ITEMS - 20) // N_KILLS
    targets = [rng.randrange(k * width + 4, (k + 1) * width) for k in range(N_KILLS)]
    kills, seen_at_kill = 0, []
    for target in targets:
        killed, lines = _run_until(cmd, out, target, env)
        assert killed, f"run finished before reaching kill point {target}"
        kills += 1
        seen_at_kill.append(lines)
        # never more complete lines than items: a duplicate would show up here at once
        assert lines <= N_ITEMS
        assert lines < N_ITEMS, "killed after the run had finished: not a mid-run kill"
    assert 0 < seen_at_kill[0] < N_ITEMS, "the first kill should land mid-run"
    # re-run the same command to completion (in process; it is the same code)
    assert main(_args(model_dir, inp, out)) == 0
    got = _records(out)
    ids = [r["id"] for r in got]
    want_ids = {r["id"] for r in want}
    duplicates = len(ids) - len(set(ids))
    lost = len(want_ids - set(ids))
    identical = _assert_same_records(got, want)
    print(f"\nresume under SIGKILL: kills={kills} at record counts {seen_at_kill} (targets {targets}); "
          f"items={N_ITEMS} records={len(got)} duplicates={duplicates} lost={lost} "
          f"byte-identical records={identical}/{N_ITEMS}")
    assert kills >= N_KILLS
    assert duplicates == 0 and lost == 0 and len(got) == N_ITEMS
    assert set(ids) == want_ids


@pytest.mark.parametrize("where", ["mid_line", "before_newline", "after_newline"])
def test_torn_last_line_is_redone(tmp_path, model_dir, reference, where):
    inp, ref_out, want = reference
    data = ref_out.read_bytes()
    rng = random.Random(f"{SEED}-{where}")
    # cut inside line k (k random), as a crash between write() and fsync() can leave it
    k = rng.randrange(10, N_ITEMS - 10)
    starts = [0] + [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    start, end = starts[k], starts[k + 1]  # line k spans [start, end), end - 1 is its newline
    cut = {"mid_line": rng.randrange(start + 1, end - 1), "before_newline": end - 1, "after_newline": end}[where]
    out = tmp_path / "out.jsonl"
    out.write_bytes(data[:cut])
    shutil.copy(ref_out.with_name(ref_out.name + ".input.json"), out.with_name(out.name + ".input.json"))
    assert main(_args(model_dir, inp, out)) == 0
    got = _records(out)
    ids = [r["id"] for r in got]
    assert len(ids) == len(set(ids)) == N_ITEMS
    # everything before the tear is kept byte for byte; nothing already recorded is rewritten
    keep = starts[k + 1] if where == "after_newline" else start
    assert out.read_bytes()[:keep] == data[:keep]
    _assert_same_records(got, want)


def test_corrupt_record_in_the_middle_is_refused_not_overwritten(tmp_path, model_dir, reference, capsys):
    inp, ref_out, _ = reference
    lines = ref_out.read_bytes().splitlines(keepends=True)
    lines[5] = b'{"id": "q005", "logprobs": [\n'
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"".join(lines[:50]))
    before = out.read_bytes()
    assert main(_args(model_dir, inp, out)) == 1
    err = capsys.readouterr().err
    assert "out.jsonl, line 6" in err and "corrupt record" in err
    assert out.read_bytes() == before  # the user's data is left alone


def test_same_command_twice_gives_byte_identical_files(tmp_path, model_dir, reference):
    inp, ref_out, _ = reference
    out = tmp_path / "again.jsonl"
    assert main(_args(model_dir, inp, out)) == 0
    assert out.read_bytes() == ref_out.read_bytes()


def test_batch_size_and_input_order_do_not_change_results(tmp_path, model_dir):
    items = _items(80)
    shuffled = items[:]
    random.Random(SEED).shuffle(shuffled)
    runs = {}
    for name, batch, rows in (("bs1", 1, items), ("bs4", 4, items), ("bs4-shuffled", 4, shuffled)):
        inp = _write_items(tmp_path / f"{name}.jsonl", rows)
        out = tmp_path / f"{name}.out.jsonl"
        assert main(_args(model_dir, inp, out, batch_size=batch, flush_every=16)) == 0
        runs[name] = {r["id"]: r for r in _records(out)}
    base = runs["bs1"]
    worst, near_ties, flips = 0.0, 0, 0
    for name in ("bs4", "bs4-shuffled"):
        assert runs[name].keys() == base.keys()
        for rid, ref in base.items():
            rec = runs[name][rid]
            diff = max(abs(a - b) for a, b in zip(rec["logprobs"], ref["logprobs"]))
            worst = max(worst, diff)
            assert diff <= 1e-4, (name, rid)
            top = sorted(ref["probs"], reverse=True)
            tie = len(top) > 1 and top[0] - top[1] < 1e-4
            near_ties += tie
            if rec["pred_index"] != ref["pred_index"]:
                flips += 1
                assert tie, f"{name} {rid}: pred_index changed without a near-tie"
    print(f"\ndeterminism: 80 items x (bs1, bs4, bs4 shuffled): max |dlogprob|={worst:.2e} "
          f"near-ties(<1e-4)={near_ties} pred_index changes={flips}")


def test_provenance_marks_only_complete_outputs(tmp_path, model_dir, reference, monkeypatch):
    """An interrupted re-run (here with more items) leaves no provenance file claiming the output is complete."""
    from probe.runs import sharding

    inp, ref_out, want = reference
    out = tmp_path / "out.jsonl"
    small = _write_items(tmp_path / "small.jsonl", _items(10))
    assert main(_args(model_dir, small, out)) == 0
    prov = tmp_path / "out.jsonl.provenance.json"
    assert prov.is_file()

    def crash(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(sharding, "append", crash)
    assert main(_args(model_dir, inp, out)) == 130
    assert not prov.exists()
    monkeypatch.undo()
    assert main(_args(model_dir, inp, out)) == 0
    assert prov.is_file()
    # the first 10 records were batched for a 10-item input: equal within float noise, not byte-identical
    _assert_same_records(_records(out), want, tol=1e-5)
