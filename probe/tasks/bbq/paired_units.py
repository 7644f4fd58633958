"""BBQ-family paired units: a finished run's records as one answer unit per scored item (``probe report``).

A BBQ-like task converts its records to answer records (option
probabilities, condition, polarity, label, target and Unknown indices) and
names each record's ``block``, ``category`` and ``cluster``;
:func:`answer_units` reads the run's records and hands them to
:func:`probe.reports.compare.units.bbq_units`. Each task passes its own
conversion, from its ``report_layout``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from probe.errors import ProbeError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["answer_units"]


def answer_units(run: Any, answer_records: "Callable[[pd.DataFrame], list[dict]]") -> "pd.DataFrame | None":
    """The paired units of ``run`` (a :class:`~probe.reports.compare.runs.Run`): its ``records.jsonl`` as a
    frame (``meta`` flattened), ``answer_records(frame)`` (the task's conversion, each record with
    ``block``, ``category`` and ``cluster``), then :func:`~probe.reports.compare.units.bbq_units`. None when
    the run has no records; a record that is not the task's is an error naming the file."""
    import pandas as pd

    from probe.reports.compare.runs import read_records
    from probe.reports.compare.units import bbq_units

    path = run.path / "records.jsonl"
    if not path.is_file():
        return None
    try:
        frame = pd.DataFrame(read_records(path))
        if frame.empty:
            return None
        return bbq_units(answer_records(frame))
    except (KeyError, ValueError, TypeError, IndexError) as exc:  # a record that is not the task's
        raise ProbeError(f"{path}: not {run.task} records this report can read "
                         f"({exc.__class__.__name__}: {exc})") from None
