"""What a task is: one benchmark's three stages, wired for the one Runner, and four optional facets.

A task subclasses :class:`Task`, declares ``name``, ``description`` and ``Config`` and writes the three
stages every benchmark has; the runner (:func:`probe.runs.task_run.run_task`) does everything else (model,
chunks, records, resume, cache, shards, provenance, timing) the same way for every task. A task never
writes records or loops over chunks itself.

The stages, in the order the runner calls them:

1. ``items(config)``: the benchmark's items (source files -> item objects);
2. ``requests(config, items, tokenizer, generations)``: scorer requests, each with ``meta`` (the item fields
   its record needs: category, setting, ...); ids unique; what shares a prompt prefix adjacent;
3. ``aggregate(config, records, items)``: a summary dict and tables (name -> DataFrame) from the records (a
   DataFrame, one row per record: the columns of :data:`FRAME_COLUMNS`, and one per ``meta`` key).

Everything else is optional, with defaults, on four facets (:mod:`probe.tasks.facets`) a task replaces by
subclasses that override only what it needs:

- ``selection``: what ``--limit N`` selects (strata, units, seed; default: the first N items);
- ``paper``: the paper's procedure beside the exact scores (generations before scoring, sampling specs,
  parse requests, the sampling check; default: none);
- ``reporting``: the headline metrics, flat results, warnings, words, report section and extra files
  (default: the tables as Markdown and CSV, no headline);
- ``analyses``: units, patch pairs, representation labels and ``probe activations`` items (default: none).

Two more methods have defaults on the task itself: ``data_files(config)`` (hashed into ``provenance.json``)
and ``check_case()`` (the quick run of :func:`probe.testing.check_task`, the contract test every task,
built-in or not, passes). The hooks' names from before the facets still work (:mod:`probe.tasks.compat`).

A third-party task registers its :class:`Task` subclass (or a module with a ``TASK`` attribute) under the
entry-point group ``probe.tasks``; see ``docs/tasks.md``.
"""

from __future__ import annotations

import dataclasses
import importlib
from abc import ABCMeta, abstractmethod
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, Mapping, Sequence, TypeVar, Union

from probe.errors import ProbeError, did_you_mean
from probe.tasks.compat import OldNames, adapt
from probe.tasks.facets import Analyses, Paper, Reporting, Selection, result_row, write_tables

if TYPE_CHECKING:
    import pandas as pd

    from probe.scoring.requests import ContinuationRequest, LabelRequest, PerplexityRequest

    #: what :meth:`Task.requests` returns a list of
    Request = Union[LabelRequest, ContinuationRequest, PerplexityRequest]


__all__ = ["Aggregate", "Analyses", "CheckCase", "ConfigT", "FRAME_COLUMNS", "FRAME_COLUMNS_BY_KIND", "ItemT", "Paper",
           "Reporting", "Selection", "Task", "TaskConfig", "lazy_task_module", "result_row", "write_tables"]


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


class Task(OldNames, Generic[ConfigT, ItemT], metaclass=ABCMeta):
    """One benchmark, generic over its config and item types: ``class HBBTask(Task[HBBConfig, HBBInstance])``.

    A subclass declares ``name``, ``description`` and ``Config`` (the config type again, as a value: the
    registry and ``--set`` build it) and writes :meth:`items`, :meth:`requests` and :meth:`aggregate`; the
    optional rest is on its facets (``selection``, ``paper``, ``reporting``, ``analyses``;
    :mod:`probe.tasks.facets`). :func:`probe.testing.check_task` checks a task against this contract.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Config: ClassVar[type] = TaskConfig
    #: what ``--limit`` selects (:class:`~probe.tasks.facets.Selection`)
    selection: ClassVar[Selection] = Selection()
    #: the paper's procedure beside the exact scores (:class:`~probe.tasks.facets.Paper`)
    paper: ClassVar[Paper] = Paper()
    #: headline, results, warnings, words, report section, extra files (:class:`~probe.tasks.facets.Reporting`)
    reporting: ClassVar[Reporting] = Reporting()
    #: what the mechanism analyses read (:class:`~probe.tasks.facets.Analyses`)
    analyses: ClassVar[Analyses] = Analyses()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        adapt(cls)  # hooks written under their names from before the facets still run

    # -- the three stages every task writes --------------------------------------------------------------
    @abstractmethod
    def items(self, config: ConfigT) -> Sequence[ItemT]:
        """The benchmark's items (source files -> item objects)."""

    @abstractmethod
    def requests(self, config: ConfigT, items: Sequence[ItemT], tokenizer: Any,
                 generations: Mapping[str, str] | None = None) -> list[Request]:
        """The scorer's requests, each with ``meta`` (the item fields its record needs: category, setting, ...);
        ids unique; what shares a prompt prefix adjacent. ``generations``: ``{id: text}`` of
        ``paper.generation_requests`` (None when the task generates nothing)."""

    @abstractmethod
    def aggregate(self, config: ConfigT, records: "pd.DataFrame", items: Sequence[ItemT]) -> Aggregate:
        """The summary (JSON-ready) and tables from ``records``: one row per record, the columns of
        :data:`FRAME_COLUMNS` (and :data:`FRAME_COLUMNS_BY_KIND`) and one per ``meta`` key."""

    # -- optional, with defaults ----------------------------------------------------------------------
    def data_files(self, config: ConfigT) -> list[Path]:
        """Input files whose sha256 goes into ``provenance.json`` (a missing one skips the contract test)."""
        return []

    def check_case(self) -> CheckCase:
        """The config values and ``--limit`` of a quick run for :func:`probe.testing.check_task` (the test suite
        checks every registered task with them): a few items, on the data ``probe data fetch`` gets. Default:
        the default config, 4 items."""
        return CheckCase()

    def beside(self, module: str) -> ModuleType | None:
        """The module called ``module`` in this task's own folder (``probe.tasks.hbb.layout`` beside
        ``probe.tasks.hbb.task``), imported; None when the task's module has no package or no such module.

        The folder's conventional modules give the facets their defaults (``layout``: ``reporting.layout``;
        ``paper_check``: ``paper.check``), as ``cli`` and ``datasets`` give the registry its commands and
        data sets, so a task folder need not re-type them."""

        package = type(self).__module__.rpartition(".")[0]
        if not package:
            return None
        name = f"{package}.{module}"
        try:
            found = find_spec(name) is not None
        except (ImportError, ValueError):  # the package itself is not importable as one
            return None
        return importlib.import_module(name) if found else None

    # -- config ---------------------------------------------------------------
    def make_config(self, values: Mapping[str, Any] | None = None, source: str = "config") -> ConfigT:
        """``Config`` from a mapping; unknown keys are an error naming ``source`` and the valid keys."""
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(self.Config)}
        unknown = sorted(set(values) - known)
        if unknown:
            hints = "".join(did_you_mean(k, known) for k in unknown)
            raise ProbeError(f"{source}: unknown key(s) {', '.join(unknown)} for task {self.name!r}{hints}; "
                             f"valid keys: {', '.join(sorted(known)) or '(none)'}")

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

            return getattr(importlib.import_module(f"{package}.{module}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
