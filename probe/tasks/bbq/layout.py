"""BBQ's section of a comparison report: per answer format and estimator, category x model tables and a
figure, paired units per item clustered by template instance
(:func:`layout`, the task's ``reporting.layout()``)."""

from __future__ import annotations

from typing import Any

from probe.reports.compare.layout import TaskLayout
from probe.tasks.bbq.paired_units import answer_units, bbq_spec
from probe.tasks.bbq.records import answer_records
from probe.tasks.bbq.sections import FORMAT_WORDS, bbq_section


__all__ = ["layout", "paired_records"]


def layout() -> Any:
    """The :class:`~probe.reports.compare.layout.TaskLayout` of ``bbq``."""

    return TaskLayout("BBQ", 1, lambda runs, out, _ctx: bbq_section(runs, out),
                      paired_spec=lambda _runs: bbq_spec("bbq", "template instance"),
                      units=lambda run: answer_units(run, paired_records))


def paired_records(frame: Any) -> list[dict]:
    """Answer records of a BBQ run for paired tests: block = answer format; cluster = template instance."""

    recs, _ = answer_records(frame)
    answers = frame.set_index("id")["answers"].to_dict() if "answers" in frame else {}
    for r in recs:
        opts = "|".join(sorted(str(a) for a in answers.get(r["id"], [])))
        r.update(block=FORMAT_WORDS.get(r["answer_format"], f"{r['answer_format']} format"),
                 category=r["category"], cluster=f"{r['category']}|{r['template_id']}|{opts}")
    return recs
