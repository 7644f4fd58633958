"""The probe labels of the representations study (``probe analyze representations``), from an ImplicitBBQ item and its
record: :data:`LABELS`, returned by :meth:`ImplicitBBQAnalyses.representation_labels
<probe.tasks.implicitbbq.task.ImplicitBBQAnalyses.representation_labels>`.

>>> from types import SimpleNamespace as NS
>>> implicit = NS(context_kind="implicit", metadata={"group1": "old", "group2": "young", "person1": "Person B",
...                                                  "cue1": "has wrinkles", "cue2": "has smooth skin"})
>>> first_group(implicit), lexical_key(implicit)
('young', 'has wrinkles|has smooth skin')
"""

from __future__ import annotations

from typing import Any, Mapping

from probe.tasks.representation import RepresentationLabels


def first_group(item: Any) -> str:
    """The group of the person described first: slot 1 (explicit) or Person A's cue (implicit)."""
    m = item.metadata
    if item.context_kind == "explicit":
        return m["group1"]
    return m["group1"] if m.get("person1") == "Person A" else m["group2"]


def lexical_key(item: Any) -> str:
    """The surface words that carry the identity (group words or cue phrases): the control-task key."""
    m = item.metadata
    if item.context_kind == "explicit":
        return f"{m.get('name1')}|{m.get('name2')}"
    return f"{m.get('cue1')}|{m.get('cue2')}"


def chosen_option(record: Mapping[str, Any]) -> int | None:
    """The item option the record's argmax label names (``owner[pred_index]``; None when not finite)."""
    p = record.get("pred_index")
    if p is None or p != p or not record.get("finite", True):
        return None
    owner = record.get("owner")
    return int(owner[int(p)]) if owner is not None and len(owner) > int(p) else int(p)


def consistency(record: Mapping[str, Any]) -> float:
    """1 if the chosen answer is stereotype-consistent, 0 if not, NaN if it is Unknown (or not finite).

    >>> consistency({"pred_index": 1, "owner": [2, 0, 1], "target_index": 0, "unknown_index": 2,
    ...              "question_polarity": "neg"})
    1.0
    """
    chosen = chosen_option(record)
    if chosen is None or chosen == record["unknown_index"]:
        return float("nan")
    other = 3 - record["target_index"] - record["unknown_index"]
    return float(chosen == (record["target_index"] if record["question_polarity"] == "neg" else other))


def stereotyped_labels(record: Mapping[str, Any]) -> list[int]:
    """The label indices whose option is the stereotyped answer (``owner[j] == target_index``)."""
    owner = record.get("owner") or list(range(len(record.get("options") or ())))
    return [j for j, o in enumerate(owner) if o == record.get("target_index")]


#: what the representations study reads from an ImplicitBBQ run: the group and framing of each item, explicit ->
#: implicit transfer, stereotype-consistency of the chosen answer
LABELS = RepresentationLabels(
    group=first_group, lexical_key=lexical_key, consistency=consistency, stereotyped_labels=stereotyped_labels,
    framing="context_kind", transfer=("explicit", "implicit"),
    how_to_run="probe run implicitbbq --set answer_formats=[labels] --capture 'blocks.*.hook_resid_post@last'")
