"""Check what a reader sees in a folder of runs and reports (and, optionally, saved terminal output).

    python tools/check_reports.py runs/first [--terminal walk.log ...]

Checks every ``.md`` file under the folder, every ``results.csv`` and each ``--terminal`` file:

- no HTML entity (``&gt;``, ``&lt;``, ``&amp;``, ...) in Markdown or terminal text;
- no internal key in what a reader reads (headings, table rows, warnings, terminal lines): summary paths
  such as ``label_mass.by_category.race`` or ``results[33]``, raw variant labels such as ``(a)=s1)`` or
  ``hbb_swapavg``, and the snake_case keys a task names in words (:attr:`probe.tasks.facets.Reporting.terms`);
  text in backticks (commands such as ``--set hbb_sg=false``) and file names are left alone;
- no resampled interval from fewer than 10 units (:data:`probe.metrics.small_sample.MIN_UNITS`): an
  interval beside ``(n = k)`` with k < 10, in a table row whose ``clusters`` (else ``n``) column is under 10,
  or on a results.csv row with fewer than 10 clusters, must be Wilson's exact interval for that share (allowed
  at any n); a zero-width one (``0.000 [0.000, 0.000]``, what a bootstrap over one unit gives) counts too. A
  certified interval (a bound, not a resample) and the range it comes with are exact: a line or row naming
  one (``certified [``) is left alone; so is the hybrid estimator's interval (a line, row or column naming
  ``hybrid``), which resamples no units: it is each prompt's own tail draws and the paper's K-sample noise
  on the prompts scored, valid at any number of them;
- no zero-width interval shown as a measurement, at any n (``+0.00 [+0.00, +0.00]``, ``0.000 [0.000, 0.000]``
  over 24 clusters: every resampled unit alike, which a report says in words, "no variation across 24
  clusters"), in Markdown and terminal text and on results.csv rows (certified bounds and their ranges exempt);
- one word per meaning: no table row whose count column names a unit word (``n units`` = 4) while a cell of
  the same row counts something else with that word (``n/a (1 unit)``);
- one report per folder: no folder holds both ``report.md`` and ``report/report.md``.

Prints one line per problem (``file:line: check: text``) and exits 1 if there is any, else prints what it
checked and exits 0.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import sys
from pathlib import Path
from typing import Iterable, Iterator

ENTITY = re.compile(r"&(?:gt|lt|amp|quot|apos|nbsp|#\d+|#x[0-9a-fA-F]+);")
#: summary paths and raw labels that are never words for a reader
RAW = [re.compile(p) for p in (
    r"\b(?:label_mass|by_category|by_bias_type|by_dimension|by_format|by_strategy|by_protocol)\.\w",
    r"\bresults\[\d+\]", r"\(a\)=s1\)", r"\ba\)=s[12]\b", r"\bswap-avg\b",
    r"\bhbb_(?:swapavg|sg_)\w*", r"\b\w+\|(?:oneword|labels)\b")]
INTERVAL = re.compile(r"(-?\d+(?:\.\d+)?) \[(-?\d+(?:\.\d+)?), (-?\d+(?:\.\d+)?)\] \(n = (\d+)\)")
BACKTICKS = re.compile(r"`[^`]*`")
FILENAME = re.compile(r"\b[\w.+-]+\.(?:md|csv|json|jsonl|html|png|svg|yaml|txt|lock)\b")
MIN_UNITS = 10
Z = 1.959963984540054


def task_keys() -> set[str]:
    """The snake_case keys every installed task names in words (``task.reporting.terms``); none when probe is absent."""
    try:
        from probe.tasks import available, data_sets, get
    except ImportError:
        return set()
    keys: set[str] = set()
    for name in available():
        keys |= {k for k in get(name).reporting.terms if "_" in k}
    # a task's or data set's name is what a user types (`probe run crows_pairs`, `probe data fetch hbb_sg`)
    return keys - set(available()) - set(data_sets())


def wilson(k: float, n: int) -> tuple[float, float]:
    """Wilson's 95% interval for k successes of n."""
    p = k / n
    den = 1 + Z * Z / n
    mid = (p + Z * Z / (2 * n)) / den
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def is_wilson(value: float, low: float, high: float, n: int, tol: float = 0.0015) -> bool:
    """Whether ``[low, high]`` is Wilson's interval for the share ``value`` of ``n`` (as a share or percent)."""
    if n <= 0:
        return False
    for scale in (1.0, 100.0):
        p = value / scale
        if not 0 <= p <= 1:
            continue
        k = round(p * n)
        if abs(k - p * n) > 0.01 * n + tol * n:
            continue
        lo, hi = wilson(k, n)
        if abs(lo * scale - low) <= tol * scale and abs(hi * scale - high) <= tol * scale:
            return True
    return False


