"""What a task may say beyond its three stages, grouped by concern: four facets, each with defaults.

A task must write ``items``, ``requests`` and ``aggregate`` (:class:`probe.tasks.base.Task`). Everything else
is optional and lives on one of four facet objects the task holds as class attributes; a task replaces a
facet by a subclass that overrides only what it needs:

- :class:`Selection` (``task.selection``): what ``--limit N`` selects: strata, units, seed, coverage;
- :class:`Paper` (``task.paper``): the paper's own procedure beside the exact scores: generations before
  scoring, sampling specs, parse requests, the sampling check;
- :class:`Reporting` (``task.reporting``): the headline metrics, the flat results, warnings, the words a
  reader sees, its ``probe report`` section and its extra files;
- :class:`Analyses` (``task.analyses``): what the mechanism analyses read: units, patch pairs,
  representation labels, ``probe activations`` items.

Read through its task, a facet is a copy bound to it (``self.task``), made once per task object, so a hook
can call the task's own helpers.

>>> class ByCategory(Selection):
...     names = ("category",)
>>> ByCategory().strata(None, [{"category": "age"}, {"category": "ses"}])
[('age',), ('ses',)]
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from probe.errors import ProbeError
from probe.io import inside, no_markup, write_atomic


if TYPE_CHECKING:
    import pandas as pd

    from probe.reports.compare.layout import TaskLayout
    from probe.scoring.generate import GenerationRequest
    from probe.scoring.parse.schema import ParseRequest
    from probe.tasks.paper_check import PaperCheck
    from probe.tasks.representation import RepresentationLabels

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.

__all__ = ["Analyses", "Facet", "Paper", "Reporting", "Selection", "result_row", "write_tables"]


class Facet:
    """A group of optional task hooks with defaults. ``self.task`` is the task it was read through (None when
    read from the class)."""

    task: Any = None
    _attr: str = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = name

    def __get__(self, task: Any, owner: type | None = None) -> Any:
        if task is None:
            return self
        bound = copy.copy(self)
        bound.task = task
        if self._attr:  # cached on the task: later reads find it first (a facet has no __set__)
            vars(task)[self._attr] = bound
        return bound


class Selection(Facet):
    """What ``--limit N`` selects: a stratified sample over ``names`` with whole units
    (:func:`probe.tasks.stratify.stratified_limit`); without ``names``, the first N items."""

    #: what ``--limit`` stratifies over (outermost first), e.g. ``("category",)``; empty: the first N items
    names: tuple[str, ...] = ()
    #: what one unit of :meth:`units` is (the items kept together), for the coverage record
    unit_name: str = "item"

    def strata(self, config: Any, items: Sequence[Any]) -> list[tuple]:
        """One tuple of stratum values per item, in ``names`` order; default: each item's fields of those
        names (attributes, or keys of a mapping)."""
        return [tuple(_field(it, n) for n in self.names) for it in items]

    def units(self, config: Any, items: Sequence[Any]) -> list | None:
        """One unit key per item: items sharing a key are selected together (default: each item alone)."""
        return None

    def seed(self, config: Any) -> int | None:
        """Seed of the within-stratum order (None: the order ``items`` gives)."""
        return None

    def select(self, config: Any, items: Sequence[Any], limit: int | None) -> Sequence[Any]:
        """The items a run with ``--limit`` scores (``limit`` None: all of them)."""
        if limit is None:
            return items
        if not self.names:
            return list(items)[:limit]
        from probe.tasks.stratify import stratified_limit

        return stratified_limit(items, limit, self.strata(config, items), self.units(config, items),
                                self.seed(config))

    def coverage(self, config: Any, pool: Sequence[Any], selected: Sequence[Any],
                 limit: int | None = None) -> dict[str, Any]:
        """What ``selected`` covers of ``pool`` (an unlimited selection), per stratum name."""
        from probe.tasks.stratify import coverage

        return coverage(pool, selected, self.names, lambda xs: self.strata(config, xs), limit, self.unit_name,
                        lambda xs: self.units(config, xs))


class Paper(Facet):
    """The paper's own procedure, computed beside the exact scores; by default there is none."""

    def generation_requests(self, config: Any, items: Sequence[Any], tokenizer: Any) -> list[GenerationRequest]:
        """Generations before scoring (chain-of-thought chains, model-written variations), greedy or seeded
        sampling; :meth:`~probe.tasks.base.Task.requests` receives them as ``{id: text}``."""
        return []

    def generation_note(self, config: Any) -> str:
        """What the generations are for and how to skip them (printed in the run's plan)."""
        return ""

    def sampling(self, config: Any) -> tuple[Any, ...]:
        """Sampling specs of the paper's estimator (``{temperature, top_p}`` mappings or
        :class:`~probe.scoring.sampler.sampling.SamplingSpec`): scored in the same passes, each record carries
        them under ``sampling``."""
        return ()

    def parse_requests(self, config: Any, items: Sequence[Any], tokenizer: Any) -> list[ParseRequest]:
        """The paper's sampling + parsing, enumerated exactly (:class:`~probe.scoring.parse.exact.ParseRequest`
        s, ids of scoring requests): the records of those ids carry the distribution in ``parsed``."""
        return []

    def check(self) -> PaperCheck | None:
        """The paper's sampled procedure for ``probe validate sampling`` (a fresh
        :class:`~probe.tasks.paper_check.PaperCheck`), or None. Default: ``PaperCheck()`` of the module
        ``paper_check`` beside the task's module, when it has one."""
        own = self.task.beside("paper_check") if self.task is not None else None
        return own.PaperCheck() if own is not None and hasattr(own, "PaperCheck") else None


