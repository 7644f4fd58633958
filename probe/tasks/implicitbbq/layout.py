"""ImplicitBBQ's section of a comparison report: Table 2 (exact and paper-equivalent), Tables 5-7, Figures 3
and 4 with several models, paired units per item clustered by template x context
(:func:`layout`, the task's ``reporting.layout()``)."""

from __future__ import annotations

from typing import Any

from probe.reports.compare.layout import TaskLayout
from probe.reports.headline import phrase
from probe.tasks.bbq.paired_units import answer_units, bbq_spec
from probe.tasks.implicitbbq.sections import implicitbbq_section
from probe.tasks.implicitbbq.summary import metric_records
from probe.tasks.implicitbbq.terms import TERMS

#: the resampling unit of the paired tests
CLUSTER = "template × context (a context's 4 condition × polarity variants)"


def paired_records(frame: Any) -> list[dict]:
    """Answer records of an ImplicitBBQ run for paired tests: block = strategy and format, category =
    dimension x context kind, cluster = one context (its 4 condition x polarity variants) of one template."""

    recs, _ = metric_records(frame)
    for r in recs:  # labels in the paper's words: "zero-shot, one-word answer", "age, implicit cues"
        r.update(block=phrase(f"{r['strategy']}|{r['answer_format']}", TERMS),
                 category=f"{r['dimension']}, {TERMS.get(r['context_kind'], r['context_kind'])}",
                 cluster=f"{r['template_id']}|{str(r['item_id']).rsplit('-', 2)[0]}")
    return recs


def layout() -> Any:
    """The :class:`~probe.reports.compare.layout.TaskLayout` of ``implicitbbq``."""

    return TaskLayout("ImplicitBBQ", 0, lambda runs, out, _ctx: implicitbbq_section(runs, out),
                      paired_spec=lambda _runs: bbq_spec("implicitbbq", CLUSTER),
                      units=lambda run: answer_units(run, paired_records))