def reader_lines(path: Path, terminal: bool) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of what a reader reads as labels: every terminal line; in Markdown, headings,
    table rows and warnings (captions and prose may name files and options)."""
    for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if terminal or line.startswith(("#", "|", "> ")) or "Warning" in line:
            yield i, line


def scrub(line: str) -> str:
    """The line without code spans and file names (commands and paths are not labels)."""
    return FILENAME.sub(" ", BACKTICKS.sub(" ", line))


def check_text(path: Path, keys: set[str], terminal: bool = False) -> Iterator[str]:
    """Problems in one Markdown or terminal file."""
    text = path.read_text(errors="replace")
    for i, line in enumerate(text.splitlines(), 1):
        if ENTITY.search(line):
            yield f"{path}:{i}: HTML entity: {line.strip()[:160]}"
        found = set()
        for m in INTERVAL.finditer(line):
            value, low, high, n = float(m[1]), float(m[2]), float(m[3]), int(m[4])
            if n < MIN_UNITS and not certified(line) and not is_wilson(value, low, high, n):
                found.add(m.start())
                yield f"{path}:{i}: interval from fewer than {MIN_UNITS} units: {m[0]}"
        yield from _zero_width(path, i, line, found)
    key_re = re.compile(r"(?<![\w-])(?:" + "|".join(sorted(map(re.escape, keys))) + r")(?![\w-])") if keys else None
    for i, line in reader_lines(path, terminal):
        plain = scrub(line)
        for pat in RAW + ([key_re] if key_re else []):
            m = pat.search(plain)
            if m:
                yield f"{path}:{i}: internal key {m[0]!r}: {line.strip()[:160]}"
                break
    yield from _clustered_tables(path, text)


ANY_INTERVAL = re.compile(r"([-+]?\d+(?:\.\d+)?) \[([-+]?\d+(?:\.\d+)?), ([-+]?\d+(?:\.\d+)?)\]")


def _zero_width(path: Path, i: int, line: str, found: set[int] = frozenset()) -> Iterator[str]:
    """A ``value [low, high]`` with ``low == high`` (at any n), unless the line names a certified bound or the
    interval was found already (from fewer than 10 units: ``found`` holds where those start)."""
    if certified(line):
        return
    for m in ANY_INTERVAL.finditer(line):
        if float(m[2]) == float(m[3]) and m.start() not in found:
            yield f"{path}:{i}: zero-width interval shown as a measurement (say 'no variation'): {m[0]}"


#: a cell that counts something: ``n/a (1 unit)``, ``(24 clusters)``
COUNTED = re.compile(r"\((?:n/a \()?(\d+) ([a-z]+?)s?\)")


def _two_meanings(path: Path, i: int, line: str, header: list[str], cells: list[str]) -> Iterator[str]:
    """A row whose count column (``n units``) and one of its cells (``n/a (1 unit)``) use one word for two
    different counts."""
    counts = {}
    for col, cell in zip(header, cells):
        m = re.fullmatch(r"(?:n )?([a-z]+?)s?", col.strip().lower())
        if m and re.fullmatch(r"\d+", cell.strip()):
            counts[m[1]] = int(cell)
    for col, cell in zip(header, cells):
        for m in COUNTED.finditer(cell):
            if m[2] in counts and counts[m[2]] != int(m[1]):
                yield (f"{path}:{i}: the word {m[2]!r} with two meanings: column {col!r} says "
                       f"{m[0].strip('()')} beside {counts[m[2]]} in the {m[2]} count column: {line.strip()[:160]}")


def certified(text: str) -> bool:
    """Whether ``text`` (a line, an estimator, a column) names an interval that resamples no units, so allowed
    at any n: a certified interval (a bound), or the hybrid estimator's (each prompt's own tail draws)."""
    return "certified [" in text or "hybrid" in text


CELL = re.compile(r"(-?\d+(?:\.\d+)?) \[(-?\d+(?:\.\d+)?), (-?\d+(?:\.\d+)?)\]")


def _clustered_tables(path: Path, text: str) -> Iterator[str]:
    """Markdown tables with a ``clusters`` column: no interval in a row with fewer than 10 clusters; with an
    ``n`` column instead: no cell ``value [low, high]`` in a row of n < 10 unless it is Wilson's interval (a
    column named ``certified`` holds bounds, which are exact)."""
    header: list[str] | None = None
    for i, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        yield from _two_meanings(path, i, line, header, cells)
        if "clusters" in header:
            k = _count(cells, header.index("clusters"))
            if k is not None and k < MIN_UNITS and any(re.search(r"\[-?\d[\d.]*, -?\d[\d.]*\]", c) for c in cells):
                yield f"{path}:{i}: interval from {k} clusters (fewer than {MIN_UNITS}): {line.strip()[:160]}"
        elif "n" in header:
            n = _count(cells, header.index("n"))
            if n is None or n >= MIN_UNITS or certified(line):
                continue
            for col, cell in zip(header, cells):
                m = CELL.fullmatch(cell)
                if m and "certified" not in col and "hybrid" not in col and not is_wilson(float(m[1]), float(m[2]), float(m[3]), n):
                    yield (f"{path}:{i}: interval from n = {n} (fewer than {MIN_UNITS}), column {col!r}: "
                           f"{line.strip()[:160]}")


def _count(cells: list[str], k: int) -> int | None:
    try:
        return int(float(cells[k]))
    except (ValueError, IndexError):
        return None


def check_results_csv(path: Path) -> Iterator[str]:
    """results.csv rows: a finite interval from fewer than 10 clusters must be Wilson's."""
    with path.open(newline="") as f:
        for i, row in enumerate(csv.DictReader(f), 2):
            try:
                low, high, value = float(row["ci_low"]), float(row["ci_high"]), float(row["value"])
                n = float(row["n"])
                k = float(row.get("n_clusters") or "nan")
            except (KeyError, ValueError):
                continue
            units = k if math.isfinite(k) else n
            if math.isfinite(low) and low == high and not certified(row.get("estimator") or ""):
                yield (f"{path}:{i}: zero-width interval as a measurement: {row['task']} {row['metric']} "
                       f"{row['subgroup']} [{low:.3f}, {high:.3f}] over {int(units)} units")
                continue
            if not (math.isfinite(low) and math.isfinite(high)) or not units < MIN_UNITS \
                    or certified(row.get("estimator") or ""):
                continue
            if not is_wilson(value, low, high, int(n), tol=1e-6):
                yield (f"{path}:{i}: interval from {int(units)} units (fewer than {MIN_UNITS}): "
                       f"{row['task']} {row['metric']} {row['subgroup']} [{low:.3f}, {high:.3f}]")


