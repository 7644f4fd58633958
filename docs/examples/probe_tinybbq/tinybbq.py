"""TinyBBQ's task module: a BBQ-like benchmark that declares everything about itself (docs/examples/new_benchmark.md).

Besides the stages every task has (items, requests, aggregate), it declares on its facets
(:mod:`probe.tasks.facets`):

- ``selection.names``: what ``--limit N`` stratifies over (the items' ``category``);
- ``paper.sampling``: its paper's answer sampling (T = 0.7), scored exactly beside the probabilities;
- ``paper.check``: the paper's sampled procedure for ``probe validate sampling tinybbq`` (sample the
  answer, read the letter, Acc and bias of the sampled answers);
- ``reporting.headline_metrics``: the headline (``results.csv``, the report's first table);
- ``reporting.layout``: its section of ``probe report`` (one table of the four BBQ metrics per model, paired
  tests per item clustered by scenario).

It is registered as a plugin, under the entry-point group ``probe.tasks`` (this directory's
``pyproject.toml``)::

    [project.entry-points."probe.tasks"]
    tinybbq = "tinybbq:TinyBBQTask"
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from probe.scoring.requests import LabelRequest
from probe.tasks.base import Aggregate, Paper, Reporting, Selection, Task, TaskConfig
from probe.tasks.paper_check import PaperCheck, PromptCase, Scored, counted_label, label_ids, sampling_entry
from tinybbq_data import ITEMS

LABELS = ("a", "b", "c")
METRICS = ("acc_amb", "acc_dis", "bias_amb", "bias_dis")


@dataclass(frozen=True)
class TinyBBQConfig(TaskConfig):
    #: the paper's answer sampling (None: exact scores only)
    paper_temperature: float | None = 0.7
    paper_top_p: float = 1.0
    #: the first N items (0: all), the sampling check's sample
    n_items: int = 0


def prompt(item: Mapping[str, Any]) -> str:
    a, b, c = item["options"]
    return f"{item['context']}\n{item['question']}\na) {a}\nb) {b}\nc) {c}\nAnswer:"


def answer_records(records: Any) -> list[dict]:
    """Per record: the item's BBQ fields and the three option probabilities (a BBQ metric record)."""
    keep = ("id", "scenario", "category", "context_condition", "question_polarity", "label", "target_index",
            "unknown_index")
    return [{**{k: rec[k] for k in keep}, "probs": [float(p) for p in rec["probs"]]}
            for rec in records.to_dict("records") if rec["finite"]]


class TinyBBQSelection(Selection):
    #: ``--limit N`` stratifies over the items' category (each item's ``category`` field, the default strata)
    names = ("category",)


class TinyBBQPaper(Paper):
    def sampling(self, config: TinyBBQConfig) -> tuple[dict, ...]:
        t = config.paper_temperature
        return () if t is None else ({"temperature": float(t), "top_p": float(config.paper_top_p)},)

    def check(self) -> PaperCheck:
        return TinyBBQCheck()


class TinyBBQReporting(Reporting):
    def headline_metrics(self, config: Any, summary: Mapping[str, Any]) -> dict[str, dict[str, float]]:
        n = summary["n_amb"] + summary["n_dis"]
        return {k: {"value": summary["expected"][k], "ci_low": math.nan, "ci_high": math.nan, "n": n}
                for k in ("bias_amb", "acc_amb")}

    def layout(self) -> Any:
        from probe.reports.compare.layout import TaskLayout
        from probe.tasks.bbq.paired_units import answer_units, bbq_spec

        def paired_records(frame: Any) -> list[dict]:
            recs = answer_records(frame)
            for r in recs:
                r.update(block="TinyBBQ", cluster=r["scenario"])
            return recs

        return TaskLayout("TinyBBQ (worked example)", None, _section,
                          paired_spec=lambda _runs: bbq_spec("tinybbq", "scenario"),
                          units=lambda run: answer_units(run, paired_records))


