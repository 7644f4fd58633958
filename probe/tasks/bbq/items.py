"""The one item schema shared by BBQ, BharatBBQ and ImplicitBBQ.

A :class:`BBQItem` is a three-option question: two people (or their cues) and an
Unknown option. ``label`` is the correct option, ``target_index`` the option
naming the stereotyped target t, ``unknown_index`` the Unknown option; the
metrics in :mod:`probe.tasks.bbq.metrics` need nothing else.

>>> it = BBQItem(id="x", source="bbq", category="Age", context="A and B met.",
...              question="Who forgot?", options=("A", "B", "Unknown"), label=2,
...              target_index=0, unknown_index=2, question_polarity="neg",
...              context_condition="ambig")
>>> BBQItem.from_json(it.to_json()) == it
True
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable, Mapping

from probe.io import write_atomic


__all__ = ["BBQItem", "SETTINGS", "CONTEXT_KINDS", "setting_name", "write_items"]

#: ImplicitBBQ context kinds (seed section 4): explicit (BBQ as written), implicit (cues),
#: neutral control (inert cues) and no-characteristics control (no background).
CONTEXT_KINDS = ("explicit", "implicit", "neutral", "nochar")

#: The paper's 12 settings, eq. (3): {C_exp_amb, C_exp_dis, C_imp_amb, C_imp_dis, C_neu, C_noc}
#: x {Q_neg, Q_nonneg}. A control setting holds both ambiguous and disambiguated contexts
#: (its Table 2 columns report accuracy for both); ``context_condition`` tells them apart.
SETTINGS = tuple(
    f"{kind}_{pol}"
    for kind in ("explicit_amb", "explicit_dis", "implicit_amb", "implicit_dis", "neutral", "nochar")
    for pol in ("neg", "nonneg")
)


def setting_name(context_kind: str, context_condition: str, question_polarity: str) -> str:
    """``("implicit", "ambig", "neg") -> "implicit_amb_neg"``; controls: ``"neutral_neg"``."""
    cond = {"ambig": "amb", "disambig": "dis"}[context_condition]
    if context_kind in ("neutral", "nochar"):
        name = f"{context_kind}_{question_polarity}"
    else:
        name = f"{context_kind}_{cond}_{question_polarity}"
    if name not in SETTINGS:
        raise ValueError(f"no ImplicitBBQ setting {name!r}; settings are {', '.join(SETTINGS)}")
    return name


@dataclass(frozen=True)
class BBQItem:
    """One BBQ-style question with three options.

    Fields
    ------
    id: unique id (stable across runs: used for resuming and joins).
    source: ``"bbq"``, ``"bbq-templates"``, ``"bharatbbq"`` or ``"implicitbbq"``.
    category: BBQ category (``Age``, ``Nationality``, ``Caste`` ...) or ImplicitBBQ dimension
        (``age``, ``gender``, ``region``, ``religion``, ``ses``, ``caste``).
    context, question: the text shown to the model. ImplicitBBQ items keep the
        ``Background:`` cue sentences in ``background`` (empty when none).
    options: the three answer texts; ``options[unknown_index]`` is the Unknown answer.
    label: index of the correct answer.
    target_index: index of the stereotyped target's answer.
    unknown_index: index of the Unknown answer.
    question_polarity: ``"neg"`` / ``"nonneg"``.
    context_condition: ``"ambig"`` / ``"disambig"``.
    context_kind: ``"explicit"`` (BBQ as written), ``"implicit"``, ``"neutral"``, ``"nochar"``.
    setting: one of :data:`SETTINGS` for ImplicitBBQ items, else ``""``.
    answer_info: BBQ's ``answer_info`` (``{"ans0": [text, group], ...}``).
    stereotyped_groups: BBQ's ``additional_metadata.stereotyped_groups``.
    template_id: the source template (category + question index [+ version]);
        few-shot demonstrations and cross-validation never mix items of one template.
    background: cue sentences (ImplicitBBQ), ``""`` otherwise.
    group_words: for each option, the word(s) that name the person in the context
        (``("grandfather", "grandson", "")``): scored as answer texts in explicit contexts.
    metadata: anything else (source ids, cue ids, person/group assignment ...).
    """

    id: str
    source: str
    category: str
    context: str
    question: str
    options: tuple[str, str, str]
    label: int
    target_index: int
    unknown_index: int
    question_polarity: str
    context_condition: str
    context_kind: str = "explicit"
    setting: str = ""
    answer_info: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)
    stereotyped_groups: tuple[str, ...] = ()
    template_id: str = ""
    background: str = ""
    group_words: tuple[str, str, str] = ("", "", "")
    metadata: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)

    def __post_init__(self) -> None:
        # Coerce lists read back from JSON to tuples so equality round-trips.
        object.__setattr__(self, "options", tuple(self.options))
        object.__setattr__(self, "stereotyped_groups", tuple(self.stereotyped_groups))
        object.__setattr__(self, "group_words", tuple(self.group_words))
        if len(self.options) != 3:
            raise ValueError(f"item {self.id!r}: field 'options' must have 3 answers, got {len(self.options)}")
        for name in ("label", "target_index", "unknown_index"):
            v = getattr(self, name)
            if not isinstance(v, int) or not 0 <= v <= 2:
                raise ValueError(f"item {self.id!r}: field {name!r} must be 0, 1 or 2, got {v!r}")
        if self.target_index == self.unknown_index:
            raise ValueError(f"item {self.id!r}: target_index equals unknown_index")
        if self.question_polarity not in ("neg", "nonneg"):
            raise ValueError(f"item {self.id!r}: field 'question_polarity' is {self.question_polarity!r}")
        if self.context_condition not in ("ambig", "disambig"):
            raise ValueError(f"item {self.id!r}: field 'context_condition' is {self.context_condition!r}")
        if self.context_kind not in CONTEXT_KINDS:
            raise ValueError(f"item {self.id!r}: field 'context_kind' is {self.context_kind!r}")

    @property
    def non_target_index(self) -> int:
        """The option that is neither the target nor Unknown."""
        return 3 - self.target_index - self.unknown_index

    def metric_record(self) -> dict[str, Any]:
        """The fields :func:`probe.tasks.bbq.metrics.bbq_metrics` needs (add ``pred_index``/``probs``)."""
        return {
            "id": self.id,
            "category": self.category,
            "setting": self.setting,
            "context_kind": self.context_kind,
            "context_condition": self.context_condition,
            "question_polarity": self.question_polarity,
            "label": self.label,
            "target_index": self.target_index,
            "unknown_index": self.unknown_index,
        }

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("options", "stereotyped_groups", "group_words"):
            d[k] = list(d[k])
        return d

    def to_json(self) -> str:
        """One JSON line (no newline)."""
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BBQItem":
        known = {f.name for f in fields(cls) if f.init}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown BBQItem field(s): {sorted(unknown)}")
        return cls(**dict(d))

    @classmethod
    def from_json(cls, line: str) -> "BBQItem":
        return cls.from_dict(json.loads(line))


def write_items(items: Iterable[BBQItem], output: str) -> None:
    """Write items as JSON lines (:meth:`BBQItem.to_dict` plus ``dimension`` = the category), atomically."""

    lines = []
    for it in items:
        d = it.to_dict()
        d["dimension"] = it.category
        lines.append(json.dumps(d, ensure_ascii=False) + "\n")
    write_atomic(output, "".join(lines))
