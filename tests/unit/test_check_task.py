"""The public task contract test: ``probe.testing.parametrize_with_checks`` gives every registered task and the
docs' example plugins one test per check; ``check_task`` reports every check a task broke, not the first; a
declared expected failure is marked xfail."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from probe.scoring.requests import LabelRequest
from probe.tasks import available
from probe.tasks.base import Aggregate, CheckCase, Task, TaskConfig
from probe.testing import CHECKS, TaskCheckError, check_task, parametrize_with_checks, task_checks

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
NAMES = [c.__name__.removeprefix("check_") for c in CHECKS]


def _example(folder: str, module: str, cls: str) -> Task:
    """A docs example plugin's task, imported from its folder (sys.path and sys.modules left as they were)."""
    where = str(EXAMPLES / folder)
    sys.path.insert(0, where)
    try:
        return getattr(importlib.import_module(module), cls)()
    finally:
        sys.path.remove(where)
        for name in [n for n, m in sys.modules.items() if str(getattr(m, "__file__", "") or "").startswith(where)]:
            del sys.modules[name]  # the example's own modules only


@parametrize_with_checks(list(available()))
def test_every_registered_task_keeps_the_contract(task, check, tiny_lm):
    check(tiny_lm)


@parametrize_with_checks([_example("probe_tinybbq", "tinybbq", "TinyBBQTask"),
                          _example("probe_pairs", "probe_pairs", "PairsTask")])
def test_the_docs_example_plugins_keep_the_contract(task, check, tiny_lm):
    check(tiny_lm)


def test_one_test_per_task_and_check():
    params = parametrize_with_checks(["demo", "bbq"]).args[1]
    assert [p.id for p in params] == [f"{t}-{c}" for t in ("demo", "bbq") for c in NAMES]
    assert not any(p.marks for p in params)


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


#: what _Twice breaks, and why: the checks that need its requests or its run
TWICE_FAILS = {"requests": "its request ids repeat", "run": "the runner refuses repeated ids",
               "resume": "there is no run to resume", "hooks": "there is no run to read"}


def test_a_broken_task_is_told_every_check_it_broke(tiny_lm):
    with pytest.raises(TaskCheckError) as err:
        check_task(_Twice(), tiny_lm)
    lines = str(err.value).splitlines()
    assert [line.split(":")[0] for line in lines] == [f"check_task('twice') failed {c}" for c in TWICE_FAILS]
    assert "duplicate id 'same'" in lines[0]


def test_declared_failures_are_not_raised(tiny_lm):
    assert check_task(_Twice(), tiny_lm, expected_failures=TWICE_FAILS) == ["declaration", "config", "selection"]
    with pytest.raises(ValueError, match="names no check: reqests"):
        check_task(_Twice(), tiny_lm, expected_failures={"reqests": "a typo"})


@parametrize_with_checks([_Twice()], expected_failures=TWICE_FAILS)
def test_declared_failures_are_marked_xfail(task, check, tiny_lm):
    check(tiny_lm)


def test_the_xfail_marks_carry_the_reasons():
    params = parametrize_with_checks([_Twice()], expected_failures=lambda task: TWICE_FAILS).args[1]
    reasons = {p.id.split("-")[1]: [m.kwargs["reason"] for m in p.marks] for p in params}
    assert reasons == {c: [TWICE_FAILS[c]] if c in TWICE_FAILS else [] for c in NAMES}


def test_the_checks_of_a_task_share_one_run(tiny_lm):
    checks = task_checks("demo", tiny_lm)
    for check in checks:
        check()
    assert len({id(c.subject.case()) for c in checks}) == 1


def test_a_config_that_is_not_a_task_config_is_refused(tiny_lm):
    @dataclass
    class Loose:  # neither a TaskConfig nor frozen: --set could not check it, nor provenance record it
        n: int = 3

    class Mutable(_Twice):
        name = "mutable"
        Config = Loose

    with pytest.raises(TaskCheckError, match="failed declaration: Config must be a TaskConfig dataclass"):
        check_task(Mutable(), tiny_lm)
