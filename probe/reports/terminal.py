"""What ``probe run`` prints: the headline, the warnings and where the files are, as plain text.

The whole report is in ``report.md`` / ``report.html`` (``probe run --verbose`` prints the Markdown); the
terminal gets what a reader must see first, with no Markdown or HTML escapes in it.

>>> import pandas as pd
>>> df = pd.DataFrame({"Task": ["bbq"], "Value [95% CI] (n)": ["**0.10** [n/a (3 units)] (n = 8)"]})
>>> print(terminal_text(df, ["small sample: p < 0.05 means little here."], ["runs/x/report.html"]))
## Headline
Task  Value [95% CI] (n)
bbq   0.10 [n/a (3 units)] (n = 8)
<BLANKLINE>
## Warnings
- small sample: p < 0.05 means little here.
<BLANKLINE>
Full report: runs/x/report.html
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from probe.reports.compare.tables import plain

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["terminal_text"]


def terminal_text(headline: "pd.DataFrame", warnings: Sequence[str], reports: Sequence[str] = ()) -> str:
    """The headline table (bold markers dropped), each warning once as a list item, and the report files."""

    lines = []
    if len(headline):
        rows = [[str(c) for c in headline.columns]]
        rows += [[plain(v) for v in row] for row in headline.itertuples(index=False)]
        widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
        lines += ["## Headline", *("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows), ""]
    if warnings:
        lines += ["## Warnings", *(f"- {w}" for w in dict.fromkeys(warnings)), ""]
    if reports:
        lines.append(f"Full report: {', '.join(reports)}")
    return "\n".join(lines).rstrip("\n")
