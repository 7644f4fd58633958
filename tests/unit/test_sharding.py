"""Data-parallel `probe score` (probe.runs.shard): assignment, merge, resume, and a real 2-process run.

The 2-process tests launch ``python -m accelerate.commands.launch --multi_gpu
--num_processes 2 -m probe.cli score ...`` on the CPU (accelerate's torchrun
launcher; ``--cpu`` would start one process only) against the tiny model
directory, and compare with one-process runs. Run with ``-s`` to see timings
and the near-tie count.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace as R

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probe.cli import main
from tests.tiny import score_items as _items
from tests.tiny import write_items as _write_items
from probe.runs.chunks import group_chunks
from probe.runs.record import Record
from probe.runs.resume import check_input
from probe.runs.runner import RunOptions, Runner
from probe.errors import InputError, ProbeError
from probe.runs.shard import (
    Processes,
    detect,
    merge_shards,
    rank_chunks,
    record_order,
    score_sharded,
    shard_files,
    shard_path,
)

ROOT = Path(__file__).resolve().parents[2]
TIE = 1e-4  # |Δ log-prob| between the top two options below which a changed answer is a near-tie


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread):
    """In-process runs use one thread like the subprocesses (fast and contention-free on a busy machine)."""


# --------------------------------------------------------------------------- assignment

groups_st = st.lists(st.one_of(st.none(), st.sampled_from("abcde")), max_size=40)


@settings(max_examples=60, deadline=None)
@given(groups=groups_st, chunk=st.integers(1, 7), world=st.integers(1, 4))
def test_every_unit_goes_to_exactly_one_rank_whole(groups, chunk, world):
    reqs = [R(id=f"q{i}", group=g) for i, g in enumerate(groups)]
    per_rank = [rank_chunks(reqs, chunk, r, world) for r in range(world)]
    assert per_rank == [rank_chunks(reqs, chunk, r, world) for r in range(world)]  # deterministic
    ids = [x.id for chunks in per_rank for c in chunks for x in c]
    assert sorted(ids) == sorted(r.id for r in reqs) and len(ids) == len(set(ids))
    # the chunks are exactly a one-process run's chunks, dealt round-robin
    all_chunks = group_chunks(reqs, chunk)
    for r, chunks in enumerate(per_rank):
        assert chunks == all_chunks[r::world]
    # a group never spans two chunks (hence never two ranks)
    where = {}
    for r, chunks in enumerate(per_rank):
        for k, c in enumerate(chunks):
            for x in c:
                if x.group is not None:
                    assert where.setdefault(x.group, (r, k)) == (r, k)


def test_round_robin_by_chunk_index():
    reqs = [R(id=f"q{i}", group=g) for i, g in enumerate([None, "a", None, "a", None, None, None])]
    # units: q0 | q1+q3 | q2 | q4 | q5 | q6 -> chunks of 2: [q0] (group would overflow), [q1,q3], [q2,q4], [q5,q6]
    assert [[x.id for x in c] for c in group_chunks(reqs, 2)] == [["q0"], ["q1", "q3"], ["q2", "q4"], ["q5", "q6"]]
    assert [[x.id for x in c] for c in rank_chunks(reqs, 2, 0, 2)] == [["q0"], ["q2", "q4"]]
    assert [[x.id for x in c] for c in rank_chunks(reqs, 2, 1, 2)] == [["q1", "q3"], ["q5", "q6"]]
    assert rank_chunks(reqs, 2, 2, 3) == [group_chunks(reqs, 2)[2]]
    assert rank_chunks([], 4, 1, 2) == []
    with pytest.raises(ValueError, match="rank 2 outside"):
        rank_chunks(reqs, 2, 2, 2)


def test_record_order_is_one_process_order_for_any_chunk_size():
    reqs = [R(id=f"q{i}", group=g) for i, g in enumerate([None, "a", None, "a", "b", None, "b"])]
    want = ["q0", "q1", "q3", "q2", "q4", "q6", "q5"]
    assert record_order(reqs) == want
    for size in (1, 2, 3, 100):
        assert [x.id for c in group_chunks(reqs, size) for x in c] == want
    assert record_order([]) == []


def test_detect_reads_the_launcher_environment(monkeypatch):
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    assert detect() == Processes(0, 1, 0) and not detect().distributed
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    p = detect()
    assert (p.rank, p.world_size, p.local_rank, p.is_main, p.distributed) == (1, 2, 1, False, True)
    assert p.device("cuda") == "cuda:1" and p.device("cpu") == "cpu" and p.device("cuda:0") == "cuda:0"
    assert Processes().device("cuda") == "cuda"  # one process: left as asked
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert p.device("auto") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # 2 processes share the one GPU
    assert p.device("cuda") == p.device("auto") == "cuda:0"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert p.device("cuda") == "cuda:1"
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ProbeError, match="RANK=2 WORLD_SIZE=2"):
        detect()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ProbeError, match="bad process-group environment"):
        detect()


# --------------------------------------------------------------------------- merge


def _lines(path: Path, recs: list[dict], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in recs) + tail, encoding="utf-8")
    return path


def _ids(path: Path) -> list[str]:
    return [json.loads(x)["id"] for x in path.read_text(encoding="utf-8").splitlines()]


def test_shard_files_match_only_this_output(tmp_path):
    out = tmp_path / "a+b(1).jsonl"  # regex metacharacters in the name
    names = ["a+b(1).jsonl.rank1-of-2.jsonl", "a+b(1).jsonl.rank0-of-2.jsonl", "a+b(1).jsonl.rank2-of-3.jsonl",
             "a+b(1).jsonl.rankx-of-2.jsonl", "a+b(1).jsonl.provenance.json", "other.jsonl.rank0-of-2.jsonl",
             "a+b(1).jsonl.rank0-of-2.jsonl.tmp"]
    for n in names:
        (tmp_path / n).write_text("")
    assert [p.name for p in shard_files(out)] == names[1::-1] + [names[2]]
    assert shard_path(out, 1, 2).name == "a+b(1).jsonl.rank1-of-2.jsonl"
    assert shard_files(tmp_path / "missing" / "x.jsonl") == []


def test_merge_keeps_existing_records_and_follows_input_order(tmp_path):
    reqs = [R(id=f"q{i}", group=g) for i, g in enumerate([None, "a", None, "a", None, None])]
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "q2",   "kept": "as written"}\n{"id": "q0"}\n{"id": "torn', encoding="utf-8")
    before = out.read_bytes().split(b"\n")[:2]
    _lines(shard_path(out, 0, 2), [{"id": "q4", "x": 4}, {"id": "q0", "x": "dup of output: skipped"}])
    _lines(shard_path(out, 1, 2), [{"id": "q3", "x": 3}, {"id": "q1", "x": 1}, {"id": "zz", "x": "not in input"}],
           tail='{"id": "q5", "x"')  # a torn last line: q5 is not recorded
    _lines(shard_path(out, 0, 3), [{"id": "q5", "x": 5}])  # a shard of an earlier 3-process run
    assert merge_shards(out, reqs) == 5
    assert _ids(out) == ["q2", "q0", "q1", "q3", "q4", "q5", "zz"]
    assert out.read_bytes().split(b"\n")[:2] == before  # existing records byte for byte
    assert shard_files(out) == []
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no temp file left
    assert merge_shards(out, reqs) == 0  # nothing left to merge


def test_merge_without_shards_leaves_output_alone(tmp_path):
    out = tmp_path / "out.jsonl"
    assert merge_shards(out, []) == 0 and not out.exists()
    out.write_text('{"id": "a"}\n{"id": "b', encoding="utf-8")
    assert merge_shards(out, [R(id="a", group=None)]) == 0
    assert out.read_text() == '{"id": "a"}\n{"id": "b'


def test_merge_only_duplicates_of_output_just_deletes_the_shards(tmp_path):
    """What a crash after the merge's rename, before the shard deletion, leaves."""
    out = _lines(tmp_path / "out.jsonl", [{"id": "a"}, {"id": "b"}])
    before = out.read_bytes()
    _lines(shard_path(out, 1, 2), [{"id": "b"}])
    assert merge_shards(out, [R(id="a", group=None), R(id="b", group=None)]) == 0
    assert out.read_bytes() == before and shard_files(out) == []


