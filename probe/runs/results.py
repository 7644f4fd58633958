"""A run's numbers as one flat table, its headline, its warnings, and its own report.

- :func:`results_frame`: every metric of a summary as rows ``task, model, subgroup, metric, estimator,
  value, ci_low, ci_high, n, n_clusters, certified_low, certified_high, undefined`` (each task's
  ``reporting.results``), written as
  ``results.csv`` and returned as ``Evaluation.results``;
- :func:`headline_table`: the main metric per model x task with its CI and n (the first section of
  every report);
- :func:`report_warnings`: what a reader must see before the numbers (low answer mass, tiny samples,
  the task's own warnings, a limited run's coverage);
- :func:`write_run_report`: ``report.html`` (the renderer of ``probe report``) and the headline and
  warnings at the top of ``report.md``, for every task run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence


import pandas as pd

from probe.io import check_output, check_owned_dir, json_has, write_atomic
from probe.reports.compare import build_report, load_runs
from probe.reports.compare.tables import markdown, md_text
from probe.reports.headline import LOW_MASS, SMALL_N, headline_table, report_warnings  # noqa: F401
from probe.reports.terminal import terminal_text
from probe.tasks import available, get

if TYPE_CHECKING:
    import pandas as pd

#: ``ci_low`` / ``ci_high`` hold statistical intervals only; a parsed metric's certified interval (the range over
#: every answer of the mass not enumerated) has its own columns, and ``undefined`` says why a value is missing
#: ("n/a: nothing parsed, 8 of 8 questions")
COLUMNS = ["task", "model", "subgroup", "metric", "estimator", "value", "ci_low", "ci_high", "n", "n_clusters",
           "certified_low", "certified_high", "undefined"]

def result_rows(task: Any, config: Any, summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The task's flat rows (with ``headline``) plus ``task``, ``model`` and, for a metric the task notes
    (``reporting.metric_notes``), ``note``; none when the task gives none."""
    try:
        rows = task.reporting.results(config, summary)
    except Exception:  # a task's summary it cannot read (an older run) must not stop the report
        rows = []
    model = str(summary.get("model", ""))
    notes = task.reporting.metric_notes or {}
    terms = dict(task.reporting.terms or {})
    return [{"task": task.name, "model": model, **r, "terms": terms,
             **({"note": notes[m]} if (m := _noted(str(r.get("metric", "")).rsplit(".", 1)[-1], notes)) else {})}
            for r in rows]


def _noted(metric: str, notes: Mapping[str, str]) -> str:
    """The key of ``notes`` that notes ``metric``: itself, else its family (``pg`` for ``pg_iso``); '' if none."""
    return metric if metric in notes else metric.split("_", 1)[0] if metric.split("_", 1)[0] in notes else ""


def results_frame(rows: Iterable[Mapping[str, Any]]) -> "pd.DataFrame":
    """The flat results table: one row per task, model, subgroup, metric and estimator."""

    return pd.DataFrame([{k: r.get(k) for k in COLUMNS} for r in rows], columns=COLUMNS)


def _md_block(headline: "pd.DataFrame", warnings: Sequence[str]) -> str:
    lines = [f"> **Warning:** {md_text(w)}" + "\n" for w in warnings]
    if len(headline):
        lines += ["## Headline", "", markdown(headline), "",
                  "*The main metric over all items scored, with its 95% CI and n; every metric, subgroup and "
                  "estimator is in results.csv; the full report is report.html.*", ""]
    return "\n".join(lines)


def write_run_report(task: Any, config: Any, output: str | Path, summary: Mapping[str, Any]) -> "pd.DataFrame":
    """``results.csv``, ``report.html`` unless the task wrote its own (``report/`` holds its tables and
    figures) and the headline and warnings at the top of ``report.md`` (written from the report when the task
    wrote none): one report per run folder. Returns the results frame."""

    out = Path(output)
    rows, warnings = run_headline(task, config, summary)
    frame = results_frame(rows)
    write_atomic(out / "results.csv", frame.to_csv(index=False))
    headline = headline_table(rows)
    target = out / "report"
    try:
        build_report(load_runs([out]), target, n_boot=200, headline=headline, warnings=warnings,
                     title=f"probe report: {task.name}, {summary.get('model', '')}",
                     layouts={task.name: task.reporting.layout()})
    except Exception as exc:  # the records and summary are written; a report failure must not fail the run
        import sys

        print(f"{task.name}: report.html not written ({exc.__class__.__name__}: {exc}); the records and summary "
              f"are complete, and `probe report {out} --output DIR` retries", file=sys.stderr)
        if (out / "report.md").is_file():
            md = out / "report.md"
            text = md.read_text(encoding="utf-8")
            head, _, rest = text.partition("\n")
            write_atomic(md, f"{head}\n\n{_md_block(headline, warnings)}\n{rest.lstrip()}")
        return frame
    _one_report(out, target, _md_block(headline, warnings), f"# {task.name}: {summary.get('model', '')}")
    return frame


