"""probe: exact, deterministic, logit-level bias evaluation of open-weight language models.

The library entry points are :func:`evaluate` (run a task on a model) and
:func:`records_to_frame` (a run's records as a DataFrame). ``import probe``
is cheap: torch, transformers and pandas load only when a function needs them.

>>> import probe
>>> probe.list_tasks()[:2]
['demo', 'bbq']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from probe.tasks import available


# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.

__version__ = "0.1.0"

__all__ = ["__version__", "evaluate", "list_tasks", "records_to_frame"]

if TYPE_CHECKING:
    from probe.api import Evaluation


def evaluate(model: Any, task: Any, *, limit: int | None = None, output: Any = None, **options: Any) -> "Evaluation":
    """Run ``task`` on ``model`` (or several tasks on several models); see :func:`probe.api.evaluate`."""
    from probe.api import evaluate as _evaluate

    return _evaluate(model, task, limit=limit, output=output, **options)


def records_to_frame(records: Any) -> Any:
    """Records (a path, a run directory, or records) as a pandas DataFrame; see :func:`probe.runs.record.records_to_frame`."""
    from probe.runs.record import records_to_frame as _records_to_frame

    return _records_to_frame(records)


def list_tasks() -> list[str]:
    """The names of every registered task (``probe.tasks`` is the registry subpackage)."""

    return list(available())