def test_merge_refuses_an_id_in_two_shards(tmp_path):
    out = _lines(tmp_path / "out.jsonl", [{"id": "a"}])
    before = out.read_bytes()
    _lines(shard_path(out, 0, 2), [{"id": "b", "x": 1}])
    s1 = _lines(shard_path(out, 1, 2), [{"id": "c"}, {"id": "b", "x": 2}])
    with pytest.raises(InputError) as exc:
        merge_shards(out, [R(id=i, group=None) for i in "abc"])
    msg = str(exc.value)
    assert str(s1) in msg and "line 2" in msg and "field 'id'" in msg and "duplicate id 'b'" in msg
    assert out.read_bytes() == before and len(shard_files(out)) == 2  # nothing changed, nothing lost


def test_merge_refuses_a_record_without_id_or_a_corrupt_shard(tmp_path):
    out = tmp_path / "out.jsonl"
    s = _lines(shard_path(out, 0, 2), [{"id": "a"}, {"x": 1}])
    with pytest.raises(InputError, match=r"line 2, field 'id'"):
        merge_shards(out, [])
    s.write_text('{"id": "a"}\n{"id": \n{"id": "c"}\n')
    with pytest.raises(InputError, match=r"line 2.*corrupt record"):
        merge_shards(out, [])
    assert s.exists()


