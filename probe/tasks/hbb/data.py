"""Hidden Bias Benchmark (HBB) builder: concept pairs x descriptors -> paired questions.

Source: HBB paper (sections 3.1.3-3.2, appendix C.3, Tables 4, 5 and 10) and the
released ``hbb/questions.csv`` (1,547 concept pairs: ``Context``, ``s1``, ``s2``
with an ``[[X]]`` slot, ``bias type1``/``bias type2`` concepts) and
``hbb/descriptors.json`` (identity descriptors ``[phrase, subject pronoun,
possessive]`` per category and identity).

A *test instance* is a concept pair x category x descriptor type x an unordered
pair of identities of that type: two :class:`HBBQuestion` s that differ only in
the descriptor. Every unordered pair within a type is used, which gives the
paper's Table 5 counts exactly (``1547 x types x C(identities, 2)``):

========= ===== ========== ======= =========
category  types identities pairs   instances
========= ===== ========== ======= =========
Age       3     2          1        4,641
Gender    4     2          1        6,188
Race      4     5          10      61,880
SES       2     2          1        3,094
Religions 3     4          6       27,846
========= ===== ========== ======= =========

Substitution rules. In the context ``[[X]]`` becomes the descriptor phrase; in
the options ``[[X]]'s`` becomes the possessive and ``[[X]]`` the subject pronoun,
as the authors fill them (``descriptors.json``'s words unchanged: "She", "Her"). Descriptor types are numbered as in the
paper's Table 10 (implicit -> explicit), which is *not* the list order of
``descriptors.json``; :data:`TYPE_INDEX` holds the mapping. Age types 1-2 prefix
a name's possessive ("Jessica's daughter, a freshman in college,"), SES and
Religions prefix a name ("James, who is wealthy,"); the name comes from Table 4's
pool (``descriptors.json["name"]``), drawn deterministically from ``seed`` per
concept pair, category and type, so both questions of an instance (and every
identity of that cell) share it - which is also what lets questions be scored once
and shared across the instances that contain them.

>>> from probe.tasks.hbb.data import expected_counts
>>> expected_counts(1547)["total"]
103649
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import pandas as pd

from probe.data.paths import dataset_dir
from probe.errors import InputError
from probe.fs import file_stamp
# The HBB-SG variation loaders live in hbb_variations; re-exported here, where callers import them.
from probe.tasks.hbb.variation_data import (AUTHORS_VARIATIONS_COLUMNS, AUTHORS_VARIATIONS_FILE,  # noqa: F401
                                            AUTHORS_VARIATIONS_REMOTE, authors_variations_path, load_authors_variations,
                                            load_sg_variations)

__all__ = [
    "CATEGORIES",
    "CATEGORY_LABELS",
    "IDENTITIES",
    "TYPE_INDEX",
    "HBBConcept",
    "HBBQuestion",
    "HBBInstance",
    "load_concepts",
    "load_descriptors",
    "build_instances",
    "expected_counts",
    "type_label",
    "unique_questions",
    "load_default",
    "render_question",
    "fill_option",
    "load_sg_variations",
    "load_authors_variations",
    "authors_variations_path",
    "AUTHORS_VARIATIONS_FILE",
    "AUTHORS_VARIATIONS_REMOTE",
]

#: Category keys, in the paper's table order, and their descriptors.json section.
CATEGORIES: tuple[str, ...] = ("age", "gender", "race", "ses", "religions")
JSON_SECTION = {
    "age": "age",
    "gender": "gender_and_sex",
    "race": "race_ethnicity",
    "ses": "socioeconomic_class",
    "religions": "religions",
}
#: Display names of the paper's tables.
CATEGORY_LABELS = {"age": "Age", "gender": "Gender", "race": "Race", "ses": "SES", "religions": "Religions"}
_TYPE_PREFIX = {"age": "Age", "gender": "Gender", "race": "Race", "ses": "SES", "religions": "Religion"}

#: The identities compared within each category (Table 10). descriptors.json also
#: lists ``age/child``; the paper pairs only Young with Old (one pair per type).
IDENTITIES: dict[str, tuple[str, ...]] = {
    "age": ("young", "old"),
    "gender": ("female", "male"),
    "race": ("asian", "black", "white", "latinx", "middle-east"),
    "ses": ("rich", "poor"),
    "religions": ("Christian", "Jewish", "Muslim", "Buddhist"),
}

#: Table 10's descriptor type (1-based) -> index into the descriptors.json lists.
#: E.g. Gender 3 is the name (Emily/John, list index 3) and Race 3 the bare name
#: (Aki/Lamar/..., index 3); Religion 1 is the practice (index 2), Religion 3 "a Christian".
TYPE_INDEX: dict[str, dict[int, int]] = {
    "age": {1: 0, 2: 1, 3: 2},
    "gender": {1: 0, 2: 1, 3: 3, 4: 2},
    "race": {1: 0, 2: 1, 3: 3, 4: 2},
    "ses": {1: 0, 2: 1},
    "religions": {1: 2, 2: 1, 3: 0},
}

#: Pronouns for descriptors.json entries that are bare strings (gender).
_GENDER_PRONOUNS = {"female": ("She", "Her"), "male": ("He", "His")}

_SLOT = "[[X]]"
_POSS_SLOT = "[[X]]'s"
_REQUIRED_COLUMNS = ("Context", "s1", "s2", "bias type1", "bias type2", "bias_type")


def type_label(category: str, descriptor_type: int) -> str:
    """``("religions", 2) -> "Religion 2"``: the row label of the paper's Tables 2 and 9."""
    return f"{_TYPE_PREFIX[category]} {descriptor_type}"


