"""What a comparison report holds (captioned tables and figures) and how they are written.

A :class:`Table` is a DataFrame with a caption that states the task, the
models, the estimator, the sample size and the CI method; it is written as
``tables/NAME.md`` and ``tables/NAME.csv``. A cell may mark emphasis as
``**text**`` (the papers' bold rules): Markdown keeps it, the CSV drops the
markers, the HTML shows it bold. A :class:`Figure` is a matplotlib figure saved
as ``figures/NAME.png`` and ``.svg``.

>>> import pandas as pd
>>> t = Table("x", "bbq", "Title", "Caption.", pd.DataFrame({"a": ["**1.00**"], "b": [0.5]}))
>>> print(markdown(t.df))
| a | b |
|---|---|
| **1.00** | 0.500 |
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import matplotlib.pyplot as plt
import pandas as pd

from probe.io import inside, safe_name, write_atomic
from probe.metrics.small_sample import enough, na_text

__all__ = ["Table", "Figure", "Section", "markdown", "write_table", "save_figure", "fmt", "fmt_ci", "ci_cell", "flatten",
           "plain"]

BOLD = re.compile(r"\*\*(.+?)\*\*")
_TAG = re.compile(r"<(?=[A-Za-z/!?])")  # a "<" that could open an HTML tag or comment
_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")  # a "&" that could start an HTML entity


@dataclass
class Table:
    """One captioned table of the report."""

    name: str  # file stem, unique in the report
    task: str
    title: str
    caption: str  # estimator, n, CI method (and the table's rules)
    df: pd.DataFrame

    def __post_init__(self) -> None:  # names come from data (task, labels, file names): one sanitiser
        self.name = safe_name(self.name)


@dataclass
class Figure:
    """One captioned figure; ``png`` and ``svg`` are the files written."""

    name: str
    task: str
    title: str
    caption: str
    png: Path
    svg: Path

    def __post_init__(self) -> None:
        self.name = safe_name(self.name)


@dataclass
class Section:
    """A task's part of the report: its tables and figures, then its paired comparisons."""

    task: str
    title: str
    intro: str
    items: list[Any] = field(default_factory=list)  # Table | Figure, in order