# --------------------------------------------------------------------------- sharded scoring, in process


class _Sequential(Processes):
    """Ranks run one after the other in this process; barriers are no-ops (ranks > 0 first)."""

    def barrier(self) -> None:
        pass

    def broadcast(self, obj, src=0):
        return obj  # a shared filesystem: every rank's view is rank 0's

    def all_gather(self, obj):
        return [None] * self.world_size  # nothing to compare: no shard is sent over a group




def _maker(runner, task):
    """What the runner writes per chunk: one record dict per result."""
    return lambda part: [Record.from_result(task, runner.model_id, r).to_dict() for r in runner.scorer.score(part)]


def test_sequential_ranks_equal_one_process_perplexity(tmp_path, tiny_lm):
    from probe.scoring import PerplexityRequest, Scorer

    reqs = [PerplexityRequest(id=f"t{i}", text=f" sat on mat number {i}.", prefix="The cat" if i % 2 else "")
            for i in range(7)]
    runner = Runner(tiny_lm, RunOptions(batch_size=2, chunk_size=2, progress=False))
    ref = tmp_path / "ref.jsonl"
    runner.score(reqs, ref, task="perplexity")
    make = _maker(runner, "perplexity")
    out = tmp_path / "out.jsonl"
    # rank 0 writes <output>.input.json before the first barrier, i.e. before any rank appends
    check_input(out, set(), reqs, tiny_lm)
    # chunks t0-1 | t2-3 | t4-5 | t6: rank 2 scores t4-5, rank 1 t2-3, rank 0 t0-1 and t6
    assert score_sharded(runner, reqs, out, _Sequential(2, 3), make=make, chunk=2, progress=False) == 2
    assert score_sharded(runner, reqs, out, _Sequential(1, 3), make=make, chunk=2, progress=False) == 2
    assert not out.exists()  # only rank 0 merges
    assert score_sharded(runner, reqs, out, _Sequential(0, 3), make=make, chunk=2, progress=False) == 7
    assert out.read_bytes() == ref.read_bytes() and shard_files(out) == []


def test_small_input_warns_that_processes_idle(tmp_path, tiny_lm, capsys):
    from probe.scoring import PerplexityRequest, Scorer

    reqs = [PerplexityRequest(id=f"t{i}", text=f"The cat {i}.") for i in range(3)]
    runner = Runner(tiny_lm, RunOptions(batch_size=4, progress=False))
    make = _maker(runner, "perplexity")
    check_input(tmp_path / "out.jsonl", set(), reqs, tiny_lm)
    assert score_sharded(runner, reqs, tmp_path / "out.jsonl", _Sequential(1, 2), make=make, chunk=4, progress=False) == 0
    assert "warning" not in capsys.readouterr().err  # only rank 0 says it
    assert score_sharded(runner, reqs, tmp_path / "out.jsonl", _Sequential(0, 2), make=make, chunk=4, progress=False) == 3
    err = capsys.readouterr().err
    assert "3 item(s) make 1 chunk(s) of --flush-every 4 for 2 processes; 1 will idle" in err


