"""What a task is: one benchmark's stages, wired for the one Runner.

A task subclasses :class:`Task` and fills in its stages; the runner
(:func:`probe.runs.task_run.run_task`) does everything else (model, chunks,
records, resume, cache, shards, provenance, timing) the same way for every
task. A task never writes records or loops over chunks itself.

Stages, in the order the runner calls them:

1. ``items(config)``: the benchmark's items (source files -> item objects);
2. ``select(config, items, limit)``: with ``--limit N``, a stratified sample of
   N items over the task's ``strata_names`` (``strata``), whole ``units`` kept
   together (:mod:`probe.tasks.stratify`); a task without strata takes the
   first N; ``coverage`` says what the selection covered and left out;
3. ``generation_requests(config, items, tokenizer)``: optional generations
   before scoring (chain-of-thought), greedy or seeded sampling; default none;
4. ``requests(config, items, tokenizer, generations)``: scorer requests, each
   with ``meta`` (the item fields its record needs: category, setting, ...);
   ids unique; what shares a prompt prefix adjacent; ``sampling(config)``:
   the sampling specs of the paper's estimator, scored in the same passes;
   ``parse_requests(config, items, tokenizer)``: optional, the paper's sampling
   + parsing procedure, enumerated exactly (:mod:`probe.scoring.parse_exact`);
5. ``aggregate(config, records, items)``: a summary dict and tables
   (name -> DataFrame) from the records (a DataFrame, one row per record: the
   columns of :data:`FRAME_COLUMNS`, and one per ``meta`` key);
6. ``report(config, result, output)``: extra files (report.md, figures);
   default writes the tables as Markdown and CSV.

What the task hands the layers around the runner, so that no code outside it
names the benchmark:

- ``report_layout()``: its section of a comparison report (``probe report``):
  title, place, tables and figures, paper tables, paired-test units
  (:class:`probe.reports.compare.layout.TaskLayout`); default: each run's own
  tables, no paired comparison;
- ``paper_check()``: the paper's sampled procedure for ``probe validate
  sampling`` (:class:`probe.tasks.paper_check.PaperCheck`: the paper's
  decoding settings, its answer parser, the estimator's counted event, the
  headline metric); default: none;
- ``bias_metrics(config, summary)`` / ``results(config, summary)``: the
  headline of ``results.csv`` and of every report.

The config and item types are the task's own (``Task[ConfigT, ItemT]``), and
:func:`probe.testing.check_task` is the contract test every task, built-in or
not, passes.

A third-party task registers its :class:`Task` subclass (or a module with a
``TASK`` attribute) under the entry-point group ``probe.tasks``; see
``docs/tasks.md``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, Mapping, Sequence, TypeVar, Union

if TYPE_CHECKING:
    import pandas as pd

    from probe.scoring.generate import GenerationRequest
    from probe.scoring.parse_schema import ParseRequest
    from probe.reports.compare.layout import TaskLayout
    from probe.scoring.requests import ContinuationRequest, LabelRequest, PerplexityRequest
    from probe.tasks.paper_check import PaperCheck
    from probe.tasks.representation import RepresentationLabels

    #: what :meth:`Task.requests` returns a list of
    Request = Union[LabelRequest, ContinuationRequest, PerplexityRequest]


@dataclass(frozen=True)
class TaskConfig:
    """Base of every task's config: frozen; YAML keys and ``--set`` values map onto fields."""


@dataclass
class Aggregate:
    """What ``Task.aggregate`` returns: the summary (JSON-ready) and named tables."""

    summary: dict[str, Any]
    tables: dict[str, "pd.DataFrame"] = field(default_factory=dict)


