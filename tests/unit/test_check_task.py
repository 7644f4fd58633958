"""The public task contract test, ``probe.testing.check_task``: every registered task and the docs' example
plugins pass it, and a task that breaks the contract is told which check it broke."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from probe.scoring.requests import LabelRequest
from probe.tasks import available
from probe.tasks.base import Aggregate, CheckCase, Task, TaskConfig
from probe.testing import TaskCheckError, check_task

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.mark.parametrize("name", list(available()))
def test_every_registered_task_passes_check_task(name, tiny_lm, tmp_path):
    assert check_task(name, tiny_lm, output=tmp_path) == [
        "declaration", "config", "selection", "requests", "run", "resume", "hooks"]


@pytest.mark.parametrize("folder, module, cls", [("probe_tinybbq", "tinybbq", "TinyBBQTask"),
                                                 ("probe_pairs", "probe_pairs", "PairsTask")])
def test_the_docs_example_plugins_pass_check_task(folder, module, cls, tiny_lm, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES / folder))
    mod = __import__(module)
    try:
        assert "hooks" in check_task(getattr(mod, cls)(), tiny_lm, output=tmp_path)
    finally:
        sys.modules.pop(module, None)


@dataclass(frozen=True)
class _Config(TaskConfig):
    n: int = 3


class _Twice(Task[_Config, int]):
    """Every request id twice: a resumed run could not tell its records apart."""

    name = "twice"
    description = "a task whose request ids repeat"
    Config = _Config

    def check_case(self) -> CheckCase:
        return CheckCase({}, None)

    def items(self, config: _Config) -> list[int]:
        return list(range(config.n))

    def requests(self, config: _Config, items, tokenizer, generations=None) -> list:
        return [LabelRequest("same", f"Question {i}? Answer:", ("A", "B")) for i in items]

    def aggregate(self, config: _Config, records, items) -> Aggregate:
        return Aggregate({})


def test_a_broken_task_is_told_the_check_it_broke(tiny_lm):
    with pytest.raises(TaskCheckError, match=r"check_task\('twice'\) failed requests: .*duplicate id 'same'"):
        check_task(_Twice(), tiny_lm)


def test_a_config_that_is_not_a_task_config_is_refused(tiny_lm):
    @dataclass
    class Loose:  # neither a TaskConfig nor frozen: --set could not check it, nor provenance record it
        n: int = 3

    class Mutable(_Twice):
        name = "mutable"
        Config = Loose

    with pytest.raises(TaskCheckError, match="failed declaration: Config must be a TaskConfig dataclass"):
        check_task(Mutable(), tiny_lm)
