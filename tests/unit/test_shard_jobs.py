"""``--shard I/N``: independent processes (a job array) score shares; a plain run or ``probe merge`` folds them.

The central check: N shards run as separate plain processes (no process
group, no launcher), then folded, give the records of one process byte for byte.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from probe.cli import main
from probe.errors import ProbeError
from probe.runs.shard import shard_files, shard_path
from probe.runs.shard_set import Shard, fold_tree, independent_shards, manifest_path, shards_log
from tests.tiny import score_items, write_items

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread):
    """In-process runs use one thread, like the subprocesses."""


def _score(model_dir: Path, inp: Path, out: Path, *extra: str) -> int:
    return main(["score", "--model", str(model_dir), "--input", str(inp), "--output", str(out), "--device", "cpu",
                 "--batch-size", "2", "--flush-every", "4", *extra])


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x))
    return env


def test_shard_spec_parses_and_refuses():
    assert Shard.parse("0/1") == Shard(0, 1) and Shard.parse(" 3 / 4 ") == Shard(3, 4)
    for bad in ("4/4", "1", "-1/2", "a/b", "0/0", "1/2/3"):
        with pytest.raises(ValueError):
            Shard.parse(bad)
    with pytest.raises(SystemExit):  # argparse: a usage error, before any model loads
        main(["score", "--input", "x", "--output", "y", "--shard", "2/2"])


def test_two_shards_as_separate_processes_then_merged_equal_one_process(tmp_path, model_dir):
    inp = write_items(tmp_path / "items.jsonl", score_items(40))
    one = tmp_path / "one.jsonl"
    t0 = time.perf_counter()
    assert _score(model_dir, inp, one) == 0
    t_one = time.perf_counter() - t0
    out = tmp_path / "sharded.jsonl"
    argv = [sys.executable, "-m", "probe.cli", "score", "--model", str(model_dir), "--input", str(inp),
            "--output", str(out), "--device", "cpu", "--batch-size", "2", "--flush-every", "4"]
    t0 = time.perf_counter()
    procs = [subprocess.Popen([*argv, "--shard", f"{i}/2"], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    t_shards = time.perf_counter() - t0
    for p, (so, se) in zip(procs, outs):
        assert p.returncode == 0, se[-3000:]
        assert "new record(s) in sharded.jsonl.rank" in se
    assert not out.exists() and len(independent_shards(out)) == 2
    # the plain run folds the complete set: nothing left to score, same bytes as one process
    t0 = time.perf_counter()
    assert _score(model_dir, inp, out) == 0
    t_fold = time.perf_counter() - t0
    assert out.read_bytes() == one.read_bytes()
    assert shard_files(out) == [] and not list(tmp_path.glob("sharded.jsonl.rank*"))
    assert json.loads((tmp_path / "sharded.jsonl.input.json").read_text()) == json.loads(
        (tmp_path / "one.jsonl.input.json").read_text())
    log = json.loads(shards_log(out).read_text())
    assert sorted(tuple(s["shard"]) for s in log["shards"]) == [(0, 2), (1, 2)]
    assert sum(s["n_assigned"] for s in log["shards"]) == 40
    assert sum(t["n"] for s in log["shards"] for t in s["timing"].values()) == 40
    print(f"\n40 items: one process {t_one:.1f} s in-process; 2 shard processes {t_shards:.1f} s wall "
          f"(incl. start-up); fold {t_fold:.1f} s; byte-identical")


def test_probe_merge_folds_only_complete_sets(tmp_path, model_dir):
    inp = write_items(tmp_path / "items.jsonl", score_items(18))
    one = tmp_path / "one.jsonl"
    assert _score(model_dir, inp, one) == 0
    out = tmp_path / "run" / "m.jsonl"
    assert _score(model_dir, inp, out, "--shard", "0/3") == 0
    assert _score(model_dir, inp, out, "--shard", "2/3") == 0
    res = fold_tree(tmp_path / "run")
    assert res[0].waiting == ["1/3"] and not res[0].folded and not out.exists()
    # a plain run does not fold an unfinished set (its shards may still be running): refused, nothing changed
    with pytest.raises(ProbeError, match=r"shard\(s\) 1/3 are not finished"):
        _plain_run(model_dir, inp, out)
    assert len(independent_shards(out)) == 2
    # an interrupted shard (manifest says incomplete) is not folded either
    assert _score(model_dir, inp, out, "--shard", "1/3") == 0
    man = manifest_path(shard_path(out, 1, 3))
    data = json.loads(man.read_text())
    man.write_text(json.dumps({**data, "complete": False}))
    assert fold_tree(out)[0].waiting == ["1/3"]
    assert _score(model_dir, inp, out, "--shard", "1/3") == 0  # re-run: nothing new to score, marked complete
    assert main(["merge", str(tmp_path / "run")]) == 0
    assert out.read_bytes() == one.read_bytes() and shard_files(out) == []
    assert main(["merge", str(tmp_path / "run")]) == 0  # nothing left: a no-op


def _plain_run(model_dir, inp, out):
    """`probe score` without --shard, raising its error instead of printing it."""
    from probe.cli import build_parser
    from probe.commands.score import run_score

    args = build_parser().parse_args(["score", "--model", str(model_dir), "--input", str(inp), "--output", str(out),
                                      "--device", "cpu", "--batch-size", "2", "--flush-every", "4"])
    run_score(args)


def test_merge_refuses_shards_of_two_models(tmp_path, model_dir, tiny_lm):
    from tests.tiny import tiny_lm as make

    other = tmp_path / "other-model"
    lm = make(seed=1)
    lm.model.save_pretrained(other)
    lm.tokenizer.save_pretrained(other)
    inp = write_items(tmp_path / "items.jsonl", score_items(12))
    out = tmp_path / "x.jsonl"
    assert _score(model_dir, inp, out, "--shard", "0/2") == 0
    assert _score(other, inp, out, "--shard", "1/2") == 0
    with pytest.raises(ProbeError, match="refusing to merge two models"):
        fold_tree(out)
    assert main(["merge", str(out)]) == 1 and not out.exists() and len(independent_shards(out)) == 2


def test_merge_refuses_shards_of_two_inputs(tmp_path, model_dir):
    items = score_items(12)
    a = write_items(tmp_path / "a.jsonl", items)
    changed = [dict(x) for x in items]
    changed[-1]["prompt"] = "Something else entirely?"
    b = write_items(tmp_path / "b.jsonl", changed)
    out = tmp_path / "x.jsonl"
    assert _score(model_dir, a, out, "--shard", "0/2") == 0
    # a shard re-run with another chunk size (other chunks: other shares) is refused
    assert main(["score", "--model", str(model_dir), "--input", str(a), "--output", str(out), "--device", "cpu",
                 "--batch-size", "2", "--flush-every", "5", "--shard", "0/2"]) == 1
    assert _score(model_dir, b, out, "--shard", "1/2") == 0
    with pytest.raises(ProbeError, match="differs from the one in|other request ids"):
        fold_tree(out)


def test_shard_under_a_launcher_is_refused(tmp_path, model_dir, monkeypatch):
    inp = write_items(tmp_path / "items.jsonl", score_items(4))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    from probe.runs.runner import RunOptions, Runner
    from tests.tiny import tiny_lm as make

    with pytest.raises(ProbeError, match="without a process group"):
        Runner(make(), RunOptions(shard="0/2", progress=False))


def test_probe_run_task_in_shards_equals_one_process(tmp_path, model_dir, shared_data):
    base = ["run", "bbq", "--model", str(model_dir), "--limit", "12", "--no-progress", "--threads", "1",
            "--chunk-size", "4", "--batch-size", "2", "--device", "cpu", "--set", "n_boot=0"]
    one, sharded = tmp_path / "one", tmp_path / "sharded"
    assert main([*base, "--output", str(one)]) == 0
    for i in range(3):
        assert main([*base, "--output", str(sharded), "--shard", f"{i}/3"]) == 0
    assert not (sharded / "summary.json").exists()
    # every set complete: a shard run again scores nothing and writes no summary
    assert main([*base, "--output", str(sharded), "--shard", "0/3"]) == 0
    assert not (sharded / "summary.json").exists()
    assert main([*base, "--output", str(sharded)]) == 0
    assert (sharded / "records.jsonl").read_bytes() == (one / "records.jsonl").read_bytes()
    a, b = (json.loads((d / "summary.json").read_text()) for d in (one, sharded))
    assert a == b


def test_a_task_that_generates_first_runs_the_array_twice(tmp_path, model_dir, shared_data):
    """Chain-of-thought: the first array pass shards the generations, the second (reading the complete
    generation set) the scores; the fold run then equals one process in both files and the summary."""
    base = ["run", str(ROOT / "configs" / "cmp_iso_cot.yaml"), "--model", str(model_dir), "--set", "max_pairs=2",
            "--set", "max_new_tokens=8", "--set", "cot_chains=1", "--set", "n_boot=10", "--set", "n_iter=10",
            "--chunk-size", "4", "--no-progress", "--threads", "1"]
    one, sharded = tmp_path / "one", tmp_path / "sharded"
    assert main([*base, "--output", str(one)]) == 0
    for _ in range(2):
        for i in range(2):
            assert main([*base, "--output", str(sharded), "--shard", f"{i}/2"]) == 0
    assert len(independent_shards(sharded / "generations.jsonl")) == 2
    assert len(independent_shards(sharded / "records.jsonl")) == 2
    assert main([*base, "--output", str(sharded)]) == 0
    for name in ("generations.jsonl", "records.jsonl"):
        assert (sharded / name).read_bytes() == (one / name).read_bytes(), name
    assert json.loads((sharded / "summary.json").read_text()) == json.loads((one / "summary.json").read_text())
    timing = json.loads((sharded / "timing.json").read_text())
    assert len(timing["processes"]) == 5  # the folding run and 2 shards of each file


# --------------------------------------------------------------------------- probe activations --shard


@pytest.fixture(scope="module")
def acts_model(tmp_path_factory):
    from tests.unit._tiny_models import tiny_llama, tiny_tokenizer

    d = tmp_path_factory.mktemp("tiny-acts")
    tok = tiny_tokenizer()
    tiny_llama(tok, n_layers=2).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def _act_items(path: Path) -> Path:
    rows = [{"id": f"p{i}", "prompt": f"Person {'AB'[i % 2]} item {i}. Who is old? Answer:", "labels": ["A", "B"],
             "cue": f"item {i}"} for i in range(7)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _store_bytes(d: Path) -> dict[str, bytes]:
    """The activation store's files (manifest, items table, safetensors shards), not the Runner's records."""
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and (p.name in ("manifest.json", "items.jsonl") or p.parent.name == "shards")}


def test_activations_in_shards_equal_one_process(tmp_path, acts_model, capsys):
    from probe.activations.shards import shard_store

    items = _act_items(tmp_path / "items.jsonl")
    argv = ["activations", "--model", str(acts_model), "--input", str(items), "--layers", "0,-1",
            "--positions", "last,mean:cue", "--shard-size", "2", "--device", "cpu", "--dtype", "float32", "--quiet"]
    one, sharded = tmp_path / "one", tmp_path / "sharded"
    assert main([*argv, "--output", str(one)]) == 0
    capsys.readouterr()
    assert main([*argv, "--output", str(sharded), "--shard", "0/2"]) == 0
    assert json.loads(capsys.readouterr().out)["items_assigned"] == 4  # chunks 0 and 2 of p0-1 | p2-3 | p4-5 | p6
    # the other shard has not run: the plain command refuses to fold, nothing is written
    assert main([*argv, "--output", str(sharded)]) == 1
    assert "activation shard(s) 1/2 are not finished" in capsys.readouterr().err
    assert not (sharded / "manifest.json").exists()  # the store is not written
    assert main([*argv, "--output", str(sharded), "--shard", "1/2"]) == 0
    capsys.readouterr()
    assert main([*argv, "--output", str(sharded)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["items_folded"] == 7 and stats["items_run"] == 0
    # the items table and every safetensors file are the ones one process writes, and so are the records
    assert _store_bytes(sharded) == _store_bytes(one) and len(_store_bytes(one)) == 6
    assert (sharded / "records.jsonl").read_bytes() == (one / "records.jsonl").read_bytes()
    assert not shard_store(sharded, 0, 2).exists() and not shard_store(sharded, 1, 2).exists()


def test_activation_shards_of_another_setting_are_refused(tmp_path, acts_model, capsys):
    items = _act_items(tmp_path / "items.jsonl")
    argv = ["activations", "--model", str(acts_model), "--input", str(items), "--shard-size", "2", "--device", "cpu",
            "--dtype", "float32", "--quiet", "--output", str(tmp_path / "s")]
    assert main([*argv, "--layers", "0", "--shard", "0/2"]) == 0
    assert main([*argv, "--layers", "0", "--shard", "1/2"]) == 0
    assert main([*argv, "--layers", "1"]) == 1  # other hooks than the shards recorded
    assert "refusing to merge it" in capsys.readouterr().err


def test_a_shard_dealt_no_chunk_still_completes_the_set(tmp_path, model_dir):
    """Fewer chunks than shards: the shard with nothing to score leaves an empty file and the set folds."""
    inp = write_items(tmp_path / "items.jsonl", score_items(6))
    one = tmp_path / "one.jsonl"
    assert _score(model_dir, inp, one) == 0
    out = tmp_path / "sharded.jsonl"
    for i in range(4):  # 6 items in chunks of 4: 2 chunks for 4 shards
        assert _score(model_dir, inp, out, "--shard", f"{i}/4") == 0
    assert _score(model_dir, inp, out) == 0
    assert out.read_bytes() == one.read_bytes()


def test_run_capture_in_shards_equals_one_process(tmp_path, model_dir, capsys):
    """`probe run demo --capture ... --shard I/N`: each job stores its chunks' activations beside its records;
    the fold run gives the records and the activation store one process writes, byte for byte (a group
    longer than a chunk is split into safetensors files as one process splits it)."""
    argv = ["run", "demo", "--model", str(model_dir), "--capture", "blocks.*.hook_resid_post@last",
            "--chunk-size", "4", "--threads", "1", "--no-progress"]
    one, sharded = tmp_path / "one", tmp_path / "sharded"
    assert main([*argv, "--output", str(one)]) == 0
    for i in (0, 1):
        assert main([*argv, "--output", str(sharded), "--shard", f"{i}/2"]) == 0
        assert (sharded / f"activations.rank{i}-of-2" / "shard.json").is_file()
    assert main([*argv, "--output", str(sharded)]) == 0
    capsys.readouterr()
    assert (sharded / "records.jsonl").read_bytes() == (one / "records.jsonl").read_bytes()
    assert _store_bytes(sharded / "activations") == _store_bytes(one / "activations")
    assert not any(p.name.startswith("activations.rank") for p in sharded.iterdir())
