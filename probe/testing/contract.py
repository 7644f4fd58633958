"""Running the task contract's checks (:mod:`probe.testing.checks`): all at once, or one pytest test each.

- :func:`check_task` runs every check on one task and reports every failure together (as scikit-learn's
  ``check_estimator``);
- :func:`parametrize_with_checks` makes one pytest test per task x check, ids ``TASK-CHECK``, with the
  checks a task is declared to fail (``expected_failures``: check name -> reason) marked ``xfail`` (as
  scikit-learn's ``parametrize_with_checks``). The checks of one task share its quick run.

In a plugin's tests::

    from probe.testing import parametrize_with_checks

    @parametrize_with_checks([MyTask()], expected_failures={"resume": "a reason the reader can check"})
    def test_my_task_keeps_the_contract(task, check):
        check()
"""

from __future__ import annotations

import shutil
import tempfile
import unittest
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from probe.tasks.base import Task
from probe.testing.checks import CHECKS, ExpectedFailures, TaskCheckError, _Case, _check_name, _expected, _say

# Imports inside functions below are on purpose: they import optional packages (extras), loaded only when used.

__all__ = ["TaskCheck", "check_task", "parametrize_with_checks", "task_checks"]


class _Subject:
    """One task under check and its :class:`~probe.testing.checks._Case`, made on the first check that runs (a
    task given by name is looked up then, so a test fixture may register it first)."""

    def __init__(self, task: Task | str, model: Any = None, values: Mapping[str, Any] | None = None,
                 limit: int | None | str = "case", output: str | Path | None = None, options: Any = None) -> None:
        self.given, self.model, self.values, self.limit = task, model, values, limit
        self.output, self.options = output, options
        self._task: Task | None = task if isinstance(task, Task) else None
        self._case: _Case | None = None

    @property
    def label(self) -> str:
        return self.given if isinstance(self.given, str) else self.given.name

    @property
    def task(self) -> Task:
        if self._task is None:
            from probe.tasks import get

            self._task = get(str(self.given))
        return self._task

    def case(self, model: Any = None) -> _Case:
        if self._case is None:
            from probe.runs.options import RunOptions
            from probe.testing.tiny import tiny_lm

            quick = self.task.check_case()
            if self.output is not None:
                out = Path(self.output)
            else:  # removed with the subject
                out = Path(tempfile.mkdtemp(prefix="probe-check-"))
                weakref.finalize(self, shutil.rmtree, out, True)
            lm = model if model is not None else self.model if self.model is not None else tiny_lm()
            self._case = _Case(self.task, dict(quick.values if self.values is None else self.values),
                               quick.limit if self.limit == "case" else self.limit, lm, out,
                               self.options or RunOptions(progress=False, threads=1))
        return self._case


class TaskCheck:
    """One check of one task, run by calling it: ``check()`` or ``check(model)`` (the first call of a task's
    checks picks the model its quick run uses; default :func:`probe.testing.tiny_lm`)."""

    def __init__(self, subject: _Subject, check: Callable[[_Case], None]) -> None:
        self.subject, self.check, self.name = subject, check, _check_name(check)

    def __call__(self, model: Any = None) -> None:
        case = self.subject.case(model)
        try:
            self.check(case)
        except unittest.SkipTest:
            raise
        except TaskCheckError as exc:
            raise TaskCheckError(f"check_task({case.task.name!r}) failed {self.name}: {exc}") from exc.__cause__
        except Exception as exc:  # the task's own error, named with the check it broke
            raise TaskCheckError(f"check_task({case.task.name!r}) failed {self.name}: {_say(exc)}") from exc

    def __repr__(self) -> str:
        return f"{self.subject.label}-{self.name}"


def task_checks(task: Task | str, model: Any = None, *, values: Mapping[str, Any] | None = None,
                limit: int | None | str = "case", output: str | Path | None = None,
                options: Any = None) -> list[TaskCheck]:
    """Every check of ``task`` as a :class:`TaskCheck`, in :data:`~probe.testing.checks.CHECKS` order; they share
    one quick run (arguments as :func:`check_task`)."""
    subject = _Subject(task, model, values, limit, output, options)
    return [TaskCheck(subject, check) for check in CHECKS]


def check_task(task: Task | str, model: Any = None, *, values: Mapping[str, Any] | None = None,
               limit: int | None | str = "case", output: str | Path | None = None, options: Any = None,
               expected_failures: ExpectedFailures = None) -> list[str]:
    """Check ``task`` (a :class:`~probe.tasks.base.Task` or a registered name) against the task contract: every
    check runs, whatever the others give.

    ``model``: a loaded model (default: :func:`probe.testing.tiny_lm`, a tiny random Llama built offline);
    ``values`` / ``limit``: the quick run's config values and ``--limit`` (default: the task's own
    :meth:`~probe.tasks.base.Task.check_case`); ``output``: a directory for the run (default: a temporary one);
    ``options``: :class:`~probe.runs.options.RunOptions` (default: no progress bar, one thread);
    ``expected_failures``: check name -> why the task fails it (or a function of the task giving that map):
    those may fail.

    Returns the names of the checks passed; raises :class:`TaskCheckError` (an ``AssertionError``) naming every
    check that failed and why, one line each, or :class:`unittest.SkipTest` when some checks could not run
    (the task's data is not on this machine) and none failed.

    >>> from probe.testing import check_task
    >>> check_task("demo")                                         # doctest: +SKIP
    ['declaration', 'config', 'selection', 'requests', 'run', 'resume', 'hooks']
    """
    checks = task_checks(task, model, values=values, limit=limit, output=output, options=options)
    subject = checks[0].subject
    expected = _expected(subject.task, expected_failures)
    passed, failed, skipped = [], [], []
    try:
        for check in checks:
            try:
                check()
            except unittest.SkipTest as exc:
                skipped.append(str(exc))
            except TaskCheckError as exc:
                if check.name not in expected:
                    failed.append(str(exc))
            else:
                passed.append(check.name)
    finally:
        del checks, subject  # the temporary run directory goes with them
    if failed:
        raise TaskCheckError("\n".join(failed))
    if skipped:
        raise unittest.SkipTest(skipped[0])
    return passed


def parametrize_with_checks(tasks: Iterable[Task | str], *, model: Any = None,
                            expected_failures: ExpectedFailures = None) -> Any:
    """A pytest decorator: one test per task x check, parametrized as ``task`` (the task as given) and
    ``check`` (a :class:`TaskCheck`; the test calls ``check()`` or ``check(model)``), id ``TASK-CHECK``.

    ``expected_failures``: check name -> reason, for every task, or a function of the task (as given) giving
    that map; those tests are marked ``xfail`` with the reason. A task given by name is looked up when its
    first check runs.
    """
    import pytest

    params = []
    for task in tasks:
        expected = _expected(task, expected_failures)
        for check in task_checks(task, model):
            marks = [pytest.mark.xfail(reason=expected[check.name], raises=TaskCheckError)] \
                if check.name in expected else []
            params.append(pytest.param(task, check, id=repr(check), marks=marks))
    return pytest.mark.parametrize("task, check", params)