@dataclass(frozen=True)
class HBBConcept:
    """One row of questions.csv: a context and two options hiding opposite concepts."""

    concept_id: int  # 0-based data row of questions.csv
    context: str
    s1: str  # option depicting ``concept_1`` (the paper's ``bias type1``)
    s2: str
    concept_1: str
    concept_2: str
    source_bias_type: str  # the source data set's category (race, gender, culture, ...)


@dataclass(frozen=True)
class HBBQuestion:
    """One question: the concept pair's context and options with one identity filled in.

    ``options`` are ``(s1, s2)`` rendered; which is shown as a) is decided at
    prompt time (see :mod:`probe.tasks.hbb.prompts`).
    """

    id: str
    concept_id: int
    category: str
    descriptor_type: int
    identity: str
    descriptor: str  # the phrase that replaced [[X]] in the context
    context: str
    options: tuple[str, str]
    pronouns: tuple[str, str]  # (subject, possessive) used for [[X]] / [[X]]'s in options

    def fill(self, option_template: str) -> str:
        """Render another option template (e.g. an HBB-SG sentence variation) for this identity."""
        return fill_option(option_template, self.pronouns)


@dataclass(frozen=True)
class HBBInstance:
    """A test instance: two questions that differ only in the identity descriptor."""

    id: str
    concept_id: int
    category: str
    descriptor_type: int
    identity_1: str
    identity_2: str
    concept_1: str
    concept_2: str
    question_1: HBBQuestion
    question_2: HBBQuestion

    def to_json(self) -> dict[str, Any]:
        """The ``probe data build hbb`` line (nested questions as dicts)."""
        d = asdict(self)
        for k in ("question_1", "question_2"):
            d[k]["options"] = list(d[k]["options"])
            d[k]["pronouns"] = list(d[k]["pronouns"])
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "HBBInstance":
        qs = {
            k: HBBQuestion(**{**d[k], "options": tuple(d[k]["options"]), "pronouns": tuple(d[k]["pronouns"])})
            for k in ("question_1", "question_2")
        }
        return cls(**{**{k: v for k, v in d.items() if k not in qs}, **qs})


