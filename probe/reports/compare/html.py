"""One self-contained ``report.html``: inline CSS, figures as ``data:`` URIs, no script, no network.

The page: a title, what went in (runs, models, provenance), a table of
contents, then one section per task with its tables and figures, each
captioned (task, models, estimator, n, CI method), then the paired
comparisons. Print CSS keeps tables and figures whole on a page and drops the
screen colours.

>>> import pandas as pd
>>> from probe.reports.compare.tables import Section, Table
>>> page = render("T", "intro", [Section("bbq", "BBQ", "", [Table("t1", "bbq", "A table", "Cap.",
...                                       pd.DataFrame({"x": ["**1**"]}))])])
>>> "<strong>1</strong>" in page and 'href="#t1"' in page and "<script" not in page
True
"""

from __future__ import annotations

import base64
import html
import math
from typing import Any, Sequence

from probe.io import safe_name
from probe.reports.compare.tables import BOLD, Figure, Section, Table

__all__ = ["render", "CSS"]

CSS = """
:root { --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; --head: #f3f5f7; --accent: #0b5cad; }
* { box-sizing: border-box; }
body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: var(--fg);
       margin: 0 auto; max-width: 1200px; padding: 24px 28px 60px; }
h1 { font-size: 26px; margin: 0 0 6px; }
h2 { font-size: 20px; margin: 36px 0 8px; padding-bottom: 4px; border-bottom: 2px solid var(--line); }
h3 { font-size: 15px; margin: 22px 0 6px; }
p.lead, .meta { color: var(--muted); }
p.warning { background: #fff4e5; border-left: 4px solid #e69500; padding: 0.5em 0.8em; margin: 0.5em 0; }
nav.toc { background: var(--head); border: 1px solid var(--line); border-radius: 6px; padding: 10px 18px;
          margin: 16px 0 8px; }
nav.toc ol { margin: 4px 0; padding-left: 22px; }
nav.toc li { margin: 1px 0; }
nav.toc ol ol { columns: 2; column-gap: 32px; font-size: 13px; }
nav.toc ol ol li { break-inside: avoid; margin: 0 0 2px; }
a { color: var(--accent); text-decoration: none; }
figure { margin: 10px 0 22px; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 12.5px; margin: 4px 0; }
th, td { border: 1px solid var(--line); padding: 3px 7px; text-align: left; vertical-align: top; white-space: nowrap; }
th { background: var(--head); font-weight: 600; }
tbody tr:nth-child(even) td { background: #fafbfc; }
figcaption { color: var(--muted); font-size: 12.5px; margin-top: 4px; max-width: 1100px; }
figcaption b { color: var(--fg); }
img { max-width: 100%; height: auto; border: 1px solid var(--line); }
table.runs td { white-space: normal; }
@media print {
  body { max-width: none; padding: 0; font-size: 10.5px; }
  nav.toc { background: none; }
  a { color: inherit; }
  h2 { break-before: auto; break-after: avoid; }
  figure, table { break-inside: avoid; page-break-inside: avoid; }
  .scroll { overflow: visible; }
  th { background: #eee !important; -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  th, td { white-space: normal; }
  img { max-width: 100%; border: none; }
}
"""


def _attr(name: Any) -> str:
    """An ``id`` / ``href`` fragment from data: the one sanitiser, then escaped (quotes included)."""
    return html.escape(safe_name(name), quote=True)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        text = "–" if not math.isfinite(v) else f"{v:.3f}"
    else:
        text = str(v)
    return BOLD.sub(r"<strong>\1</strong>", html.escape(text))


def _table(t: Table) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in t.df.columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>"
                   for row in t.df.itertuples(index=False))
    return (f'<figure id="{_attr(t.name)}" class="table"><h3>{html.escape(t.title)}</h3><div class="scroll"><table>'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
            f"<figcaption><b>Table {html.escape(t.name)}.</b> {html.escape(t.caption)}</figcaption></figure>")


def _figure(f: Figure) -> str:
    data = base64.b64encode(f.png.read_bytes()).decode("ascii")
    return (f'<figure id="{_attr(f.name)}" class="figure"><h3>{html.escape(f.title)}</h3>'
            f'<img alt="{html.escape(f.title)}" src="data:image/png;base64,{data}">'
            f"<figcaption><b>Figure {html.escape(f.name)}.</b> {html.escape(f.caption)} "
            f"(files: figures/{html.escape(f.png.name)}, figures/{html.escape(f.svg.name)})</figcaption></figure>")


def render(title: str, intro: str, sections: Sequence[Section], runs_table: Table | None = None,
           warnings: Sequence[str] = ()) -> str:
    """The whole page as one string; ``warnings``: one highlighted box each, above the intro."""
    toc = []
    body = []
    if runs_table is not None:
        toc.append(f'<li><a href="#{_attr(runs_table.name)}">{html.escape(runs_table.title)}</a></li>')
        runs_html = _table(runs_table).replace("<table>", '<table class="runs">', 1)
        body.append(f'<section><h2 id="sec-runs">Runs</h2>{runs_html}</section>')
    for i, s in enumerate(sections, 1):
        anchor = f"sec-{i}"
        sub = "".join(f'<li><a href="#{_attr(it.name)}">{html.escape(it.title)}</a></li>' for it in s.items)
        toc.append(f'<li><a href="#{anchor}">{html.escape(s.title)}</a><ol>{sub}</ol></li>')
        parts = [_table(it) if isinstance(it, Table) else _figure(it) for it in s.items]
        lead = f'<p class="lead">{html.escape(s.intro)}</p>' if s.intro else ""
        body.append(f'<section><h2 id="{anchor}">{html.escape(s.title)}</h2>{lead}{"".join(parts)}</section>')
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<link rel=\"icon\" href=\"data:,\">"
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>{html.escape(title)}</h1>"
        + "".join(f'<p class="warning"><strong>Warning:</strong> {html.escape(w)}</p>' for w in warnings)
        + f"<p class=\"lead\">{html.escape(intro)}</p></header>"
        f"<nav class=\"toc\"><b>Contents</b><ol>{''.join(toc)}</ol></nav>"
        f"<main>{''.join(body)}</main></body></html>\n"
    )