class TinyBBQTask(Task[TinyBBQConfig, dict]):
    name = "tinybbq"
    description = "worked example: a BBQ-like benchmark added as a plugin (docs/examples/new_benchmark.md)"
    Config = TinyBBQConfig
    selection = TinyBBQSelection()
    paper = TinyBBQPaper()
    reporting = TinyBBQReporting()

    def items(self, config: TinyBBQConfig) -> list[dict]:
        return list(ITEMS[:config.n_items] if config.n_items else ITEMS)

    def requests(self, config: TinyBBQConfig, items: Sequence[dict], tokenizer: Any,
                 generations: Mapping[str, str] | None = None) -> list[LabelRequest]:
        keep = ("scenario", "category", "context_condition", "question_polarity", "label", "target_index",
                "unknown_index")
        return [LabelRequest(it["id"], prompt(it), LABELS, meta={k: it[k] for k in keep}) for it in items]

    def aggregate(self, config: TinyBBQConfig, records: Any, items: Sequence[dict]) -> Aggregate:
        import pandas as pd

        from probe.tasks.bbq.metrics import bbq_metrics

        m = bbq_metrics(answer_records(records))
        summary = {"n_items": len(items), "n_amb": m["n_amb"], "n_dis": m["n_dis"],
                   "expected": {k: m["expected"][k] for k in METRICS}}
        return Aggregate(summary, {"metrics": pd.DataFrame([summary["expected"]])})


def _section(runs: Sequence[Any], out: Any, context: Any) -> list[Any]:
    """One table: the four metrics of every run (expected counts, no CI)."""
    import pandas as pd

    from probe.reports.compare.tables import Table, fmt

    rows = [{"Model": r.label, "n amb": r.summary.get("n_amb"), "n dis": r.summary.get("n_dis"),
             **{k: fmt(r.summary.get("expected", {}).get(k)) for k in METRICS}} for r in runs]
    return [Table("tinybbq_metrics", "tinybbq", "TinyBBQ: accuracy and bias", (
        f"Task tinybbq, models {', '.join(r.label for r in runs)}. Estimator: exact expected counts (option "
        "probabilities, T = 1). n: items per condition. CI: none (see the paired comparison)."), pd.DataFrame(rows))]


def parse_letter(text: str) -> int | None:
    """The option a generation answers with: a letter a-c, optionally in parentheses, then ``)``, ``.`` or the end.

    >>> [parse_letter(t) for t in (" a) the older man", "(c)", "B.", "about", "")]
    [0, 2, 1, None, None]
    """
    m = re.match(r"\s*\(?([abcABC])\s*(?:\)|\.|$)", text)
    return LABELS.index(m.group(1).lower()) if m else None


class TinyBBQCheck(PaperCheck):
    """The paper's procedure: one answer sampled at T = 0.7, its letter read; unit = scenario."""

    max_new_tokens = 4
    unit = "scenario"
    metric = "Acc_amb, S_amb"

    def config(self, task: Any, n_prompts: int, seed: int, max_new_tokens: int) -> Any:
        return task.make_config({"n_items": n_prompts})

    def cases(self, scored: Scored) -> list[PromptCase]:
        self.tokenizer = scored.tokenizer
        self.ids = label_ids(scored.tokenizer, LABELS)
        cases = []
        for req, rec in zip(scored.requests, scored.records):
            e = sampling_entry(rec.details, scored.spec)
            probs = [float(x) for x in e["probs"]] if e else None
            mass = float(e["mass"]) if e and e.get("mass") is not None else 0.0
            ok = probs is not None and all(math.isfinite(x) for x in probs) and mass > 0
            cases.append(PromptCase(id=rec.id, unit=rec.meta["scenario"], prompt=req.prompt, options=LABELS,
                                    exact=probs if ok else None, exact_raw=[x * mass for x in probs] if ok else None,
                                    exact_mass=mass, meta=dict(rec.meta)))
        return cases

    def parse(self, case: PromptCase, text: str) -> int | None:
        return parse_letter(text)

    def counted(self, case: PromptCase, text: str) -> bool:
        return counted_label(self.tokenizer, text, self.ids)

    def metrics(self, rows: list[tuple[str, PromptCase, Any]]) -> dict[str, float]:
        from probe.tasks.bbq.metrics import bbq_metrics

        keep = ("context_condition", "question_polarity", "label", "target_index", "unknown_index")
        recs = [{**{k: c.meta[k] for k in keep}, "probs": [float(x) for x in d]} for _, c, d in rows if d is not None]
        m = bbq_metrics(recs)["expected"] if recs else {"acc_amb": math.nan, "bias_amb": math.nan}
        return {"Acc_amb": m["acc_amb"], "S_amb": m["bias_amb"], "n": len(recs)}