#: The columns of the records frame :meth:`Task.aggregate` receives (one row per record, in request order;
#: :func:`probe.runs.record.records_to_frame`), beside one column per key the task put in its requests' ``meta``
#: (a key that clashes with one of these is prefixed ``meta.``).
FRAME_COLUMNS: Mapping[str, str] = {
    "task": "the task's name",
    "id": "the request id (unique in the run; nothing is parsed out of it)",
    "model": "the short model fingerprint (12 hex digits)",
    "kind": "label, continuation or perplexity",
    "options": "the labels (label), the option texts (continuation), empty (perplexity)",
    "logprobs": "raw log-probabilities per option: the label token's, the continuation's summed; perplexity: [-nll]",
    "probs": "the softmax of logprobs over the options (empty for perplexity)",
    "pred_index": "the argmax of probs, ties to the lower index; None when the scores are not finite",
    "mass": "the probability the options carry in the model's whole distribution (label: the label tokens'; "
            "continuation: the sum of the options' sequence probabilities; perplexity: None)",
    "finite": "False when the model produced NaN or inf: such a row is never an answer",
    "n_prompt_tokens": "the prompt's length in tokens (None for perplexity)",
}
#: Columns a frame has only for some kinds or runs.
FRAME_COLUMNS_BY_KIND: Mapping[str, str] = {
    "token_ids": "label: the token ids scored per label",
    "label_mass": "label: mass again (the name earlier probe score output used)",
    "mean_logprobs": "continuation: logprobs divided by each option's token count",
    "per_byte_logprobs": "continuation: logprobs divided by each option's UTF-8 byte count",
    "token_counts": "continuation: each option's token count", "byte_counts": "continuation: each option's byte count",
    "ppl": "perplexity: exp(nll / n_tokens)", "nll": "perplexity: the text's negative log-likelihood",
    "n_tokens": "perplexity: tokens scored",
    "sampling": "when the task or run asks for sampling specs: per spec {temperature, top_p, probs, mass} "
                "(label) or {temperature, top_p, logprobs} (continuation)",
    "parsed": "when the task has parse requests: the record's parsed-answer distribution (parsed.jsonl's record: "
              "probs, rejected, residual, nodes, top) or None",
}

@dataclass(frozen=True)
class CheckCase:
    """A quick run of a task for its contract test (:func:`probe.testing.check_task`): config values and
    ``--limit`` (None: every item the config selects)."""

    values: Mapping[str, Any] = field(default_factory=dict)
    limit: int | None = 4


#: a task's config type (a frozen :class:`TaskConfig` dataclass)
ConfigT = TypeVar("ConfigT", bound=TaskConfig)
#: a task's item type (what :meth:`Task.items` returns a sequence of)
ItemT = TypeVar("ItemT")