class Reporting(Facet):
    """What a reader sees: the headline, the flat results, warnings, words, the report section, extra files."""

    #: metric name -> what a reader must see beside it in a headline (e.g. its denominator)
    metric_notes: Mapping[str, str] = {}
    #: internal key -> the phrase a reader of the paper understands (metric, subgroup, summary key;
    #: :func:`probe.reports.headline.phrase`); a key not listed is shown as it is
    terms: Mapping[str, str] = {}

    def headline_metrics(self, config: Any, summary: Mapping[str, Any]) -> dict[str, dict[str, float]]:
        """The headline metrics of a summary, ``name -> {value, ci_low, ci_high, n, clusters}`` (CIs clustered
        by the task's unit): the first is the headline of ``results.csv`` and every report, and the default
        steering metric. Default: none (a :class:`~probe.errors.ProbeError`)."""
        return _no_analysis(self.task, "reporting.headline_metrics")

    def results(self, config: Any, summary: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The summary as flat rows (:func:`result_row`). Default: :meth:`headline_metrics` over all items, the
        first one the headline; none when the task has none."""

        try:
            metrics = self.headline_metrics(config, summary)
        except (ProbeError, KeyError, TypeError):
            return []
        return [result_row("all", name, "", m.get("value"), m.get("ci_low"), m.get("ci_high"), m.get("n"), k == 0,
                           m.get("clusters"))
                for k, (name, m) in enumerate(metrics.items())]

    def warnings(self, summary: Mapping[str, Any]) -> list[str]:
        """What a reader must see before the numbers, beside the warnings every report gives."""
        return []

    def layout(self) -> TaskLayout:
        """The task's section of a comparison report (:class:`~probe.reports.compare.layout.TaskLayout`).
        Default: ``layout()`` of the module ``layout`` beside the task's module, else each run's own tables."""
        own = self.task.beside("layout") if self.task is not None else None
        if own is not None and hasattr(own, "layout"):
            return own.layout()
        from probe.reports.compare.layout import generic_layout

        return generic_layout(self.task.name if self.task is not None else "")

    def write(self, config: Any, result: Any, output: Path) -> None:
        """Extra files in the run directory; default: every table as ``tables/NAME.md`` and ``.csv``."""
        write_tables(result.tables, output)


class Analyses(Facet):
    """What ``probe analyze`` and ``probe activations`` read from a task; by default none applies."""

    def units(self, config: Any, records: "pd.DataFrame", items: Sequence[Any]) -> list[str]:
        """The cluster unit of every record (row order): what probe folds and bootstrap CIs keep whole."""
        return _no_analysis(self.task, "analyses.units")

    def patch_pairs(self, config: Any, records: "pd.DataFrame", items: Sequence[Any]) -> list[tuple[str, str, str]]:
        """``(source_id, target_id, kind)`` record pairs to patch between (``kind`` names the pairing)."""
        return _no_analysis(self.task, "analyses.patch_pairs")

    def representation_labels(self) -> RepresentationLabels | None:
        """What ``probe analyze representations`` probes in the task's runs, or None (the study does not apply)."""
        return None

    def capture_item(self, line: Mapping[str, Any], tokenizer: Any, *, chat_template: bool = True,
                     strategy: str = "zero_shot") -> Any:
        """A ``probe activations --input`` line in the task's own item format, rendered by its prompt (a
        :class:`probe.prompts.capture_items.CaptureItem`), or None when the line is not the task's;
        ``ValueError`` on a bad line of its format."""
        return None


def _field(item: Any, name: str) -> Any:
    return item[name] if isinstance(item, Mapping) else getattr(item, name)


def _no_analysis(task: Any, hook: str) -> Any:
    raise ProbeError(f"task {getattr(task, 'name', '?')!r} does not support the task analyses (it has no {hook}() "
                     "hook); they are implemented for bbq, implicitbbq and hbb")


def result_row(subgroup: str, metric: str, estimator: str, value: Any, ci_low: Any = None, ci_high: Any = None,
               n: Any = None, headline: bool = False, clusters: Any = None, certified: Any = None,
               undefined: str | None = None) -> dict[str, Any]:
    """One row of :meth:`Reporting.results` (missing numbers as NaN). ``clusters``: how many units the CI
    resampled (template instances, concept pairs, context pairs, or the items themselves), which a report
    names when there are too few for an interval. ``ci_low`` / ``ci_high``: a statistical interval only;
    ``certified``: a parsed metric's certified interval ``[lo, hi]`` (its own columns); ``undefined``: why the
    value is missing ("n/a: nothing parsed, 8 of 8 questions")."""
    def num(v: Any) -> float:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float("nan")

    cert = list(certified) if certified is not None else [None, None]
    return {"subgroup": str(subgroup), "metric": metric, "estimator": estimator, "value": num(value),
            "ci_low": num(ci_low), "ci_high": num(ci_high), "n": num(n), "headline": bool(headline),
            "n_clusters": num(clusters), "certified_low": num(cert[0]), "certified_high": num(cert[1]),
            "undefined": undefined or None}


def write_tables(tables: Mapping[str, "pd.DataFrame"], output: Path) -> list[Path]:
    """Each table as ``output/tables/NAME.md`` (Markdown) and ``.csv``; returns the paths written."""

    written = []
    for name, df in tables.items():
        # names may hold dots (table2_paper_T0.1): append the suffix, never replace one
        md_path = inside(output, output / "tables" / f"{name}.md")  # a name from data never leaves the run
        csv_path = inside(output, output / "tables" / f"{name}.csv")
        write_atomic(md_path, no_markup(_markdown(df)))
        write_atomic(csv_path, df.to_csv(index=False))
        written += [md_path, csv_path]
    return written


def _markdown(df: "pd.DataFrame") -> str:
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return "n/a" if v != v else f"{v:.4g}"
    return str(v)
