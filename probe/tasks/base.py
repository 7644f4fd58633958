"""What a task is: one benchmark's stages, wired for the one Runner.

A task subclasses :class:`Task` and fills in its stages; the runner
(:func:`probe.runs.task_run.run_task`) does everything else (model, chunks,
records, resume, cache, shards, provenance, timing) the same way for every
task. A task never writes records or loops over chunks itself.

Stages, in the order the runner calls them:

1. ``items(config)``: the benchmark's items (source files -> item objects);
2. ``select(config, items, limit)``: the first ``limit`` items (override to
   keep pairs or clusters whole);
3. ``generation_requests(config, items, tokenizer)``: optional generations
   before scoring (chain-of-thought), greedy or seeded sampling; default none;
4. ``requests(config, items, tokenizer, generations)``: scorer requests, each
   with ``meta`` (the item fields its record needs: category, setting, ...);
   ids unique; what shares a prompt prefix adjacent; ``sampling(config)``:
   the sampling specs of the paper's estimator, scored in the same passes;
   ``parse_requests(config, items, tokenizer)``: optional, the paper's sampling
   + parsing procedure, enumerated exactly (:mod:`probe.scoring.parse_exact`);
5. ``aggregate(config, records, items)``: a summary dict and tables
   (name -> DataFrame) from the records (a DataFrame with ``meta`` flattened,
   one row per record);
6. ``report(config, result, output)``: extra files (report.md, figures);
   default writes the tables as Markdown and CSV.

A third-party task registers its :class:`Task` subclass (or a module with a
``TASK`` attribute) under the entry-point group ``probe.tasks``; see
``docs/tasks.md``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class TaskConfig:
    """Base of every task's config: frozen; YAML keys and ``--set`` values map onto fields."""


@dataclass
class Aggregate:
    """What ``Task.aggregate`` returns: the summary (JSON-ready) and named tables."""

    summary: dict[str, Any]
    tables: dict[str, "pd.DataFrame"] = field(default_factory=dict)


class Task:
    """One benchmark. Subclasses set ``name``, ``description``, ``Config`` and the stages."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Config: ClassVar[type] = TaskConfig

    # -- stages ---------------------------------------------------------------
    def items(self, config: Any) -> Sequence[Any]:
        raise NotImplementedError

    def select(self, config: Any, items: Sequence[Any], limit: int | None) -> Sequence[Any]:
        """The items a run with ``--limit`` scores (default: the first ``limit``)."""
        return items if limit is None else list(items)[:limit]

    def generation_requests(self, config: Any, items: Sequence[Any], tokenizer: Any) -> list[Any]:
        return []

    def requests(self, config: Any, items: Sequence[Any], tokenizer: Any,
                 generations: Mapping[str, str] | None = None) -> list[Any]:
        raise NotImplementedError

    def aggregate(self, config: Any, records: "pd.DataFrame", items: Sequence[Any]) -> Aggregate:
        raise NotImplementedError

    def parse_requests(self, config: Any, items: Sequence[Any], tokenizer: Any) -> list[Any]:
        """The paper's own procedure, computed exactly: :class:`~probe.scoring.parse_exact.ParseRequest` s
        (the paper's generation prompt, sampling settings and answer parser) whose parsed-answer
        distributions the runner enumerates (``parsed.jsonl``) after scoring. Each record of
        :meth:`aggregate` whose id has one carries it in the ``parsed`` column. Default: none."""
        return []

    def sampling(self, config: Any) -> tuple[Any, ...]:
        """Sampling specs the task's paper-equivalent estimates need (``{temperature, top_p}`` mappings or
        :class:`~probe.scoring.sampling.SamplingSpec`): the runner computes them in the scoring passes and
        each record carries them under ``sampling``. Default: none."""
        return ()

    def report(self, config: Any, result: Aggregate, output: Path) -> None:
        """Extra outputs; the default writes every table as ``tables/NAME.md`` and ``.csv``."""
        write_tables(result.tables, output)

    def data_files(self, config: Any) -> list[Path]:
        """Input files whose sha256 goes into ``provenance.json``."""
        return []

    # -- analyses (optional; ``probe analyze probes|lens|patch|steer``, probe.runs.analyze) ----------
    def analysis_units(self, config: Any, records: "pd.DataFrame", items: Sequence[Any]) -> list[str]:
        """The cluster unit of every record (row order): what probe folds and bootstrap CIs keep whole."""
        return _no_analysis(self, "analysis_units")

    def patch_pairs(self, config: Any, records: "pd.DataFrame", items: Sequence[Any]) -> list[tuple[str, str, str]]:
        """``(source_id, target_id, kind)`` record pairs to patch between (``kind`` names the pairing,
        e.g. ``explicit->implicit``); each pair in both directions if the task wants both."""
        return _no_analysis(self, "patch_pairs")

    def bias_metrics(self, config: Any, summary: Mapping[str, Any]) -> dict[str, dict[str, float]]:
        """The headline metrics of a summary from :meth:`aggregate`, ``name -> {value, ci_low, ci_high, n}``
        (CIs: the task's own, clustered by its unit); the first is the default steering metric."""
        return _no_analysis(self, "bias_metrics")

    # -- config ---------------------------------------------------------------
    def make_config(self, values: Mapping[str, Any] | None = None, source: str = "config") -> Any:
        """``Config`` from a mapping; unknown keys are an error naming ``source`` and the valid keys."""
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(self.Config)}
        unknown = sorted(set(values) - known)
        if unknown:
            from probe.errors import ProbeError

            raise ProbeError(f"{source}: unknown key(s) {', '.join(unknown)} for task {self.name!r}; "
                             f"valid keys: {', '.join(sorted(known)) or '(none)'}")
        from probe.errors import ProbeError

        for f in dataclasses.fields(self.Config):
            if f.name in values:
                problem = _value_problem(f, values[f.name])
                if problem:
                    raise ProbeError(f"{source}: {f.name} {problem}, got {values[f.name]!r}")
        try:
            return self.Config(**values)
        except (TypeError, ValueError) as exc:
            raise ProbeError(f"{source}: {exc}") from None


def _value_problem(f: "dataclasses.Field", value: Any) -> str | None:
    """What is wrong with ``value`` for a config field whose default is a plain bool / int / float / str, else None.
    Checked before any work, so a bad value (``--set n_boot=lots``) never costs a model load and a scoring run.
    Counts named ``n_*`` (``n_boot``, ``n_iter``, ...) must not be negative."""
    default = f.default
    if default is dataclasses.MISSING or default is None or value is None:
        return None
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "must be true or false"
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be an integer"
        if f.name.startswith("n_") and value < 0:
            return "must not be negative"
        return None
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "must be a number"
    if isinstance(default, str) and not isinstance(value, str):
        return "must be a string"
    return None


def write_tables(tables: Mapping[str, "pd.DataFrame"], output: Path) -> list[Path]:
    """Each table as ``output/tables/NAME.md`` (Markdown) and ``.csv``; returns the paths written."""
    from probe.io import inside, no_markup, write_atomic

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


def _no_analysis(task: Task, hook: str) -> Any:
    from probe.errors import ProbeError

    raise ProbeError(f"task {task.name!r} does not support the task analyses (it has no {hook}() hook); "
                     "they are implemented for bbq, implicitbbq and hbb")