def test_one_process_folds_in_shards_of_an_interrupted_multi_process_run(tmp_path, model_dir):
    inp = _write_items(tmp_path / "items.jsonl", _items(12))
    args = ["--model", str(model_dir), "--input", str(inp), "--batch-size", "2", "--flush-every", "3"]
    ref = tmp_path / "ref.jsonl"
    assert main(["score", *args, "--output", str(ref)]) == 0
    lines = ref.read_text().splitlines(keepends=True)
    out = tmp_path / "out.jsonl"
    # rank 1 of 2 had finished two records of its share; a wrong record there would survive, proving reuse
    recs = [json.loads(x) for x in lines]
    mine = {r.id for c in rank_chunks([R(id=x["id"], group=None) for x in _items(12)], 3, 1, 2) for r in c}
    got = [r for r in recs if r["id"] in mine][:2]
    marked = [{**r, "n_prompt_tokens": -1} for r in got]
    shard_path(out, 1, 2).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in marked))
    # without the input check sidecar the records cannot be trusted: refused, nothing merged
    assert main(["score", *args, "--output", str(out)]) == 1
    assert not out.exists() and len(shard_files(out)) == 1
    _copy_sidecar(ref, out)  # same input and model: now they are reused
    assert main(["score", *args, "--output", str(out)]) == 0
    final = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(r["id"] for r in final) == sorted(r["id"] for r in recs)
    assert [r["id"] for r in final[:2]] == [r["id"] for r in got]  # merged first, not recomputed
    assert all(r["n_prompt_tokens"] == -1 for r in final[:2])
    assert shard_files(out) == []


def _copy_sidecar(src: Path, dst: Path) -> None:
    """``<output>.input.json`` (model + request digests) of a run on the same input and model."""
    name = ".input.json"
    (dst.parent / (dst.name + name)).write_bytes((src.parent / (src.name + name)).read_bytes())


# --------------------------------------------------------------------------- two real processes


def _can_launch() -> str | None:
    if importlib.util.find_spec("accelerate") is None:
        return "accelerate is not installed"
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        return "torch.distributed with the gloo backend is not available"
    return None


