"""BharatBBQ (caste) -> :class:`~probe.tasks.bbq.items.BBQItem`.

Two sources in ``<data>/bharatbbq/``:

* ``Caste_examples.csv``: the released instances (``Qid, Context_type (amb/disamb),
  Context, Question, Question_polarity (neg/non-neg), Option1..3, Label (1-based),
  Target (1-based option of the stereotyped group), Pairing, Proper_Noun, id``);
  :func:`load_bharatbbq_examples`.
* ``Caste_templates.csv``: BBQ-layout templates (``Question_negative``,
  ``Proper Nouns``, ``Pairing``); :func:`expand_bharatbbq_templates` expands them
  with the BBQ expander. ImplicitBBQ's caste dimension is built from these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pandas as pd

from probe.data.paths import dataset_dir
from probe.tasks.bbq.data import UNKNOWN_OPTIONS, group_key
from probe.tasks.bbq.templates import fill_to_items, fills_for_row, read_templates
from probe.tasks.bbq.items import BBQItem
from probe.errors import InputError

__all__ = ["load_bharatbbq_examples", "expand_bharatbbq_templates", "bharatbbq_template_rows"]

_UNKNOWN_KEYS = {group_key(u) for u in UNKNOWN_OPTIONS} | {group_key("not enough info"), group_key("can't answer")}


def _dir(data_dir: str | Path | None) -> Path:
    if data_dir is not None:
        return Path(data_dir)

    return dataset_dir("bharatbbq")


def load_bharatbbq_examples(data_dir: str | Path | None = None) -> list[BBQItem]:
    """Load ``Caste_examples.csv`` (3,864 instances in the released file)."""
    path = _dir(data_dir) / "Caste_examples.csv"
    if not path.is_file():
        raise InputError(path, None, None, "file not found")
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    need = ("Qid", "Context_type", "Context", "Question", "Question_polarity", "Option1", "Option2",
            "Option3", "Label", "Target", "id")
    for col in need:
        if col not in df.columns:
            raise InputError(path, None, col, "column missing")
    items = []
    for i, rec in enumerate(df.to_dict("records")):
        line = i + 2  # header is line 1
        options = (rec["Option1"], rec["Option2"], rec["Option3"])
        unknown = [j for j, o in enumerate(options) if group_key(o) in _UNKNOWN_KEYS]
        if len(unknown) != 1:
            raise InputError(path, line, "Option1..3", f"expected one Unknown option, got {list(options)}")
        try:
            label, target = int(rec["Label"]) - 1, int(rec["Target"]) - 1
        except ValueError:
            raise InputError(path, line, "Label/Target", "not an integer") from None
        cond = {"amb": "ambig", "disamb": "disambig"}.get(rec["Context_type"])
        pol = {"neg": "neg", "non-neg": "nonneg", "nonneg": "nonneg"}.get(rec["Question_polarity"])
        if cond is None or pol is None:
            raise InputError(path, line, "Context_type/Question_polarity",
                             f"unexpected values {rec['Context_type']!r}/{rec['Question_polarity']!r}")
        answer_info = {f"ans{j}": ([o, "unknown"] if j == unknown[0] else [o, o]) for j, o in enumerate(options)}
        try:
            items.append(BBQItem(
                id=f"bharatbbq-{rec['id']}", source="bharatbbq", category="Caste", context=rec["Context"],
                question=rec["Question"], options=options, label=label, target_index=target,
                unknown_index=unknown[0], question_polarity=pol, context_condition=cond,
                answer_info=answer_info, stereotyped_groups=(options[target],),
                template_id=f"bharatbbq:Caste:{rec['Qid']}",
                group_words=tuple("" if j == unknown[0] else o for j, o in enumerate(options)),
                metadata={k: rec.get(k, "") for k in ("Qid", "Pairing", "Proper_Noun", "id")}))
        except ValueError as exc:
            raise InputError(path, line, None, str(exc)) from None
    return items


def bharatbbq_template_rows(data_dir: str | Path | None = None):
    """The template rows of ``Caste_templates.csv`` (see :class:`probe.tasks.bbq.templates.TemplateRow`)."""
    path = _dir(data_dir) / "Caste_templates.csv"
    if not path.is_file():
        raise InputError(path, None, None, "file not found")
    return read_templates(path, source="bharatbbq", category="Caste")


def expand_bharatbbq_templates(data_dir: str | Path | None = None,
                               lexical: Literal["all", "first"] = "all") -> list[BBQItem]:
    """All instances of ``Caste_templates.csv`` (both Pairing rows give both name orders)."""
    items: list[BBQItem] = []
    for row in bharatbbq_template_rows(data_dir):
        for fill in fills_for_row(row, lexical=lexical):
            items.extend(fill_to_items(fill))
    return items