def _one_report(out: Path, target: Path, block: str, heading: str) -> None:
    """One ``report.md`` and one ``report.html`` in the run folder (``report/`` keeps the tables and figures):
    the task's own page is kept (the demo's), else the built one moves up; a task's own Markdown gets the
    headline and warnings on top, else the built Markdown moves up with its figure links rewritten."""

    html = check_output(out / "report.html")
    own_html = html.is_file() and "<title>probe report: " not in html.read_text(encoding="utf-8", errors="replace")
    if own_html:
        (target / "report.html").unlink(missing_ok=True)
    else:
        os.replace(target / "report.html", html)
    md = out / "report.md"
    built = (target / "report.md").read_text(encoding="utf-8")
    (target / "report.md").unlink()
    if md.is_file() and not md.read_text(encoding="utf-8").startswith("# probe report: "):
        text = md.read_text(encoding="utf-8")
        head, sep, rest = text.partition("\n")
        if not head.startswith("# "):
            head, sep, rest = heading, "\n", text
        write_atomic(md, f"{head}\n\n{block}\n{rest.lstrip()}" if sep else f"{head}\n\n{block}")
    else:  # the report's own Markdown: warnings in its introduction, the headline its first section
        write_atomic(md, built.replace("](figures/", "](report/figures/"))


def _task_warnings(task: Any, summary: Mapping[str, Any]) -> list[str]:
    """The task's own report warnings (none when its summary is one it cannot read, e.g. an older run's)."""
    try:
        return list(task.reporting.warnings(summary))
    except Exception:
        return []


def task_layouts(names: Iterable[str]) -> dict[str, Any]:
    """Each named task's report section (its ``reporting.layout()``); a task not installed here is left out
    (its runs get their own tables)."""

    known = available()
    return {n: get(n).reporting.layout() for n in dict.fromkeys(names) if n in known}


def run_headline(task: Any, config: Any, summary: Mapping[str, Any],
                 label: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """One run's flat result rows (``label``: the model's name in them) and the warnings its report opens with."""
    rows = result_rows(task, config, summary)
    for row in rows:
        row["model"] = label or row["model"]
    return rows, report_warnings(summary, rows, _task_warnings(task, summary), task.reporting.terms)


def print_run(evaluation: Any, verbose: bool) -> None:
    """One run on the terminal: its whole ``report.md`` (``--verbose``), else the headline, the warnings and
    the report's paths."""

    md = evaluation.output / "report.md"
    if verbose and md.is_file():
        print(md.read_text(encoding="utf-8"))
        return
    rows, warnings = run_headline(get(evaluation.task), evaluation.config, evaluation.summary)
    reports = [str(evaluation.output / n) for n in ("report.html", "report.md") if (evaluation.output / n).is_file()]
    print(terminal_text(headline_table(rows), warnings, reports) + "\n")


def grouped_warnings(named: Sequence[tuple[str, str]]) -> list[str]:
    """``(run, warning)`` pairs of many runs as each warning once, the runs it holds for named in front.

    >>> grouped_warnings([("bbq, a", "low mass."), ("bbq, b", "low mass."), ("hbb, a", "small.")])
    ['bbq, a; bbq, b: low mass.', 'hbb, a: small.']
    """
    runs: dict[str, list[str]] = {}
    for run, warning in named:
        runs.setdefault(warning, []).append(run)
    return [f"{'; '.join(dict.fromkeys(names))}: {w}" for w, names in runs.items()]


def headline_of(runs: Sequence[Any]) -> tuple["pd.DataFrame", list[str], "pd.DataFrame"]:
    """The headline table, the warnings (each once, with the runs it holds for) and the flat results of many
    runs."""

    rows: list[dict] = []
    named: list[tuple[str, str]] = []
    for r in runs:
        if r.task not in available():
            continue
        mine, warnings = run_headline(get(r.task), None, r.summary, r.label)
        rows += mine
        named += [(f"{r.task}, {r.label}", w) for w in warnings]
    return headline_table(rows), grouped_warnings(named), results_frame(rows)


#: what a report writes at the top of its directory
REPORT_FILES = ("report.html", "report.md", "results.csv", "manifest.json", "tables", "figures")


def check_report_dir(output: str | Path) -> None:
    """``output`` may take a report (:func:`probe.io.check_owned_dir`): absent, empty, or a folder whose report
    files a probe report (its ``manifest.json``) or a probe run wrote; a link there, or a user's own
    ``report.md``, is refused before anything is read or written."""

    def ours(out: Path) -> bool:  # a report's manifest, or a run's records and their input check
        return (json_has(out / "manifest.json", "title", "runs", "tables", "figures")
                or (out / "records.jsonl.input.json").is_file())

    check_owned_dir(output, REPORT_FILES, ours, "a probe report or run directory")


def combined_report(run_dirs: Sequence[str | Path], output: str | Path, n_boot: int = 2000, seed: int = 0,
                    params_b: Mapping[str, float] | None = None, title: str | None = None,
                    progress: Any = None) -> dict[str, Any]:
    """Many finished runs (any tasks, any models) as one report in ``output``: ``report.html``,
    ``report.md`` (headline and warnings first), ``results.csv``, tables and figures (``probe report``)."""

    check_report_dir(output)
    runs = load_runs(run_dirs)
    layouts = task_layouts(r.task for r in runs)
    for r in runs:  # paired units read up front: a record the task cannot read fails before any output
        units = getattr(layouts.get(r.task), "units", None)
        if units is not None and (r.path / "records.jsonl").is_file():
            r.units = units(r)
    headline, warnings, results = headline_of(runs)
    manifest = build_report(runs, output, n_boot=n_boot, seed=seed, params_b=params_b, title=title,
                            progress=progress, headline=headline, warnings=warnings, layouts=layouts)
    write_atomic(Path(output) / "results.csv", results.to_csv(index=False))
    return manifest
