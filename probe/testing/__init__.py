"""Testing a task: the public contract test and the tiny model it runs on.

:func:`check_task` checks a task (built-in, or a plugin's) against the task contract, as scikit-learn's
``check_estimator`` checks an estimator: its declaration, configs, selection, requests, a run through the
Runner, a resume and its hooks (:mod:`probe.testing.checks`), every check whatever the others give;
:func:`parametrize_with_checks` makes each task x check its own pytest test, with declared expected
failures marked ``xfail`` (:mod:`probe.testing.contract`). :func:`tiny_lm` is the tiny random Llama it runs
on by default (:mod:`probe.testing.tiny`: built offline in about a second).

In a plugin's own tests::

    from probe.testing import parametrize_with_checks

    @parametrize_with_checks([MyTask()])
    def test_my_task_keeps_the_contract(task, check):
        check()
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHECKS", "TaskCheck", "TaskCheckError", "check_task", "parametrize_with_checks", "task_checks", "tiny_lm"]


def __getattr__(name: str) -> Any:  # torch and pandas load on first use
    if name in ("CHECKS", "TaskCheckError"):
        from probe.testing import checks

        return getattr(checks, name)
    if name in ("TaskCheck", "check_task", "parametrize_with_checks", "task_checks"):
        from probe.testing import contract

        return getattr(contract, name)
    if name == "tiny_lm":
        from probe.testing.tiny import tiny_lm

        return tiny_lm
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