two_procs = pytest.mark.skipif(_can_launch() is not None, reason=f"cannot start 2 processes: {_can_launch()}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(tmp_path: Path, argv: list[str]) -> float:
    """Run ``probe`` under ``accelerate launch`` with 2 CPU processes; return the wall time."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x),
           "HF_HOME": str(tmp_path / "hf-home")}  # no user accelerate config file changes the launch
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(_free_port()), "-m", "probe.cli", *argv]
    t0 = time.perf_counter()
    # its own session, so that a hung launch is ended with all its worker processes
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("2-process launch did not finish in 300 s")
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, (stdout + stderr)[-4000:]
    assert stderr.count("scored ") == 1, "only rank 0 reports"
    return wall


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def _compare(got: list[dict], want: list[dict]) -> tuple[float, int, int]:
    """Max |Δ log-prob|, changed answers outside near-ties, near-ties (by id; ``want`` is the reference)."""
    by_id = {r["id"]: r for r in got}
    assert len(by_id) == len(got) and set(by_id) == {r["id"] for r in want}
    worst, changed, ties = 0.0, 0, 0
    for ref in want:
        rec = by_id[ref["id"]]
        worst = max([worst] + [abs(a - b) for a, b in zip(rec["logprobs"], ref["logprobs"])])
        top = sorted(ref["logprobs"], reverse=True)
        tie = len(top) > 1 and top[0] - top[1] < TIE
        ties += tie
        changed += rec["pred_index"] != ref["pred_index"] and not tie
    return worst, changed, ties


N_ITEMS = 60


@two_procs
def test_two_processes_equal_one_process(tmp_path, model_dir):
    items = _items(N_ITEMS)
    inp = _write_items(tmp_path / "items.jsonl", items)
    model = ["--model", str(model_dir), "--input", str(inp)]
    one = tmp_path / "one.jsonl"
    assert main(["score", *model, "--output", str(one), "--batch-size", "2", "--flush-every", "4"]) == 0
    # another batch size, chunk size and input order, one process
    other = tmp_path / "other.jsonl"
    rev = _write_items(tmp_path / "rev.jsonl", items[::-1])
    assert main(["score", "--model", str(model_dir), "--input", str(rev), "--output", str(other),
                 "--batch-size", "7", "--flush-every", "9"]) == 0
    two = tmp_path / "two.jsonl"
    wall = _launch(tmp_path, ["score", *model, "--output", str(two), "--batch-size", "2", "--flush-every", "4"])
    # same chunks, same code: the 2-process file is the 1-process file, byte for byte
    assert [r["id"] for r in _records(two)] == [r["id"] for r in _records(one)]
    assert two.read_bytes() == one.read_bytes()
    assert shard_files(two) == []
    prov = json.loads((tmp_path / "two.jsonl.provenance.json").read_text())
    assert prov["world_size"] == 2
    # both ranks' work is counted (not rank 0's alone): the same raw tokens and requests as one process
    solo = json.loads((tmp_path / "one.jsonl.provenance.json").read_text())["work"]
    assert len(prov["work"]["processes"]) == 2 and {p["rank"] for p in prov["work"]["processes"]} == {0, 1}
    assert prov["work"]["engine"]["tokens_raw"] == solo["engine"]["tokens_raw"] > 0
    assert sum(t["n"] for t in prov["work"]["timing"].values()) == N_ITEMS
    worst, changed, ties = _compare(_records(two), _records(other))
    msg = (f"2 processes (batch 2, chunk 4) vs 1 process (batch 7, chunk 9, reversed input): {N_ITEMS} items, "
           f"max |Δ logprob|={worst:.2e}, changed answers={changed}, near-ties (|Δ|<{TIE})={ties}; 2-process wall {wall:.1f} s")
    print("\n" + msg)
    assert worst <= 1e-4, msg
    assert changed == 0, msg


@two_procs
def test_two_processes_resume_from_partial_output_and_shards(tmp_path, model_dir):
    items = _items(N_ITEMS)
    inp = _write_items(tmp_path / "items.jsonl", items)
    argv = ["score", "--model", str(model_dir), "--input", str(inp), "--batch-size", "2", "--flush-every", "4"]
    ref = tmp_path / "ref.jsonl"
    assert main([*argv, "--output", str(ref)]) == 0
    lines = ref.read_text(encoding="utf-8").splitlines(keepends=True)
    by_id = {json.loads(x)["id"]: x for x in lines}
    reqs = [R(id=x["id"], group=x.get("group")) for x in items]
    out = tmp_path / "out.jsonl"
    out.write_text("".join(lines[:10]), encoding="utf-8")  # an earlier 1-process run, interrupted
    _copy_sidecar(ref, out)
    # rank 1's shard of an interrupted 2-process run: its first chunks, then a torn line
    rank1 = [r.id for c in rank_chunks(reqs, 4, 1, 2) for r in c]
    done1 = [i for i in rank1 if by_id[i] not in lines[:10]][:6]
    shard_path(out, 1, 2).write_text("".join(by_id[i] for i in done1) + by_id[rank1[-1]][:25], encoding="utf-8")
    # and a stale shard of a 3-process run
    stale = [i for i in record_order(reqs) if by_id[i] not in lines[:10] and i not in done1][-3:]
    shard_path(out, 2, 3).write_text("".join(by_id[i] for i in stale), encoding="utf-8")
    wall = _launch(tmp_path, [*argv, "--output", str(out)])
    ids = _ids(out)
    print(f"\n2-process resume: items={N_ITEMS} pre-recorded={10 + len(done1) + len(stale)} records={len(ids)} "
          f"duplicates={len(ids) - len(set(ids))} lost={N_ITEMS - len(set(ids))}; wall {wall:.1f} s")
    assert len(ids) == len(set(ids)) == N_ITEMS
    assert out.read_bytes() == ref.read_bytes()  # every item exactly once, in one-process order, same bytes
    assert shard_files(out) == []
