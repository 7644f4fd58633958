"""Under a launcher (``WORLD_SIZE=2``) no command runs every request in every process without saying so.

``probe lm-eval`` shares the documents out as lm-eval's HFLM does (rank and
world size from an ``Accelerator``; mocked here: no process group is started);
``probe activations`` refuses before loading anything.
"""

from __future__ import annotations

import json

import pytest

from probe.cli import main


@pytest.fixture
def two_ranks(monkeypatch):
    def at(rank: int) -> None:
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("LOCAL_RANK", str(rank))

    return at


class _FakeAccelerator:
    """What HFLM reads from accelerate's Accelerator, for a launch of ``n`` processes (no group is joined)."""

    def __init__(self, n: int, rank: int) -> None:
        self.num_processes, self.process_index, self.local_process_index = n, rank, rank
        import torch

        self.device = torch.device("cpu")


def _patch_accelerate(monkeypatch, n: int, rank: int) -> list:
    import probe.integrations.lm_eval as backend

    made = []

    def make(*args, **kwargs):
        made.append(_FakeAccelerator(n, rank))
        return made[-1]

    monkeypatch.setattr(backend, "Accelerator", make)  # where the backend looks it up
    return made


@pytest.mark.parametrize("rank", [0, 1])
def test_lm_eval_backend_takes_its_rank_and_world_size(tiny_lm, two_ranks, monkeypatch, rank):
    pytest.importorskip("lm_eval")
    from probe.integrations.lm_eval import ProbeLM

    two_ranks(rank)
    made = _patch_accelerate(monkeypatch, 2, rank)
    lm = ProbeLM(tiny_lm)
    # lm-eval's evaluator builds each rank's requests from (rank, world_size) and gathers on rank 0
    assert (lm.rank, lm.world_size) == (rank, 2) and lm.accelerator is made[0]


def test_lm_eval_backend_without_a_launch_stays_one_process(tiny_lm, monkeypatch):
    pytest.importorskip("lm_eval")
    from probe.integrations.lm_eval import ProbeLM

    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    made = _patch_accelerate(monkeypatch, 1, 0)
    lm = ProbeLM(tiny_lm)
    assert (lm.rank, lm.world_size) == (0, 1) and not made


def test_lm_eval_backend_refuses_a_world_accelerate_does_not_see(tiny_lm, two_ranks, monkeypatch):
    pytest.importorskip("lm_eval")
    from probe.integrations.lm_eval import ProbeLM

    two_ranks(0)
    _patch_accelerate(monkeypatch, 1, 0)  # e.g. WORLD_SIZE set by hand: each process would run everything
    with pytest.raises(ValueError, match="WORLD_SIZE=2 but accelerate sees 1"):
        ProbeLM(tiny_lm)
    with pytest.raises(ValueError, match="cannot be combined with 2 processes"):
        ProbeLM(tiny_lm, device_map="auto")


def test_lm_eval_data_parallel_splits_the_documents(tiny_lm, two_ranks, monkeypatch):
    """The two ranks' request lists, as lm-eval's evaluator builds them from the backend's rank, are disjoint."""
    pytest.importorskip("lm_eval")
    from probe.integrations.lm_eval import ProbeLM

    docs = list(range(10))
    shares = []
    for rank in (0, 1):
        two_ranks(rank)
        _patch_accelerate(monkeypatch, 2, rank)
        lm = ProbeLM(tiny_lm)
        # lm_eval.api.task.Task.build_all_requests: doc_iterator(rank=lm.rank, world_size=lm.world_size)
        from lm_eval.utils import create_iterator

        shares.append([d for _, d in create_iterator(enumerate(docs), rank=lm.rank, limit=None,
                                                     world_size=lm.world_size)])
    assert sorted(shares[0] + shares[1]) == docs and not set(shares[0]) & set(shares[1])


def test_activations_under_a_launcher_refuses_before_loading(tmp_path, two_ranks, capsys, monkeypatch):
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "a", "prompt": "Who?", "options": ["A", "B"]}) + "\n")
    two_ranks(0)
    import probe.commands.activations as command

    monkeypatch.setattr(command, "record", lambda *a, **k: pytest.fail("must not record"))
    out = tmp_path / "acts"
    assert main(["activations", "--model", "nonexistent-model", "--input", str(items), "--output", str(out)]) == 1
    assert "runs in one process, but 2 were launched" in capsys.readouterr().err
    assert not out.exists()
