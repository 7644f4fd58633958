"""BBQ's generated JSONL -> :class:`~probe.tasks.bbq.items.BBQItem`, and helpers shared by the BBQ family.

The loader keeps every field of the source line: ``answer_info``,
``additional_metadata`` (``stereotyped_groups``, ``subcategory``, ``version``,
``source``), ``context_condition``, ``question_polarity``, ``example_id`` and
``question_index`` (the last two and the rest of ``additional_metadata`` go to
``metadata``). The stereotyped target's option is found by matching each
answer's group (``answer_info``) against ``stereotyped_groups``
(:func:`find_target_index`). In the intersectional categories (``Race_x_SES``,
``Race_x_gender``) ``stereotyped_groups`` names races only, so the target must
also carry the template's ``Known_stereotyped_var2`` ("F", "lowSES"), read from
``templates/<Category>.csv`` beside ``data/`` as BBQ's analysis script does.

>>> from probe.tasks.bbq.data import load_bbq_jsonl  # doctest: +SKIP
>>> items = load_bbq_jsonl("Age")               # doctest: +SKIP
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from probe.data.paths import dataset_dir
from probe.tasks.bbq.items import BBQItem
from probe.errors import InputError
from probe.fs import file_stamp
from probe.io import iter_jsonl

__all__ = [
    "BBQ_CATEGORIES",
    "UNKNOWN_OPTIONS",
    "SkippedRow",
    "INTERSECTIONAL_CATEGORIES",
    "find_target_index",
    "intersectional_var2",
    "group_key",
    "load_bbq_jsonl",
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


def find_target_index(answer_groups: Sequence[Sequence[str]], stereotyped_groups: Iterable[str],
                      var2: str | None = None) -> int | None:
    """Index of the (non-unknown) answer whose group is a stereotyped group; None if not exactly one.

    ``answer_groups[i]`` is ``[text, group]`` as in BBQ's ``answer_info``. Both the
    group label and the answer text are tried (BBQ Religion stores the name as group).
    A group ``adult_F`` / ``M-Black`` style compound matches on any of its parts.

    ``var2`` (the intersectional categories' ``Known_stereotyped_var2``) adds BBQ's
    analysis rule for them: the target's group must *also* have var2 as a part, so
    with races ``["Black"]`` and var2 ``"F"``, ``F-Black`` is the target and
    ``M-Black`` / ``F-White`` are not (``lowSES-M-Black`` for var2 ``lowSES``).
    Without it, a same-race pair (BBQ's ``intersectional_a``) has no single target.
    """
    targets = {group_key(g) for g in stereotyped_groups}
    need = group_key(var2) if var2 else None
    hits = []
    for i, (text, group) in enumerate(answer_groups):
        if group_key(group) == "unknown":
            continue
        parts = {group_key(group), group_key(text)} | {group_key(p) for p in re.split(r"[_\-]", str(group)) if p}
        if parts & targets and (need is None or need in parts):
            hits.append(i)
    return hits[0] if len(hits) == 1 else None


#: BBQ's categories that cross race with a second variable (gender, SES).
INTERSECTIONAL_CATEGORIES = ("Race_x_SES", "Race_x_gender")


def intersectional_var2(template_csv: str | Path) -> dict[str, str]:
    """``Q_id -> Known_stereotyped_var2`` of an intersectional template CSV; ``{}`` if it is absent.

    BBQ's JSONL keeps only the races in ``stereotyped_groups``; its analysis
    script joins the templates on ``question_index`` for the second variable.
    """
    path = Path(template_csv)
    if not path.is_file():
        return {}
    with path.open(newline="", encoding="utf-8-sig") as fh:
        rows = [(str(r.get("Q_id") or "").strip(), str(r.get("Known_stereotyped_var2") or "").strip())
                for r in csv.DictReader(fh)]
    return {q: v for q, v in rows if q}


@dataclass(frozen=True)
class SkippedRow:
    """An upstream row left out (with a warning), rather than failing the whole file."""

    file: str
    line: int
    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.field}: {self.reason}"


def _bbq_path(category_or_path: str | Path) -> Path:
    p = Path(category_or_path)
    if p.suffix == ".jsonl":
        return p

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
    mode = "collect" if skipped is not None else "drop" if drop_untargeted else "raise"
    # A process that runs several tasks or runs (or the test suite) reads each file once, as the template
    # expansions are kept (probe.tasks.bbq.templates): kept until the file, or a template CSV it read, changes.
    key = (file_stamp(path), mode)
    hit = _LOADED.get(key)
    if hit is not None and all(file_stamp(Path(dep[0])) == dep for dep in hit[2]):
        if skipped is not None:
            skipped.extend(hit[1])
        return list(hit[0])
    rows: list[SkippedRow] = []
    read: list[Path] = []
    items = _read_bbq_jsonl(path, mode, rows, read)
    if skipped is not None:
        skipped.extend(rows)
    while len(_LOADED) >= _LOADED_MAX:
        _LOADED.pop(next(iter(_LOADED)))
    _LOADED[key] = (tuple(items), tuple(rows), tuple(file_stamp(p) for p in read))
    return items


#: the last files read (load_bbq_jsonl): (file stamp, mode) -> (items, skipped rows, stamps of the files read)
_LOADED: dict[tuple, tuple] = {}
_LOADED_MAX = 32


def _read_bbq_jsonl(path: Path, mode: str, skipped: list[SkippedRow], read: list[Path]) -> list[BBQItem]:
    """:func:`load_bbq_jsonl`'s reading: ``mode`` ``raise``, ``drop`` or ``collect`` (into ``skipped``) for a
    row without a single target; the intersectional template CSVs it reads are appended to ``read``."""
    required = ("example_id", "question_index", "question_polarity", "context_condition", "category",
                "answer_info", "additional_metadata", "context", "question", "ans0", "ans1", "ans2", "label")
    items: list[BBQItem] = []
    var2_of: dict[str, dict[str, str]] = {}  # category -> Q_id -> Known_stereotyped_var2
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
        var2, cat = None, rec["category"]
        if cat in INTERSECTIONAL_CATEGORIES:
            if cat not in var2_of:  # BBQ's layout: data/ and templates/ side by side
                read.append(path.parent.parent / "templates" / f"{cat}.csv")
                var2_of[cat] = intersectional_var2(read[-1])
            var2 = var2_of[cat].get(str(rec["question_index"])) or None
        target = find_target_index(groups, stereo, var2)
        if target is None:
            reason = f"no single answer matches {list(stereo)} in {groups}"
            if mode == "collect":
                skipped.append(SkippedRow(str(path), line_no, "additional_metadata.stereotyped_groups", reason))
                continue
            if mode == "drop":
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
