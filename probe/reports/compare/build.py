"""Assemble a comparison report from finished runs: layouts per task, paired comparisons, Markdown, CSV, HTML.

:func:`build_report` takes labelled :class:`~probe.reports.compare.runs.Run`
objects (``load_runs``), writes under ``output``:

- ``tables/NAME.md`` and ``.csv`` for every table, ``figures/NAME.png`` and
  ``.svg`` for every figure;
- ``report.md`` (every table with its caption, figures linked) and
  ``report.html`` (self-contained; :mod:`.html`);
- ``manifest.json`` (the runs, and each table's and figure's name, task,
  title and files), which tests and scripts read.

What each task's section holds (title, place, tables and figures, paper
tables, paired units) is the task's own :class:`~.layout.TaskLayout`, passed
in ``layouts`` (:func:`probe.runs.results.combined_report` passes every run's
task's ``reporting.layout()``); this module names no benchmark.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from probe.io import write_atomic, write_json_atomic
from probe.reports.compare import paper_layouts
from probe.reports.compare.html import render
from probe.reports.compare.layout import ReportContext, TaskLayout, generic_layout
from probe.reports.compare.paired import MIN_CLUSTERS, compare, n_column
from probe.reports.compare.runs import Run, by_task
from probe.reports.compare.tables import Figure, Section, Table, markdown, md_text, write_table

__all__ = ["build_report", "paired_tables"]


def _table_id(text: str) -> str:
    """A part of a paired table's id: lower case, letters and digits only (ids already published; a label
    for a file name is :func:`probe.io.slug`)."""
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()


def _units(run: Run, layout: TaskLayout) -> pd.DataFrame | None:
    if run.units is not None:
        return run.units
    return layout.units(run) if layout.units is not None else None


def paired_tables(task: str, runs: Sequence[Run], n_boot: int, seed: int,
                  layout: TaskLayout | None = None) -> tuple[list[Table], str]:
    """Every A-vs-B table of ``task`` (each pair of runs, each block; what is compared: ``layout.paired_spec``)
    and a note on what was left out."""
    layout = layout or generic_layout(task)
    spec = layout.paired_spec(runs) if layout.paired_spec is not None and len(runs) >= 2 else None
    if spec is None or len(runs) < 2:
        return [], "" if len(runs) < 2 else f"No paired comparison is defined for task {task}."
    units = {r.label: _units(r, layout) for r in runs}
    missing = [lab for lab, u in units.items() if u is None or len(u) == 0]
    if missing:
        return [], f"Paired comparisons left out: no per-unit data for {', '.join(missing)}."
    out, disjoint = [], []
    for a, b in itertools.combinations(runs, 2):
        for block, df in compare(units[a.label], units[b.label], spec, n_boot, seed).items():
            n_all = df.loc[df["Category"] == "all", n_column(spec)]
            n = int(n_all.iloc[0]) if len(n_all) else 0
            if n == 0:  # e.g. two samples drawn with different seeds: nothing to pair
                disjoint.append(f"{a.label} vs {b.label} ({block})")
                continue
            out.append(Table(
                f"paired_{task}_{_table_id(a.label)}_vs_{_table_id(b.label)}_{_table_id(block)}", task,
                f"{a.label} vs {b.label}: {block}", (
                    f"Task {task}, A = {a.label}, B = {b.label}; n = {n} {spec.unit} scored by both "
                    f"({df.attrs.get('dropped', 0)} left out: in one run only or non-finite). Estimator: Δ = A − B "
                    f"of each metric from {spec.estimator}. CI: 95% percentile paired bootstrap over "
                    f"{spec.cluster}s (the "
                    f"same resampled clusters for both models; n_boot = {n_boot}, seed {seed}; none with fewer than "
                    f"{MIN_CLUSTERS} clusters); p: two-sided bootstrap p. McNemar: exact test on whether "
                    f"{spec.binary} (A+B−: A yes, B no), units treated "
                    "as independent. p columns: raw / Holm-adjusted across the categories of this table (the all "
                    "row is not adjusted); bold: adjusted p < 0.05."), df))
    note = f"No unit scored by both runs, so no paired comparison: {'; '.join(disjoint)}." if disjoint else ""
    return out, note


def _weights(model: Mapping[str, Any]) -> str:
    """The runs table's "Quantization / dtype" cell: ``GGUF Q4_1, de-quantized to float32`` (the dtype is in it),
    ``4bit / bfloat16``, ``– / float32``."""
    quant, dtype = model.get("quantization"), model.get("dtype") or "–"
    if quant and str(dtype) in str(quant):
        return str(quant)
    return f"{quant or '–'} / {dtype}"


def _runs_table(runs: Sequence[Run]) -> Table:
    rows = []
    for r in runs:
        m = r.provenance.get("model") or {}
        rows.append({"Label": r.label, "Task": r.task, "Model": r.model,
                     "Parameters (B)": f"{r.params_b:.3g}" if math.isfinite(r.params_b) else "–",
                     "Quantization / dtype": _weights(m),
                     "Items": r.summary.get("n_items", "–"), "Limit": r.config.get("limit") or "–",
                     "Created": r.provenance.get("created", "–"), "Directory": str(r.path)})
    return Table("runs", "", "Runs in this report", "One row per run directory given; labels name what differs "
                 "between runs of the same model (config keys, limit), as used in every table.", pd.DataFrame(rows))


def build_report(runs: Sequence[Run], output: str | Path, n_boot: int = 2000, seed: int = 0,
                 params_b: Mapping[str, float] | None = None, title: str | None = None,
                 progress: Callable[[str], None] | None = None, headline: pd.DataFrame | None = None,
                 warnings: Sequence[str] = (), layouts: Mapping[str, TaskLayout] | None = None) -> dict[str, Any]:
    """Write the report of ``runs`` into ``output``; return the manifest (also ``manifest.json``).

    ``layouts``: each task's section (:class:`~probe.reports.compare.layout.TaskLayout`, from the task's
    ``reporting.layout()``); a task without one gets each run's own tables.

    ``headline``: a table shown first (the main metric per model x task with its CI and n);
    ``warnings``: lines shown above everything (low answer mass, small samples, template-built data)."""
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    groups = by_task(runs)
    lays = {t: (layouts or {}).get(t) or generic_layout(t) for t in groups}
    ranked = sorted((t for t in groups if lays[t].rank is not None), key=lambda t: lays[t].rank)
    tasks = ranked + [t for t in groups if lays[t].rank is None]
    context = ReportContext(groups, params_b)
    sections: list[Section] = []
    if headline is not None and len(headline):
        from probe.reports.headline import headline_section

        sections.append(headline_section(headline))
    sections += [_task_section(task, groups[task], lays[task], out, context, n_boot, seed, params_b, progress)
                 for task in tasks]
    runs_table = _runs_table(runs)
    all_items = [runs_table] + [it for s in sections for it in s.items]
    _unique_names(all_items)
    for it in all_items:
        if isinstance(it, Table):
            write_table(it, out)
    models = sorted({r.model for r in runs})
    title = title or f"probe comparison report: {', '.join(models)}"
    intro = (f"{len(runs)} run(s) of {len(tasks)} task(s) ({', '.join(tasks)}), models {', '.join(models)}. "
             "Every table and figure states its estimator, sample size and CI method.")
    # the warnings as Markdown block quotes: their text escaped, the quote marker kept
    md_intro = "\n\n".join([*(f"> **Warning:** {md_text(w)}" for w in warnings), md_text(intro)])
    write_atomic(out / "report.html", render(title, intro, sections, runs_table, warnings=warnings))
    write_atomic(out / "report.md", _markdown(title, md_intro, sections, runs_table))
    manifest = {
        "title": title,
        "runs": [{"label": r.label, "task": r.task, "model": r.model, "path": str(r.path)} for r in runs],
        "tables": [{"name": it.name, "task": it.task, "title": it.title, "md": f"tables/{it.name}.md",
                    "csv": f"tables/{it.name}.csv"} for it in all_items if isinstance(it, Table)],
        "figures": [{"name": it.name, "task": it.task, "title": it.title, "png": f"figures/{it.png.name}",
                     "svg": f"figures/{it.svg.name}"} for it in all_items if isinstance(it, Figure)],
    }
    write_json_atomic(out / "manifest.json", manifest)
    return manifest


def _task_section(task: str, trs: Sequence[Run], lay: TaskLayout, out: Path, context: ReportContext, n_boot: int,
                  seed: int, params_b: Mapping[str, float] | None,
                  progress: Callable[[str], None] | None) -> Section:
    """One task's section: its layout's items, the papers' estimators beside them, the paired comparisons."""
    if progress:
        progress(f"{task}: {len(trs)} run(s)")
    items = lay.section(trs, out, context)
    # the papers' own (sampled) estimators, each beside the exact table it mirrors
    if lay.paper_tables is not None:
        items = paper_layouts.insert_beside(items, lay.paper_tables(trs, params_b))
    paired, note = paired_tables(task, trs, n_boot, seed, lay)
    models = ", ".join(r.label for r in trs)
    intro = f"{len(trs)} run(s): {models}." + (f" {note}" if note else "")
    return Section(task, lay.title, intro, items + paired)


