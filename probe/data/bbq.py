"""BBQ's generated JSONL -> :class:`~probe.data.items.BBQItem`, and helpers shared by the BBQ family.

The loader keeps every field of the source line: ``answer_info``,
``additional_metadata`` (``stereotyped_groups``, ``subcategory``, ``version``,
``source``), ``context_condition``, ``question_polarity``, ``example_id`` and
``question_index`` (the last two and the rest of ``additional_metadata`` go to
``metadata``). The stereotyped target's option is found by matching each
answer's group (``answer_info``) against ``stereotyped_groups``
(:func:`find_target_index`).

>>> from probe.data.bbq import load_bbq_jsonl  # doctest: +SKIP
>>> items = load_bbq_jsonl("Age")               # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from probe.data.items import BBQItem
from probe.errors import InputError
from probe.io import iter_jsonl

__all__ = [
    "BBQ_CATEGORIES",
    "UNKNOWN_OPTIONS",
    "SkippedRow",
    "find_target_index",
    "group_key",
    "load_bbq_jsonl",
    "stable_hash",
]

#: BBQ's categories (the generator's list).
BBQ_CATEGORIES = (
    "Age", "Disability_status", "Gender_identity", "Nationality", "Physical_appearance",
    "Race_ethnicity", "Religion", "SES", "Sexual_orientation",
)

#: BBQ's own Unknown paraphrases (from its generator), in its order.
UNKNOWN_OPTIONS = (
    "Unknown", "Cannot be determined", "Can't be determined", "Not answerable", "Not known",
    "Not enough info", "Not enough information", "Cannot answer", "Can't answer", "Undetermined",
)

# Group labels that BBQ writes in different ways across fields; all compared after
# group_key() normalisation ("low SES" == "lowSES", "F" == "woman" ...).
_GROUP_ALIASES = {
    "f": "f", "woman": "f", "girl": "f", "female": "f", "women": "f",
    "m": "m", "man": "m", "boy": "m", "male": "m", "men": "m",
}


def group_key(label: str) -> str:
    """Normalise a group label for matching: lower case, no spaces/hyphens, gender aliases.

    >>> group_key("low SES"), group_key("lowSES"), group_key("woman"), group_key("F")
    ('lowses', 'lowses', 'f', 'f')
    """
    k = re.sub(r"[\s\-_]+", "", str(label).strip().lower())
    return _GROUP_ALIASES.get(k, k)


def find_target_index(answer_groups: Sequence[Sequence[str]], stereotyped_groups: Iterable[str]) -> int | None:
    """Index of the (non-unknown) answer whose group is a stereotyped group; None if not exactly one.

    ``answer_groups[i]`` is ``[text, group]`` as in BBQ's ``answer_info``. Both the
    group label and the answer text are tried (BBQ Religion stores the name as group).
    A group ``adult_F`` / ``M-Black`` style compound matches on any of its parts.
    """
    targets = {group_key(g) for g in stereotyped_groups}
    hits = []
    for i, (text, group) in enumerate(answer_groups):
        if group_key(group) == "unknown":
            continue
        parts = {group_key(group), group_key(text)} | {group_key(p) for p in re.split(r"[_\-]", str(group)) if p}
        if parts & targets:
            hits.append(i)
    return hits[0] if len(hits) == 1 else None


@dataclass(frozen=True)
class SkippedRow:
    """An upstream row left out (with a warning), rather than failing the whole file."""

    file: str
    line: int
    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.field}: {self.reason}"


def stable_hash(*parts: object) -> int:
    """A process-independent integer hash (Python's ``hash`` is salted per process)."""
    return int(hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:12], 16)


def _bbq_path(category_or_path: str | Path) -> Path:
    p = Path(category_or_path)
    if p.suffix == ".jsonl":
        return p
    from probe.data.paths import dataset_dir

    return dataset_dir("bbq") / "data" / f"{category_or_path}.jsonl"


def load_bbq_jsonl(category_or_path: str | Path, drop_untargeted: bool = False,
                   skipped: list[SkippedRow] | None = None) -> list[BBQItem]:
    """Load BBQ's generated instances of one category (``"Age"``) or from a ``.jsonl`` path.

    Items whose stereotyped target is not exactly one named answer (BBQ's older
    releases tag both "tattoos" and "no tattoos" with one group) raise an
    :class:`InputError` unless ``drop_untargeted`` or ``skipped`` is given: then
    they are skipped (the bias score needs t), and each is appended to
    ``skipped`` as a :class:`SkippedRow` naming its file and line.
    """
    path = _bbq_path(category_or_path)
    if not path.is_file():
        raise InputError(path, None, None, "file not found")
    required = ("example_id", "question_index", "question_polarity", "context_condition", "category",
                "answer_info", "additional_metadata", "context", "question", "ans0", "ans1", "ans2", "label")
    items: list[BBQItem] = []
    for line_no, rec in iter_jsonl(path, required=required):
        for field in ("answer_info", "additional_metadata"):
            if not isinstance(rec[field], dict):
                raise InputError(path, line_no, field, f"must be an object, got {type(rec[field]).__name__}")
        info = rec["answer_info"]
        groups = [info.get(f"ans{i}", ["", ""]) for i in range(3)]
        meta = dict(rec["additional_metadata"])
        stereo = tuple(meta.pop("stereotyped_groups", []) or [])
        unknown = [i for i, g in enumerate(groups) if group_key(g[1]) == "unknown"]
        if len(unknown) != 1:
            raise InputError(path, line_no, "answer_info", "needs exactly one 'unknown' answer")
        target = find_target_index(groups, stereo)
        if target is None:
            reason = f"no single answer matches {list(stereo)} in {groups}"
            if skipped is not None:
                skipped.append(SkippedRow(str(path), line_no, "additional_metadata.stereotyped_groups", reason))
                continue
            if drop_untargeted:
                continue
            raise InputError(path, line_no, "additional_metadata.stereotyped_groups", reason)
        polarity = rec["question_polarity"]
        try:
            items.append(BBQItem(
                id=f"bbq-{rec['category']}-{rec['example_id']}",
                source="bbq",
                category=rec["category"],
                context=rec["context"],
                question=rec["question"],
                options=(rec["ans0"], rec["ans1"], rec["ans2"]),
                label=int(rec["label"]),
                target_index=target,
                unknown_index=unknown[0],
                question_polarity=polarity,
                context_condition=rec["context_condition"],
                answer_info=info,
                stereotyped_groups=stereo,
                template_id=f"{rec['category']}-{rec['question_index']}-{meta.get('version', 'None')}",
                group_words=tuple("" if i == unknown[0] else str(g[0]) for i, g in enumerate(groups)),
                metadata={"example_id": rec["example_id"], "question_index": rec["question_index"], **meta},
            ))
        except ValueError as exc:
            raise InputError(path, line_no, None, str(exc)) from None
    return items
