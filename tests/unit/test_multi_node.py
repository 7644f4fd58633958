"""Two "nodes" that share no filesystem: rank 0 and rank 1 write under different directories.

The two processes form one gloo process group (``RANK``/``WORLD_SIZE``/
``MASTER_ADDR``/``MASTER_PORT``, as torchrun sets them on each node) but each
has its own ``--output`` path, so neither sees the other's files, as on two
machines with local disks. Rank 1's shard reaches rank 0 over the group; rank 0
holds the one-process records; rank 1 finishes without error.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from probe.cli import main
from probe.runs.shard import shard_files
from tests.tiny import score_items, write_items

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread):
    """In-process runs use one thread, like the subprocesses."""


def _gloo() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_gloo_available()


@pytest.mark.skipif(not _gloo(), reason="torch.distributed with gloo is not available")
def test_two_nodes_without_a_shared_filesystem(tmp_path, model_dir):
    inp = write_items(tmp_path / "items.jsonl", score_items(24))
    common = ["score", "--model", str(model_dir), "--input", str(inp), "--device", "cpu", "--batch-size", "2",
              "--flush-every", "4"]
    one = tmp_path / "one.jsonl"
    assert main([*common, "--output", str(one)]) == 0
    port = str(_free_port())
    procs = []
    for rank in range(2):
        node = tmp_path / f"node{rank}"  # each rank's own disk
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "PYTHONPATH": os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)}
        procs.append(subprocess.Popen([sys.executable, "-m", "probe.cli", *common, "--output", str(node / "out.jsonl")],
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=300))
        except subprocess.TimeoutExpired:  # pragma: no cover - a hung group
            for q in procs:
                q.kill()
            pytest.fail("2-node run did not finish in 300 s")
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    got = tmp_path / "node0" / "out.jsonl"
    assert got.read_bytes() == one.read_bytes()  # rank 1's records came over the group, in one-process order
    assert shard_files(got) == []
    assert not list((tmp_path / "node1").glob("out.jsonl*"))  # rank 1's shard went to rank 0, then was removed
    assert "scored 24 new item(s)" in outs[0][1]
