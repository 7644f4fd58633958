"""``bbq``: the original BBQ (Parrish et al., 2022), every category the user fetched, 3-way options.

Flow: BBQ's generated JSONL (``<bbq>/data/<Category>.jsonl``) or, for a
category without it, its templates (``<bbq>/templates/<Category>.csv``,
:mod:`probe.tasks.bbq.templates`) -> the ImplicitBBQ paper's zero-shot (or safety) prompt
with BBQ's context as written -> the three options scored at once:
``labels`` (listed under 1/2/3, next-token label probabilities) and/or
``oneword`` (each answer's words by continuation log-likelihood, Unknown =
the total over its paraphrases) -> BBQ's accuracy and bias scores per
category, argmax and expected, with bootstrap CIs.

Rows of the upstream JSONL whose stereotyped target is not exactly one named
answer (BBQ's older releases tag both "tattoos" and "no tattoos" with one
group) are skipped with a warning naming each line, and counted in the
summary's ``n_skipped`` (``strict: true`` makes them an error).

    probe run bbq --model smollm2 --limit 12 --output runs/bbq
    probe run bbq --set categories='[Age, Religion]' --set answer_formats='[labels, oneword]'

>>> from probe.tasks import get
>>> cfg = get("bbq").make_config({"categories": ["Age"], "per_category": 2})
>>> cfg.categories, cfg.answer_formats
(('Age',), ('labels',))
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from probe.data.paths import dataset_dir
from probe.errors import InputError, ProbeError
from probe.io import no_markup, stable_hash, write_atomic
from probe.metrics.mass import answering, mass_summary
from probe.scoring.requests import ContinuationRequest, LabelRequest
from probe.tasks.base import Aggregate, Analyses, CheckCase, Reporting, Selection, Task, TaskConfig, write_tables
from probe.tasks.base import result_row
from probe.tasks.bbq.capture import capture_line
from probe.tasks.bbq.data import load_bbq_jsonl
from probe.tasks.bbq.items import BBQItem
from probe.tasks.bbq.metrics import METRIC_NOTES, grouped_bbq_metrics
from probe.tasks.bbq.prompts import prepare
from probe.tasks.bbq.records import answer_records
from probe.tasks.bbq.reporting import category_table, report_markdown, template_built
from probe.tasks.bbq.templates import expand_templates

#: BBQ's 11 categories, in the upstream repository's order.
CATEGORIES = (
    "Age", "Disability_status", "Gender_identity", "Nationality", "Physical_appearance", "Race_ethnicity",
    "Race_x_gender", "Race_x_SES", "Religion", "SES", "Sexual_orientation",
)
SOURCES = ("auto", "jsonl", "templates")
STRATEGIES = ("zero_shot", "safety")
FORMATS = ("labels", "oneword")


@dataclass(frozen=True)
class BBQConfig(TaskConfig):
    """What the ``bbq`` task scores.

    ``categories``: BBQ categories (``null``: every one found in the data
    directory); ``source``: ``auto`` (the generated JSONL when the category has
    one, else its templates), ``jsonl`` or ``templates``; ``answer_formats``:
    ``labels`` and/or ``oneword``; ``strategy``: the paper's ``zero_shot`` or
    ``safety`` system prompt; ``per_category``: template instances per category
    (a seeded sample of whole instances: all 4 condition x polarity variants;
    ``null``: all); ``lexical``: template expansion of lexical variants
    (``first`` or ``all``); ``strict``: upstream rows without a single target
    are an error instead of skipped; ``bbq_dir``: the data directory (default
    ``$PROBE_DATA/bbq``).
    """

    categories: tuple[str, ...] | None = None
    source: str = "auto"
    answer_formats: tuple[str, ...] = ("labels",)
    strategy: str = "zero_shot"
    per_category: int | None = None
    lexical: str = "first"
    chat_template: bool = True
    strict: bool = False
    seed: int = 0
    n_boot: int = 1000
    bbq_dir: str | None = None
    mass_floor: float = 0.1  # items whose answers carry less probability are "not answering"

    def __post_init__(self) -> None:
        if self.categories is not None:
            object.__setattr__(self, "categories", _names(self.categories, "categories"))
            unknown = [c for c in self.categories if c not in CATEGORIES]
            if unknown:
                raise ValueError(f"unknown BBQ categor(y/ies) {unknown}; choose from {', '.join(CATEGORIES)}")
        object.__setattr__(self, "answer_formats", _names(self.answer_formats, "answer_formats"))
        for name, value, allowed in (("source", self.source, SOURCES), ("strategy", self.strategy, STRATEGIES),
                                     ("lexical", self.lexical, ("first", "all"))):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        bad = [f for f in self.answer_formats if f not in FORMATS]
        if bad or not self.answer_formats:
            raise ValueError(f"answer_formats must be a non-empty list of {', '.join(FORMATS)}, got "
                             f"{list(self.answer_formats)}")
        if self.per_category is not None and (not isinstance(self.per_category, int) or self.per_category < 1):
            raise ValueError(f"per_category must be a positive integer or null, got {self.per_category!r}")


def _names(value: Any, field: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{field} must be a list of names, got {value!r}")
    return tuple(value)


class BBQItems(list):
    """The loaded (or selected) items, with what loading skipped and where each category came from."""

    skipped: list = []
    sources: dict[str, str] = {}

    @classmethod
    def of(cls, items: Sequence[Any], skipped: list, sources: dict[str, str]) -> "BBQItems":
        out = cls(items)
        out.skipped, out.sources = list(skipped), dict(sources)
        return out


def unit_key(item: Any) -> str:
    """One template instance: its 4 condition x polarity variants (and the swapped-names fill)."""
    return f"{item.category}|{item.template_id}|{'|'.join(sorted(item.options))}"


def request_id(item: Any, answer_format: str) -> str:
    return f"{item.id}|{answer_format}"


class BBQSelection(Selection):
    """``--limit N``: N items round-robin over the categories, whole template instances."""

    names = ("category",)
    unit_name = "template instance (its condition x polarity variants, both name orders)"

    def select(self, config: BBQConfig, items: Sequence[BBQItem], limit: int | None) -> BBQItems:
        kept = super().select(config, items, limit)
        return BBQItems.of(kept, getattr(items, "skipped", []), getattr(items, "sources", {}))

    def units(self, config: BBQConfig, items: Sequence[BBQItem]) -> list:
        return [unit_key(it) for it in items]


class BBQReporting(Reporting):
    """The five BBQ metrics per answer format, category and estimator; report.md; a section per format."""

    metric_notes = METRIC_NOTES
    #: the report's words for the metrics and answer formats
    terms = {"bias_amb": "bias score, ambiguous contexts", "bias_dis": "bias score, disambiguated contexts",
             "acc_amb": "accuracy, ambiguous contexts", "acc_dis": "accuracy, disambiguated contexts",
             "acc_dis_all": "accuracy, all disambiguated contexts",
             "expected": "expected (exact probabilities)", "argmax": "argmax (the most likely answer)",
             "oneword": "one-word answer", "labels": "numbered options"}

    def headline_metrics(self, config: BBQConfig, summary: Mapping[str, Any]) -> dict[str, dict[str, float]]:
        return {f"{fmt}.{k}": v for fmt, f in summary["by_format"].items()
                for k, v in bbq_headline(f["by_category"]["all"]["expected"]).items()}

    def results(self, config: BBQConfig, summary: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Per answer format, category (and ``all``) and estimator: the five metrics; headline: the
        ambiguous and disambiguated bias and both disambiguated accuracies over all items (expected)."""

        rows = []
        for k, (fmt, f) in enumerate(summary["by_format"].items()):
            for cat, m in f["by_category"].items():
                for version in ("expected", "argmax"):
                    for name, v in bbq_headline(m[version]).items():
                        main = k == 0 and cat == "all" and version == "expected" and name != "acc_amb"
                        rows.append(result_row(cat, f"{name}" if len(summary["by_format"]) == 1 else f"{fmt}.{name}",
                                               version, v["value"], v["ci_low"], v["ci_high"], v["n"], main,
                                               v.get("clusters")))
        return rows

    def warnings(self, summary: Mapping[str, Any]) -> list[str]:
        """Categories expanded from BBQ's templates (no released JSONL found) are not the released item set."""

        built = template_built(summary)
        return [f"template-built categories: {', '.join(built)} were expanded from BBQ's templates, not read "
                "from the released JSONL."] if built else []

    def write(self, config: BBQConfig, result: Aggregate, output: Path) -> None:
        write_tables(result.tables, output)
        write_atomic(output / "report.md", no_markup(report_markdown(result.summary, result.tables)))


