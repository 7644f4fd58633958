"""A frame as a plain GitHub pipe table (floats to 2 decimals), and its ``.md`` / ``.csv`` pair.

The tables of a single run's ``report.md`` use it (a task's own tables, written
the same way by every task that has them); ``probe report``'s tables
(:mod:`probe.reports.compare.tables`) escape their cells and carry captions.

>>> import pandas as pd
>>> print(markdown(pd.DataFrame({"a": [1.0, float("nan")], "b": ["x", "y"]})))
| a | b |
| --- | --- |
| 1.00 | x |
| nan | y |
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from probe.io import write_atomic

__all__ = ["markdown", "write_table"]


def _fmt(x: object) -> str:
    if isinstance(x, float):
        return "nan" if math.isnan(x) else f"{x:.2f}"
    return str(x)


def markdown(df: pd.DataFrame) -> str:
    """A GitHub pipe table (no extra dependency)."""
    head = "| " + " | ".join(str(c) for c in df.columns) + " |"
    sep = "| " + " | ".join("---" for _ in df.columns) + " |"
    body = ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body])


def write_table(df: pd.DataFrame, stem: str | Path, title: str = "") -> None:
    """``stem.md`` (with an optional title line) and ``stem.csv``, each written atomically."""

    stem = Path(stem)
    write_atomic(stem.with_suffix(".md"), (f"{title}\n\n" if title else "") + markdown(df) + "\n")
    write_atomic(stem.with_suffix(".csv"), df.to_csv(index=False))