def fmt(x: Any, digits: int = 2) -> str:
    """A number for a table cell; NaN / None as an en dash."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, (int, float)):
        return f"{x:.{digits}f}"
    return str(x)


def fmt_ci(x: Any, ci: Sequence[Any] | None, digits: int = 2) -> str:
    """``value [lo, hi]``; ``value [CI n/a]`` when the interval was computed but is undefined (too few units)
    or has zero width while the value could vary (a single resampling unit); none when no CI was asked for."""
    s = fmt(x, digits)
    if ci is None or len(ci) != 2:
        return s
    if all(isinstance(c, (int, float)) and math.isfinite(c) for c in ci):
        if ci[0] == ci[1] and isinstance(x, (int, float)) and math.isfinite(x) and 0 < abs(x) < 1:
            return s + " [CI n/a: zero width]"
        if f"{ci[0]:.{digits}f}" == f"{ci[1]:.{digits}f}":  # zero width as shown: every resampled unit alike
            return s + " [no variation]"
        return s + f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"
    return s + " [CI n/a]" if isinstance(x, (int, float)) and math.isfinite(x) else s


def ci_cell(value: Any, low: Any, high: Any, n: Any, digits: int = 3, clusters: Any = None,
            undefined: Any = None) -> str:
    """A headline cell: ``0.123 [0.05, 0.20] (n = 48)``; an undefined or zero-width interval (too few
    resampling units: :mod:`probe.metrics.small_sample`) reads ``n/a`` with the number of units (``clusters``:
    the task's bootstrap unit, e.g. BBQ template instances or HBB concept pairs) instead of ``[nan, nan]`` or
    ``[0.92, 0.92]``. An undefined value reads its reason (``undefined``) where the row gives one.

    >>> ci_cell(0.92, 0.92, 0.92, 24, clusters=1), ci_cell(0.5, float("nan"), float("nan"), 2)
    ('0.920 [n/a (1 unit)] (n = 24)', '0.500 [n/a] (n = 2)')
    >>> ci_cell(float("nan"), float("nan"), float("nan"), 8, undefined="n/a: nothing parsed, 8 of 8 questions")
    'n/a: nothing parsed, 8 of 8 questions (n = 8)'
    """

    def finite(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    count = f"n = {int(n)}" if finite(n) else "n = ?"
    if not finite(value):
        return f"{undefined} ({count})" if isinstance(undefined, str) and undefined else f"n/a ({count})"
    s = f"{value:.{digits}f}"
    if finite(low) and finite(high) and f"{low:.{digits}f}" != f"{high:.{digits}f}":  # a width that shows
        return f"{s} [{low:.{digits}f}, {high:.{digits}f}] ({count})"
    if finite(low) and finite(high) and (enough(clusters) or clusters is None and (
            value in (0, 1, -1) or abs(value) in (0.0, 100.0))):  # every unit alike: not an interval of width 0
        return f"{s} [{no_variation(clusters)}] ({count})"
    return f"{s} [{na_text(clusters)}] ({count})"


def no_variation(clusters: Any) -> str:
    """What a zero-width resampled interval is, said in words (never shown as ``[0.000, 0.000]``).

    >>> no_variation(24), no_variation(None)
    ('no variation across 24 clusters', 'no variation')
    """
    if isinstance(clusters, (int, float)) and not isinstance(clusters, bool) and math.isfinite(clusters):
        return f"no variation across {int(clusters)} cluster{'' if int(clusters) == 1 else 's'}"
    return "no variation"


def flatten(df: pd.DataFrame) -> pd.DataFrame:
    """Two-level columns as ``"A iso"`` and a named index as the first column (what Markdown/CSV/HTML show)."""
    out = df.copy()
    if isinstance(out.columns, pd.MultiIndex):
        out.columns = [" ".join(str(x) for x in c if str(x)) for c in out.columns]
    if out.index.name is not None:
        out = out.reset_index()
    out.attrs = {}
    return out


def plain(text: Any) -> str:
    """A cell without the ``**bold**`` markers."""
    return BOLD.sub(r"\1", str(text))


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return "–" if not math.isfinite(v) else f"{v:.3f}"
    return md_text(str(v)).replace("|", "\\|").replace("\n", " ")


def md_text(text: Any) -> str:
    """Text from data for Markdown, escaped the Markdown way (a backslash), so no raw HTML or entity reaches a
    report and the text still reads as itself in a terminal: a ``<`` that could open a tag and a ``&`` that
    could start an entity get a backslash; ``S >= 20``, ``p < 0.05`` and ``A & B`` stay as they are.

    >>> print(md_text("<img src=x onerror=alert(1)> & co, p < 0.05, S >= 20, &amp;"))
    \\<img src=x onerror=alert(1)> & co, p < 0.05, S >= 20, \\&amp;
    """
    return _TAG.sub(r"\\<", _ENTITY.sub(r"\\&", str(text)))


def markdown(df: pd.DataFrame) -> str:
    """A GitHub pipe table."""
    cols = [_cell(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def write_table(table: Table, out: Path) -> list[Path]:
    """``out/tables/NAME.md`` (title, table, caption) and ``.csv`` (no bold markers)."""
    name = safe_name(table.name)
    md, csv = inside(out, out / "tables" / f"{name}.md"), inside(out, out / "tables" / f"{name}.csv")
    write_atomic(md, f"**{md_text(table.title)}**\n\n{markdown(table.df)}\n\n{md_text(table.caption)}\n")
    write_atomic(csv, table.df.map(lambda v: plain(v) if isinstance(v, str) else v).to_csv(index=False))
    return [md, csv]


def save_figure(fig: Any, out: Path, name: str, task: str, title: str, caption: str) -> Figure:
    """Save a matplotlib figure as ``out/figures/NAME.png`` and ``.svg``, close it, describe it."""

    d = out / "figures"
    d.mkdir(parents=True, exist_ok=True)
    name = safe_name(name)
    png, svg = inside(out, d / f"{name}.png"), inside(out, d / f"{name}.svg")
    for path, kw in ((png, {"dpi": 110}), (svg, {})):
        tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")  # the suffix picks the format
        fig.savefig(tmp, **kw, metadata={"Date": None} if path.suffix == ".svg" else None)
        tmp.replace(path)
    plt.close(fig)
    return Figure(name, task, title, caption, png, svg)