class BBQAnalyses(Analyses):
    """The template instance is the unit; its two name orders are the A <-> B pairs; BBQ-family capture lines."""

    def units(self, config: BBQConfig, records: Any, items: Sequence[BBQItem]) -> list[str]:
        units = {it.id: unit_key(it) for it in items}
        return [units.get(i, i) for i in records["item_id"]]

    def patch_pairs(self, config: BBQConfig, records: Any, items: Sequence[BBQItem]) -> list[tuple[str, str, str]]:
        return order_pairs(records, self.units(config, records, items))

    def capture_item(self, line: Mapping[str, Any], tokenizer: Any, *, chat_template: bool = True,
                     strategy: str = "zero_shot") -> Any:
        """A BBQ-family item line (BBQ, ImplicitBBQ, BharatBBQ items) rendered by the BBQ prompt with labelled
        options (:mod:`probe.tasks.bbq.capture`)."""

        return capture_line(line, tokenizer, chat_template, strategy)


class BBQTask(Task[BBQConfig, BBQItem]):
    name = "bbq"
    description = "BBQ (Parrish et al. 2022): all 11 categories from JSONL or templates, 3-way options"
    Config = BBQConfig
    selection = BBQSelection()
    reporting = BBQReporting()
    analyses = BBQAnalyses()

    def check_case(self) -> CheckCase:
        """A quick run for :func:`probe.testing.check_task`: 3 item(s) of a small config."""
        return CheckCase({"categories": ["Age"], "answer_formats": ["labels", "oneword"], "n_boot": 10}, 3)

    def items(self, config: BBQConfig) -> BBQItems:
        """Every item of the configured categories, in a stratified order (see :class:`BBQSelection`)."""

        root = self._root(config)
        skipped: list = []
        sources: dict[str, str] = {}
        per_category: dict[str, list] = {}
        for category in self._categories(config, root):
            jsonl, csv = root / "data" / f"{category}.jsonl", root / "templates" / f"{category}.csv"
            use_jsonl = config.source == "jsonl" or (config.source == "auto" and jsonl.is_file())
            if use_jsonl:
                rows: list = []
                per_category[category] = load_bbq_jsonl(jsonl, skipped=None if config.strict else rows)
                skipped += rows
            else:
                per_category[category] = expand_templates(category, root / "templates", lexical=config.lexical)
            sources[category] = "jsonl" if use_jsonl else "templates"
            if not per_category[category]:
                raise InputError(jsonl if use_jsonl else csv, None, None, "no usable BBQ items")
        if skipped:
            shown = "; ".join(str(s) for s in skipped[:10])
            more = f" (and {len(skipped) - 10} more, listed in summary.json)" if len(skipped) > 10 else ""
            warnings.warn(f"bbq: skipped {len(skipped)} row(s) whose stereotyped target is not exactly one named "
                          f"answer: {shown}{more}", stacklevel=2)
        ordered = _stratified(per_category, config.per_category, config.seed)
        return BBQItems.of(ordered, skipped, sources)

    def requests(self, config: BBQConfig, items: Sequence[BBQItem], tokenizer: Any,
                 generations: Mapping[str, str] | None = None) -> list:

        sources = getattr(items, "sources", {})
        out = []
        for it in items:
            for fmt in config.answer_formats:
                prep = prepare(it, tokenizer, config.strategy, fmt, (), config.chat_template)
                meta = {
                    "kind": fmt, "item_id": it.id, "answer_format": fmt, "strategy": config.strategy,
                    "category": it.category, "source": sources.get(it.category, it.source),
                    "context_condition": it.context_condition, "question_polarity": it.question_polarity,
                    "label": it.label, "target_index": it.target_index, "unknown_index": it.unknown_index,
                    "template_id": it.template_id, "example_id": it.metadata.get("example_id"),
                    "answers": list(it.options), "owner": list(prep.owner),
                }
                # an instance's variants share its context: one group keeps them in one chunk (prefix sharing)
                cls, key = (LabelRequest, "labels") if fmt == "labels" else (ContinuationRequest, "options")
                out.append(cls(id=request_id(it, fmt), prompt=prep.prompt, group=f"{fmt}|{unit_key(it)}",
                               space=prep.space, meta=meta, **{key: prep.texts}))
        return out

    def aggregate(self, config: BBQConfig, records: Any, items: Sequence[BBQItem]) -> Aggregate:
        recs, n_nonfinite = answer_records(records)
        cluster = {it.id: unit_key(it) for it in items}
        for r in recs:
            r["cluster"] = cluster.get(r["item_id"], r["item_id"])
        skipped = list(getattr(items, "skipped", []))
        by_format: dict[str, Any] = {}
        def metrics(rs: list[dict]) -> dict[str, Any]:
            return grouped_bbq_metrics(rs, by=("category",), ci=config.n_boot > 0, n_boot=max(config.n_boot, 1),
                                       seed=config.seed, cluster_key="cluster")

        for fmt in config.answer_formats:
            mine = [r for r in recs if r["answer_format"] == fmt]
            masses = [r["mass"] for r in mine]
            by_format[fmt] = {
                "by_category": metrics(mine),
                "mean_mass": sum(masses) / len(masses) if masses else math.nan,
                "mass": mass_summary(masses, config.mass_floor),
                # the same metrics without the items whose scored answers carry less than the floor
                "answering_only": metrics([r for r in mine if answering(r["mass"], config.mass_floor)]),
                "n_records": len(mine),
            }
        summary = {
            "by_format": by_format,
            "n_items": len(items),
            "n_nonfinite": n_nonfinite,
            "n_skipped": len(skipped),
            "skipped": [vars(s) for s in skipped],
            "sources": dict(getattr(items, "sources", {})),
            # categories expanded from BBQ's templates, not read from the released JSONL
            "template_built": sorted(c for c, s in getattr(items, "sources", {}).items() if s == "templates"),
            "accuracy_denominators": {"acc_dis_all": "correct / all disambiguated items (BBQ paper, lm-eval)",
                                      "acc_dis": "correct / disambiguated items answered with a person "
                                                 "(ImplicitBBQ)"},
            "strategy": config.strategy,
            "ci": {"method": "percentile bootstrap, 95%", "n_boot": config.n_boot,
                   "unit": "template instance (its condition x polarity variants and the swapped-name fill)"},
        }
        return Aggregate(summary, {f"by_category_{fmt}": category_table(v["by_category"])
                                   for fmt, v in by_format.items()})

    def data_files(self, config: BBQConfig) -> list[Path]:
        root = self._root(config)
        files = []
        for category in self._categories(config, root):
            for path in (root / "data" / f"{category}.jsonl", root / "templates" / f"{category}.csv"):
                if path.is_file():
                    files.append(path)
        return files

    # -- helpers --------------------------------------------------------------
    @staticmethod
    def _root(config: BBQConfig) -> Path:
        if config.bbq_dir:
            root = Path(config.bbq_dir)
            if not root.is_dir():
                raise ProbeError(f"bbq_dir {root} is not a directory")
            return root

        return dataset_dir("bbq")

    @staticmethod
    def _categories(config: BBQConfig, root: Path) -> list[str]:
        def found(c: str) -> bool:
            jsonl, csv = (root / "data" / f"{c}.jsonl").is_file(), (root / "templates" / f"{c}.csv").is_file()
            return {"auto": jsonl or csv, "jsonl": jsonl, "templates": csv}[config.source]

        if config.categories is None:
            cats = [c for c in CATEGORIES if found(c)]
            if not cats:
                raise ProbeError(f"bbq: no BBQ category found under {root} (data/*.jsonl or templates/*.csv); "
                                 f"fetch it with `probe data fetch bbq`")
            return cats
        missing = [c for c in config.categories if not found(c)]
        if missing:
            where = {"auto": "data/<C>.jsonl or templates/<C>.csv", "jsonl": "data/<C>.jsonl",
                     "templates": "templates/<C>.csv"}[config.source]
            raise ProbeError(f"bbq: categor(y/ies) {missing} not found under {root} ({where})")
        return list(config.categories)