def _unique_names(items: Sequence[Any]) -> None:
    """Number the items whose names clash (``name_1``, ``name_2``, in order), in place."""
    names = [it.name for it in items]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:  # two labels that slug alike: keep files apart
        seen: dict[str, int] = {}
        for it in items:
            if it.name in dup:
                seen[it.name] = seen.get(it.name, 0) + 1
                it.name = f"{it.name}_{seen[it.name]}"


def _markdown(title: str, intro: str, sections: Sequence[Section], runs_table: Table) -> str:
    """The report as Markdown; ``intro`` is Markdown already (its text escaped by the caller)."""
    e = md_text  # text from data never reaches the Markdown as raw HTML
    md = [f"# {e(title)}", "", intro, "", "## Runs", "", markdown(runs_table.df), ""]
    for s in sections:
        md += [f"## {e(s.title)}", "", e(s.intro), ""]
        for it in s.items:
            if isinstance(it, Table):
                md += [f"### {e(it.title)}", "", markdown(it.df), "", f"*{e(it.caption)}*", ""]
            else:
                md += [f"### {e(it.title)}", "", f"![{e(it.title)}](figures/{it.png.name})", "", f"*{e(it.caption)}* "
                       f"(SVG: figures/{it.svg.name})", ""]
    return "\n".join(md)