class Task(Generic[ConfigT, ItemT]):
    """One benchmark, generic over its config and item types: ``class HBBTask(Task[HBBConfig, HBBInstance])``.

    Subclasses set ``name``, ``description``, ``Config`` (the config type again, as a value: the registry and
    ``--set`` build it) and the stages. :func:`probe.testing.check_task` checks a task against this contract.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Config: ClassVar[type] = TaskConfig
    #: what ``--limit`` stratifies over (outermost first), e.g. ``("category",)``; empty: the first N items
    strata_names: ClassVar[tuple[str, ...]] = ()
    #: what one unit of ``units`` is (the items kept together), for the coverage record
    unit_name: ClassVar[str] = "item"
    #: metric name -> what a reader must see beside it in a headline (e.g. its denominator)
    metric_notes: ClassVar[Mapping[str, str]] = {}
    #: internal key -> the phrase a reader of the paper understands, for every label a report or warning shows
    #: (metric, subgroup, summary key; :func:`probe.reports.headline.phrase`), e.g. ``{"hbb_swapavg": "both
    #: option orders averaged"}``; a key not listed is shown as it is
    terms: ClassVar[Mapping[str, str]] = {}

    # -- stages ---------------------------------------------------------------
    def items(self, config: ConfigT) -> Sequence[ItemT]:
        """The benchmark's items (source files -> item objects)."""
        raise NotImplementedError

    def select(self, config: ConfigT, items: Sequence[ItemT], limit: int | None) -> Sequence[ItemT]:
        """The items a run with ``--limit`` scores: a stratified sample over ``strata_names`` with whole
        ``units`` (:func:`probe.tasks.stratify.stratified_limit`); without strata the first ``limit``."""
        if limit is None:
            return items
        if not self.strata_names:
            return list(items)[:limit]
        from probe.tasks.stratify import stratified_limit

        return stratified_limit(items, limit, self.strata(config, items), self.units(config, items),
                                self.limit_seed(config))

    def strata(self, config: ConfigT, items: Sequence[ItemT]) -> list[tuple]:
        """One tuple of stratum values per item, in ``strata_names`` order (default: none)."""
        return [()] * len(items)

    def units(self, config: ConfigT, items: Sequence[ItemT]) -> list | None:
        """One unit key per item: items sharing a key are selected together (default: each item alone)."""
        return None

    def limit_seed(self, config: ConfigT) -> int | None:
        """Seed of the within-stratum order under ``--limit`` (None: the order ``items`` gives)."""
        return None

    def coverage(self, config: ConfigT, pool: Sequence[ItemT], selected: Sequence[ItemT],
                 limit: int | None = None) -> dict[str, Any]:
        """What ``selected`` covers of ``pool`` (an unlimited selection), per stratum name."""
        from probe.tasks.stratify import coverage

        return coverage(pool, selected, self.strata_names, lambda xs: self.strata(config, xs), limit,
                        self.unit_name)

    def generation_requests(self, config: ConfigT, items: Sequence[ItemT], tokenizer: Any) -> list[GenerationRequest]:
        """Generations before scoring (chain-of-thought), greedy or seeded sampling; default none."""
        return []

    def generation_note(self, config: ConfigT) -> str:
        """What the generation stage is for and how to skip it (printed in the run's plan)."""
        return ""

    def requests(self, config: ConfigT, items: Sequence[ItemT], tokenizer: Any,
                 generations: Mapping[str, str] | None = None) -> list[Request]:
        """The scorer's requests, each with ``meta`` (the item fields its record needs: category, setting, ...);
        ids unique; what shares a prompt prefix adjacent. ``generations``: ``{id: text}`` of
        :meth:`generation_requests` (None when the task generates nothing)."""
        raise NotImplementedError

    def aggregate(self, config: ConfigT, records: "pd.DataFrame", items: Sequence[ItemT]) -> Aggregate:
        """The summary (JSON-ready) and tables from ``records``: one row per record, the columns of
        :data:`FRAME_COLUMNS` (and :data:`FRAME_COLUMNS_BY_KIND`) and one per ``meta`` key."""
        raise NotImplementedError

    def parse_requests(self, config: ConfigT, items: Sequence[ItemT], tokenizer: Any) -> list[ParseRequest]:
        """The paper's own procedure, computed exactly: :class:`~probe.scoring.parse_exact.ParseRequest` s
        (the paper's generation prompt, sampling settings and answer parser) whose parsed-answer
        distributions the runner enumerates (``parsed.jsonl``) after scoring. Each record of
        :meth:`aggregate` whose id has one carries it in the ``parsed`` column. Default: none."""
        return []

    def sampling(self, config: ConfigT) -> tuple[Any, ...]:
        """Sampling specs the task's paper-equivalent estimates need (``{temperature, top_p}`` mappings or
        :class:`~probe.scoring.sampling.SamplingSpec`): the runner computes them in the scoring passes and
        each record carries them under ``sampling``. Default: none."""
        return ()

    def report(self, config: ConfigT, result: Aggregate, output: Path) -> None:
        """Extra outputs; the default writes every table as ``tables/NAME.md`` and ``.csv``."""
        write_tables(result.tables, output)

    # -- what the task hands the report and the sampling check ---------------------------------------
    def report_layout(self) -> TaskLayout:
        """This task's section of a comparison report (:class:`~probe.reports.compare.layout.TaskLayout`):
        title, place, tables and figures with several models, paper tables, paired-test units. Default: the
        ``layout()`` of the module ``layout`` beside the task's module (:meth:`beside`) when it has one, else
        titled by the task's name, each run's own tables, no paired comparison."""
        own = self.beside("layout")
        if own is not None and hasattr(own, "layout"):
            return own.layout()
        from probe.reports.compare.layout import generic_layout

        return generic_layout(self.name)

    def paper_check(self) -> PaperCheck | None:
        """The paper's own sampled procedure for ``probe validate sampling`` (a fresh
        :class:`~probe.tasks.paper_check.PaperCheck`: decoding settings, answer parser, counted event,
        headline metric), or None when the task has no such check. Default: a ``PaperCheck()`` of the module
        ``paper_check`` beside the task's module (:meth:`beside`) when it has one, else None."""
        own = self.beside("paper_check")
        return own.PaperCheck() if own is not None and hasattr(own, "PaperCheck") else None

    def beside(self, module: str) -> ModuleType | None:
        """The module called ``module`` in this task's own folder (``probe.tasks.hbb.layout`` beside
        ``probe.tasks.hbb.task``), imported; None when the task's module has no package or no such module.

        The folder's conventional modules give the hooks their defaults (``layout``: :meth:`report_layout`;
        ``paper_check``: :meth:`paper_check`), as ``cli`` and ``datasets`` give the registry its commands and
        data sets, so a task folder need not re-type them."""
        import importlib
        from importlib.util import find_spec

        package = type(self).__module__.rpartition(".")[0]
        if not package:
            return None
        name = f"{package}.{module}"
        try:
            found = find_spec(name) is not None
        except (ImportError, ValueError):  # the package itself is not importable as one
            return None
        return importlib.import_module(name) if found else None

    def report_warnings(self, summary: Mapping[str, Any]) -> list[str]:
        """What a reader of this task's report must see before the numbers, beside the warnings every report
        gives (low answer mass, small samples, a limited run's coverage); none by default."""
        return []

    def capture_item(self, line: Mapping[str, Any], tokenizer: Any, *, chat_template: bool = True,
                     strategy: str = "zero_shot") -> Any:
        """A line of a ``probe activations --input`` file in this task's own item format, rendered by its prompt
        (a :class:`probe.prompts.capture_items.CaptureItem`), or None when the line is not this task's (the
        default); ``ValueError`` on a bad line of its format."""
        return None

    def representation_labels(self) -> RepresentationLabels | None:
        """What ``probe analyze representations`` probes in this task's runs (a
        :class:`~probe.tasks.representation.RepresentationLabels`: the group, framing and stereotyped answer of
        each item and record), or None when the study does not apply (the default)."""
        return None

    def data_files(self, config: ConfigT) -> list[Path]:
        """Input files whose sha256 goes into ``provenance.json``."""
        return []

    # -- analyses (optional; ``probe analyze probes|lens|patch|steer``, probe.studies.analyze) ----------
    def analysis_units(self, config: ConfigT, records: "pd.DataFrame", items: Sequence[ItemT]) -> list[str]:
        """The cluster unit of every record (row order): what probe folds and bootstrap CIs keep whole."""
        return _no_analysis(self, "analysis_units")

    def patch_pairs(self, config: ConfigT, records: "pd.DataFrame", items: Sequence[ItemT]) -> list[tuple[str, str, str]]:
        """``(source_id, target_id, kind)`` record pairs to patch between (``kind`` names the pairing,
        e.g. ``explicit->implicit``); each pair in both directions if the task wants both."""
        return _no_analysis(self, "patch_pairs")

    # -- results: one flat row per (subgroup, metric, estimator) ------------------
    def results(self, config: ConfigT, summary: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The summary as flat rows ``{subgroup, metric, estimator, value, ci_low, ci_high, n, headline,
        n_clusters}`` (``headline``: the task's main metric(s), shown first in every report; ``n_clusters``: the
        units the interval resampled, :func:`result_row`). Default: the
        :meth:`bias_metrics` over all items, the first one the headline; none when the task has none."""
        from probe.errors import ProbeError

        try:
            metrics = self.bias_metrics(config, summary)
        except (ProbeError, KeyError, TypeError):
            return []
        return [result_row("all", name, "", m.get("value"), m.get("ci_low"), m.get("ci_high"), m.get("n"), k == 0,
                           m.get("clusters"))
                for k, (name, m) in enumerate(metrics.items())]

    def bias_metrics(self, config: ConfigT, summary: Mapping[str, Any]) -> dict[str, dict[str, float]]:
        """The headline metrics of a summary from :meth:`aggregate`, ``name -> {value, ci_low, ci_high, n,
        clusters}`` (CIs: the task's own, clustered by its unit). They feed :meth:`results` (the first is the
        headline of ``results.csv`` and every report) and the task analyses (the first is the default steering
        metric). Default: none (a :class:`~probe.errors.ProbeError`)."""
        return _no_analysis(self, "bias_metrics")

    # -- the contract test --------------------------------------------------------
    def check_case(self) -> CheckCase:
        """The config values and ``--limit`` of a quick run for :func:`probe.testing.check_task` (the test suite
        checks every registered task with them): a few items, on the data ``probe data fetch`` gets. Default:
        the default config, 4 items."""
        return CheckCase()

    # -- config ---------------------------------------------------------------
    def make_config(self, values: Mapping[str, Any] | None = None, source: str = "config") -> ConfigT:
        """``Config`` from a mapping; unknown keys are an error naming ``source`` and the valid keys."""
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(self.Config)}
        unknown = sorted(set(values) - known)
        if unknown:
            from probe.errors import ProbeError

            from probe.errors import did_you_mean

            hints = "".join(did_you_mean(k, known) for k in unknown)
            raise ProbeError(f"{source}: unknown key(s) {', '.join(unknown)} for task {self.name!r}{hints}; "
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
    if default is dataclasses.MISSING or default is None:
        return None
    if value is None:  # null only where the field says it may be None (``float | None``)
        if "None" in str(f.type) or "Optional" in str(f.type):
            return None
        if not isinstance(default, (bool, int, float, str, tuple, list)):
            return "must not be null"
    if isinstance(default, (tuple, list)) and default:  # a list of numbers or of names (one name may stand alone)
        def number(x: Any) -> bool:
            return isinstance(x, (int, float)) and not isinstance(x, bool)

        numbers, names = all(map(number, default)), all(isinstance(d, str) for d in default)
        if names and isinstance(value, str) or not (numbers or names):
            return None
        if not isinstance(value, (tuple, list)):
            return "must be a list"
        if numbers and not all(map(number, value)):
            return "must be a list of numbers"
        if names and not all(isinstance(v, str) for v in value):
            return "must be a list of strings"
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


def lazy_task_module(package: str, names: Sequence[str], module: str = "task") -> Callable[[str], Any]:
    """A task folder's ``__getattr__`` (PEP 562): ``names`` load from ``<package>.<module>`` on first use, so
    importing the folder (``probe --help`` looks for its ``cli`` and ``datasets`` modules) stays light.

    >>> get = lazy_task_module("probe.tasks.demo", ["DemoTask"])
    >>> get("DemoTask").name
    'demo'
    """
    def __getattr__(name: str) -> Any:
        if name in names:
            import importlib

            return getattr(importlib.import_module(f"{package}.{module}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def result_row(subgroup: str, metric: str, estimator: str, value: Any, ci_low: Any = None, ci_high: Any = None,
               n: Any = None, headline: bool = False, clusters: Any = None) -> dict[str, Any]:
    """One row of :meth:`Task.results` (missing numbers as NaN). ``clusters``: how many units the CI
    resampled (template instances, concept pairs, context pairs, or the items themselves), which a report
    names when there are too few for an interval."""
    def num(v: Any) -> float:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float("nan")

    return {"subgroup": str(subgroup), "metric": metric, "estimator": estimator, "value": num(value),
            "ci_low": num(ci_low), "ci_high": num(ci_high), "n": num(n), "headline": bool(headline),
            "n_clusters": num(clusters)}


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