def _stratified(per_category: Mapping[str, Sequence[Any]], per_cat: int | None, seed: int) -> list:
    """Items in round-robin order over categories, one template instance at a time.

    Instances are shuffled per category by a process-independent hash of
    (seed, instance), so any prefix is a stratified sample and smaller samples
    are prefixes of larger ones.
    """

    queues = []
    for category, items in per_category.items():
        units: dict[str, list] = defaultdict(list)
        for it in items:
            units[unit_key(it)].append(it)
        order = sorted(units, key=lambda k: (stable_hash(seed, k), k))
        queues.append([units[k] for k in order[:per_cat]])
    out = []
    for i in range(max((len(q) for q in queues), default=0)):
        for q in queues:
            if i < len(q):
                out += q[i]
    return out


def order_pairs(records: Any, units: Sequence[str], cell: Sequence[str] = ("answer_format",),
                fill: Sequence[str] = ("answers",)) -> list[tuple[str, str, str]]:
    """Records of one unit, condition, polarity (and ``cell`` fields) whose ``fill`` differs (the answers in
    another order: group A first vs group B first): each such pair, both ways, kind ``A<->B``."""
    cells: dict[tuple, list[tuple[str, tuple]]] = defaultdict(list)
    keys = ["context_condition", "question_polarity", *cell]
    for k, row in enumerate(records[["id", *keys, *fill]].itertuples(index=False)):
        row = tuple(row)
        key = (units[k], *row[1:1 + len(keys)])
        cells[key].append((row[0], tuple(map(str, row[1 + len(keys):]))))
    out = []
    for rows in cells.values():
        for i, (a, oa) in enumerate(rows):
            for b, ob in rows[i + 1:]:
                if oa != ob:
                    out += [(a, b, "A<->B"), (b, a, "A<->B")]
    return out


def bbq_headline(v: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """``bias_amb``/``bias_dis``/``acc_amb``/``acc_dis``/``acc_dis_all`` of one version (``expected``/``argmax``) of a
    :func:`~probe.tasks.bbq.metrics.bbq_metrics` result, with its ``ci`` and ``n_amb``/``n_dis``."""
    ci = v.get("ci", {})
    return {k: {"value": v[k], "ci_low": ci.get(k, [math.nan] * 2)[0], "ci_high": ci.get(k, [math.nan] * 2)[1],
                "n": v.get("n_amb" if "amb" in k else "n_dis", math.nan),
                "clusters": v.get("n_clusters_amb" if "amb" in k else "n_clusters_dis")}
            for k in ("bias_amb", "bias_dis", "acc_amb", "acc_dis", "acc_dis_all") if k in v}