def check_folders(root: Path) -> Iterator[str]:
    """One report per folder."""
    for md in root.rglob("report.md"):
        if (md.parent / "report" / "report.md").is_file():
            yield f"{md.parent}: two reports: report.md and report/report.md"


def check(root: Path, terminal: Iterable[Path] = ()) -> tuple[list[str], int]:
    """Every problem under ``root`` and in the ``terminal`` files, and how many files were read."""
    keys = task_keys()
    problems: list[str] = []
    files = sorted(root.rglob("*.md")) if root.is_dir() else [root]
    for md in files:
        problems += check_text(md, keys)
    csvs = sorted(root.rglob("results.csv")) if root.is_dir() else []
    for c in csvs:
        problems += check_results_csv(c)
    for t in terminal:
        problems += check_text(t, keys, terminal=True)
    if root.is_dir():
        problems += check_folders(root)
    return problems, len(files) + len(csvs) + len(list(terminal))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Check the reports under a folder as a reader sees them.")
    ap.add_argument("folder", type=Path, help="a run folder, a report folder, or a folder of several")
    ap.add_argument("--terminal", type=Path, nargs="*", default=[], help="saved terminal output to check too")
    args = ap.parse_args(argv)
    if not args.folder.exists():
        print(f"check_reports: {args.folder}: no such file or folder", file=sys.stderr)
        return 2
    problems, n = check(args.folder, args.terminal)
    for p in problems:
        print(p)
    print(f"check_reports: {n} file(s) checked, {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