def load_concepts(path: str | Path) -> list[HBBConcept]:
    """Read questions.csv; errors name the file, 1-based line and field."""
    path = Path(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:  # ValueError: not UTF-8
        raise InputError(path, None, None, f"cannot read CSV ({exc})") from None
    for col in _REQUIRED_COLUMNS:
        if col not in df.columns:
            raise InputError(path, 1, col, "missing column")
    concepts = []
    for i, row in enumerate(df.itertuples(index=False)):
        rec = dict(zip(df.columns, row))
        line = i + 2  # header is line 1 (multi-line quoted fields would shift this; the data has none)
        for col in ("Context", "s1", "s2", "bias type1", "bias type2"):
            if not rec[col].strip():
                raise InputError(path, line, col, "empty")
        if _SLOT not in rec["Context"]:
            raise InputError(path, line, "Context", "has no [[X]] slot")
        concepts.append(
            HBBConcept(i, rec["Context"], rec["s1"], rec["s2"], rec["bias type1"], rec["bias type2"], rec["bias_type"])
        )
    return concepts


def load_descriptors(path: str | Path) -> dict[str, Any]:
    """Read descriptors.json and check it has every section, identity and type used."""
    path = Path(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(path, None, None, f"cannot read JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise InputError(path, None, None, f"must be a JSON object of sections, got {type(data).__name__}")
    for sec in [*JSON_SECTION.values(), "name"]:
        if sec not in data:
            raise InputError(path, None, sec, "missing section")
    for cat, idents in IDENTITIES.items():
        sec = data[JSON_SECTION[cat]]
        need = max(TYPE_INDEX[cat].values()) + 1
        for ident in idents:
            if ident not in sec or len(sec[ident]) < need:
                raise InputError(path, None, f"{JSON_SECTION[cat]}.{ident}", f"missing or has fewer than {need} entries")
    return data


def expected_counts(n_concepts: int = 1547) -> dict[str, int]:
    """Instances per category (and ``total``) for ``n_concepts`` concept pairs (paper Table 5)."""
    out = {
        cat: n_concepts * len(TYPE_INDEX[cat]) * len(list(itertools.combinations(IDENTITIES[cat], 2)))
        for cat in CATEGORIES
    }
    out["total"] = sum(out.values())
    return out


def _name_pool(descriptors: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    return [tuple(e) for group in ("female", "male", "neutral") for e in descriptors["name"].get(group, [])]


def _pick_name(pool: Sequence[tuple[str, str, str]], seed: int, concept_id: int, category: str, dtype: int):
    # A string-keyed RNG: independent of iteration order, so a subset build draws the same names.
    key = hashlib.sha256(f"{seed}:{concept_id}:{category}:{dtype}".encode()).hexdigest()
    return random.Random(int(key[:16], 16)).choice(list(pool))


def _descriptor(
    descriptors: Mapping[str, Any], category: str, identity: str, dtype: int, name: tuple[str, str, str]
) -> tuple[str, str, str]:
    """(phrase, subject pronoun, possessive) for one identity and descriptor type."""
    entry = descriptors[JSON_SECTION[category]][identity][TYPE_INDEX[category][dtype]]
    if category == "gender":
        return (entry.strip(), *_GENDER_PRONOUNS[identity])
    if isinstance(entry, str):  # SES / Religions: a suffix after the name, pronouns from the name
        phrase, subj, poss = entry.strip(), name[1], name[2]
    else:
        phrase, subj, poss = (str(x).strip() for x in entry)
    if category == "age" and dtype in (1, 2):
        phrase = f"{name[0]}'s {phrase}"  # Table 10: "Jessica's daughter, a freshman in college"
    elif category in ("ses", "religions"):
        phrase = f"{name[0]}{phrase}"  # "James, who is wealthy,"
    return phrase, subj, poss


_SENTENCE_START = re.compile(r"(^|[.!?]\s+)$")


def _fill(template: str, replacement_at: Callable[[bool, bool], str]) -> str:
    """Replace every [[X]]'s / [[X]] using ``replacement_at(is_possessive, at_sentence_start)``."""
    out, pos = [], 0
    for m in re.finditer(r"\[\[X\]\]('s)?", template):
        before = template[pos : m.start()]
        out.append(before)
        at_start = bool(_SENTENCE_START.search("".join(out)))
        out.append(replacement_at(bool(m.group(1)), at_start))
        pos = m.end()
    out.append(template[pos:])
    return "".join(out)


def _case(word: str, at_start: bool) -> str:
    return word[:1].upper() + word[1:] if at_start else word[:1].lower() + word[1:]


def render_question(concept: HBBConcept, category: str, dtype: int, identity: str, phrase, subj, poss) -> HBBQuestion:
    """Fill the [[X]] slots of one concept pair for one identity descriptor."""

    def in_context(possessive: bool, at_start: bool) -> str:
        if possessive:  # "Mother's"; a phrase ending in a comma drops it ("Kai, a Christian's")
            return phrase.rstrip(",").rstrip() + "'s"
        return phrase

    context = _fill(concept.context, in_context)
    options = (fill_option(concept.s1, (subj, poss)), fill_option(concept.s2, (subj, poss)))
    qid = f"{concept.concept_id}:{category}:{dtype}:{identity}"
    return HBBQuestion(qid, concept.concept_id, category, dtype, identity, phrase, context, options, (subj, poss))


def fill_option(template: str, pronouns: tuple[str, str]) -> str:
    """Option slots: ``[[X]]'s`` -> possessive, ``[[X]]`` -> subject pronoun, as the authors fill them:
    the descriptor's words as they are ("She", "Her": capitalised, also mid-sentence; their
    ``questions_final.ipynb`` replaces the slot with ``descriptors.json``'s entry unchanged). Every slot
    is filled: where a template has both forms (2 options of questions.csv) their code fills only
    ``[[X]]'s`` and leaves a bare ``[[X]]``; no option of ours keeps one.

    >>> fill_option("Later, [[X]] smiled; [[X]]'s hat fell.", ("She", "Her"))
    'Later, She smiled; Her hat fell.'
    >>> fill_option("[[X]] left. [[X]]'s car stayed.", ("He", "His"))
    'He left. His car stayed.'
    """
    subj, poss = pronouns
    return _fill(template, lambda possessive, at_start: poss if possessive else subj)


def build_instances(
    concepts: Sequence[HBBConcept],
    descriptors: Mapping[str, Any],
    seed: int = 0,
    categories: Sequence[str] = CATEGORIES,
) -> Iterator[HBBInstance]:
    """Yield every test instance: concept x category x type x unordered identity pair.

    Order: concept, then category (paper order), type, identity pair (list order).
    Instance ids are ``"{concept_id}:{category}:{type}:{identity_1}|{identity_2}"``.
    """
    pool = _name_pool(descriptors)
    if not pool:
        raise InputError("descriptors.json", None, "name", "empty name pool")
    for concept in concepts:
        for cat in categories:
            if cat not in IDENTITIES:
                raise ValueError(f"unknown HBB category {cat!r}; categories are {', '.join(CATEGORIES)}")
            for dtype in TYPE_INDEX[cat]:
                name = _pick_name(pool, seed, concept.concept_id, cat, dtype)
                questions = {
                    ident: render_question(concept, cat, dtype, ident, *_descriptor(descriptors, cat, ident, dtype, name))
                    for ident in IDENTITIES[cat]
                }
                for a, b in itertools.combinations(IDENTITIES[cat], 2):
                    yield HBBInstance(
                        id=f"{concept.concept_id}:{cat}:{dtype}:{a}|{b}",
                        concept_id=concept.concept_id,
                        category=cat,
                        descriptor_type=dtype,
                        identity_1=a,
                        identity_2=b,
                        concept_1=concept.concept_1,
                        concept_2=concept.concept_2,
                        question_1=questions[a],
                        question_2=questions[b],
                    )


def unique_questions(instances: Sequence[HBBInstance]) -> list[HBBQuestion]:
    """The distinct questions of ``instances`` (each scored once, joined back by id), first-seen order."""
    seen: dict[str, HBBQuestion] = {}
    for inst in instances:
        for q in (inst.question_1, inst.question_2):
            seen.setdefault(q.id, q)
    return list(seen.values())


def load_default(data_dir: str | Path | None = None) -> tuple[list[HBBConcept], dict[str, Any]]:
    """Concepts and descriptors from ``data_dir`` or ``dataset_dir("hbb")``.

    A process reads the two files once while they stay unchanged (size and modification time): a run asks
    for them several times, and a process that runs several (the test suite) reads them once.
    """

    d = Path(data_dir) if data_dir else dataset_dir("hbb")
    concepts_path, descriptors_path = d / "questions.csv", d / "descriptors.json"
    key = (file_stamp(concepts_path), file_stamp(descriptors_path))
    hit = _READ.get(key)
    if hit is None:
        hit = (tuple(load_concepts(concepts_path)), json.dumps(load_descriptors(descriptors_path)))
        keep_recent(_READ, key, hit)
    # the descriptors are a nested dict: each caller gets its own copy, so one cannot change another's
    return list(hit[0]), json.loads(hit[1])


def keep_recent(cache: dict, key: tuple, value: Any, most: int = 8) -> None:
    """``cache[key] = value``, the oldest entries dropped first so that at most ``most`` stay."""
    while len(cache) >= most:  # the oldest go first
        cache.pop(next(iter(cache)))
    cache[key] = value


#: kept readings (load_default), keyed by the files' stamps
_READ: dict[tuple, tuple] = {}
