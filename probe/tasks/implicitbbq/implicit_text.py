"""Cue table, cue sentences, per-cue exclusions, slot-bound templates and the "Person A"/"Person B"
rewrite used by the ImplicitBBQ builder (package data in ``probe/tasks/implicitbbq/resources/``).

The rewrite turns a BBQ template sentence into its implicit form by putting a
neutral identifier in each ``{{NAMEk}}`` slot and removing the words that only
made sense around a group word: a determiner or possessive before it ("the",
"a", "their" ...), age/intensity adjectives that would leak the group
("young", "much"), and a head noun after an adjective-style slot ("Muslim
*person*", "rich *people*", "my Nigerian *friend*").

>>> person_rewrite("I saw a {{NAME1}} and their {{NAME2}} last week.", "Person A", "Person B")
'I saw Person A and Person B last week.'
>>> person_rewrite("The {{NAME2}} one talked first.", "Person A", "Person B")
'Person B talked first.'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from probe.tasks.bbq.data import group_key

__all__ = ["BROKEN_PERSON_PATTERNS", "BoundTemplate", "CueTable", "PersonFix", "cue_sentence", "load_bound_templates",
           "load_cue_sentences", "load_cue_table", "load_exclusions", "load_person_fixes",
           "person_agreement", "person_problems", "person_rewrite"]

# Head nouns dropped after an adjective slot ("the {{NAME1}} man" -> "Person A").
HEAD_NOUNS = (
    "person", "people", "man", "men", "woman", "women", "guy", "guys", "one", "ones", "friend", "friends",
    "student", "students", "family", "families", "neighbor", "neighbors", "neighbour", "neighbours",
    "girl", "girls", "boy", "boys", "speaker", "team", "parents", "parent", "kid", "kids", "couple",
    "lady", "candidate", "individual", "part", "folks", "colleague", "coworker", "group", "girlfriend",
    "boyfriend",
)
_DETERMINERS = r"the other|the|an|a|my|his|her|their|our|your|one|some|both"
_ADJECTIVES = r"much|very|young|younger|local|elderly"


def person_rewrite(text: str, person1: str, person2: str, word1: str = "", word2: str = "") -> str:
    """Put ``person1``/``person2`` into ``{{NAME1}}``/``{{NAME2}}`` and tidy the words around them.

    ``word1``/``word2`` are the values the template's ``{{WORD1}}``/``{{WORD2}}`` slots will
    get: a WORD slot right after a NAME slot is dropped when its value is a head noun.
    """
    nouns = set(HEAD_NOUNS)
    words = {"{{WORD1}}": word1, "{{WORD2}}": word2}

    def repl(m: re.Match, person: str) -> str:
        after = m.group("after") or ""
        poss = m.group("poss") or ""
        tail = ""
        if after:
            token = after.strip()
            value = words.get(token, token)
            if value.lower() not in nouns:
                tail = after  # keep a following word that is not a droppable head noun
        return person + poss + tail

    for k, person in (("1", person1), ("2", person2)):
        pattern = re.compile(
            rf"(?:\b(?:{_DETERMINERS})\s+)?(?:\b(?:{_ADJECTIVES})\s+)?\{{\{{NAME{k}\}}\}}(?P<poss>'s)?"
            rf"(?P<after>\s+(?:\{{\{{WORD[12]\}}\}}|[A-Za-z]+\b))?",
            flags=re.IGNORECASE,
        )
        text = pattern.sub(lambda m, p=person: repl(m, p), text)
    return re.sub(r"\s{2,}", " ", text)


# Verbs written for a plural group ("the Muslims are ...") that must agree with one person.
_SINGULAR = {"are": "is", "were": "was", "have": "has", "aren't": "isn't", "weren't": "wasn't", "don't": "doesn't"}


def person_agreement(text: str, persons: tuple[str, str]) -> str:
    """``Person A are`` -> ``Person A is`` where the person alone is the subject (run on the
    fully slotted text: templates written for plural groups, "the Muslims are ...").

    Left alone: ``Person A and Person B are`` (a plural subject) and ``the parents of
    Person B were`` (the person is not the subject). A stray article before a person
    (``and a Person B``, left from a group noun) is dropped.

    >>> person_agreement("While Person A are competent, Person A and Person B were late.", ("Person A", "Person B"))
    'While Person A is competent, Person A and Person B were late.'
    """
    names = "|".join(re.escape(p) for p in persons)
    verbs = "|".join(re.escape(v) for v in _SINGULAR)
    text = re.sub(rf"\b[Aa] ({names})\b", r"\1", text)  # "and a Person B" (an article left from a group noun)
    pattern = re.compile(rf"(?<!\band )(?<!\band the )(?<!\bof )\b({names})\s+({verbs})(?![\w'])")
    return pattern.sub(lambda m: f"{m.group(1)} {_SINGULAR[m.group(2)]}", text)


_P = r"Person [AB]"
#: What an automatic Person A/B rewrite breaks, as (name, regex). Each was found in the
#: build before the hand fixes of ``implicitbbq_person_fixes.yaml``; none may occur in an implicit or
#: control context or question (tests/unit/test_implicitbbq_person_forms.py reads every one).
BROKEN_PERSON_PATTERNS: tuple[tuple[str, str], ...] = (
    # "A person Person A", "the motivated Person B", "The parents Person A", "a kid Person A" ("the other
    # Person B" and "the other driver Person B", an elided "was", read well and are allowed)
    ("determiner before a person", rf"(?<!Person )\b(?:[Aa]n?|[Tt]he|[Mm]y|[Hh]is|[Hh]er|[Tt]heir|[Oo]ur|[Yy]our)"
                                   rf"\s+(?:(?!other\b)[\w-]+\s+)?{_P}\b"),
    ("group noun before a person", rf"\b(?:[Pp]erson|[Pp]eople|[Gg]roups?|[Ff]amil(?:y|ies)|[Ss]tudents?) (?:of |from )?{_P}\b"),
    ("a place named as a person", rf"\b(?:houses|homes)\b[\w ]{{0,40}}\bare {_P}\b"),
    ("quantifier before a person", rf"\b(?:[Mm]any|[Ss]ome|[Mm]ost|[Aa]ll|[Ee]ach|[Ss]everal|[Ff]ew|[Nn]one|[Bb]oth) of {_P}\b"
                                   rf"|\b[Aa]ll {_P}\b"),
    ("'one' used as a group adjective", rf"\b[Oo]ne,? {_P}\b|\bone of them from {_P}|\bthe other from {_P}"),
    ("'who's' + person (a group description)", rf"\bwho(?:'s| is)(?: now)? {_P}\b|, now {_P}"),
    ("noun after a person (possessive missing)", rf"\b{_P} (?:teacher|teachers|side|home|family|families|house|parents|"
                                                 rf"kids|child|children|students?|man|woman|person|people|one)\b"),
    ("'their X of' + person", rf"\btheir \w+ of {_P}\b"),
    ("two persons without a conjunction", rf"\b{_P},? {_P}\b"),
    ("plural verb after a lone person", rf"(?<!{_P} and )(?<!{_P} or )(?<!\bof )\b{_P}"
                                        rf"(?: (?:rarely|never|often|always|usually|just|also))? "
                                        rf"(?:are|were|have|come|miss|flourish|get|do|don't|aren't|weren't|haven't)\b"),
    ("doubled article", r"\b(?:a|an|the)\s+(?:a|an|the)\b"),
    ("doubled word", r"(?i)(?<!Person )\b(\w+)\s+\1\b(?<!\bhad had)(?<!\bthat that)"),
)


def person_problems(text: str, allowed: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(pattern name, matched text) for every :data:`BROKEN_PERSON_PATTERNS` match in ``text``.

    ``allowed``: matched strings that are not problems here (e.g. a typo the source template has too).

    >>> [name for name, _ in person_problems("A person Person A met Person B.")]
    ['determiner before a person', 'group noun before a person', 'doubled word']
    >>> person_problems("One was Person A, and the other Person B.")
    []
    """
    out = []
    for name, pattern in BROKEN_PERSON_PATTERNS:
        for m in re.finditer(pattern, text):
            if m.group(0) not in allowed:
                out.append((name, m.group(0)))
    return out


@dataclass(frozen=True)
class CueTable:
    """The paper's Table 4 as loaded from ``implicit_cues.yaml``."""

    groups: dict[str, dict[str, tuple[str, ...]]] = field(hash=False)  # dimension -> group -> cues
    mapping: dict[str, dict[str, str]] = field(hash=False)  # dimension -> group_key(label) -> group
    sources: dict[str, str] = field(hash=False)  # dimension -> "bbq:Age" | "bharatbbq:Caste"
    neutral: tuple[str, ...] = ()

    @property
    def dimensions(self) -> tuple[str, ...]:
        return tuple(self.groups)

    def cue_group(self, dimension: str, word: str, info: str) -> str | None:
        """The cue group of a slot (its word first, then its group info); None if it has no cues."""
        m = self.mapping[dimension]
        for label in (word, info, *re.split(r"[_\-]", info or "")):
            g = m.get(group_key(label)) if label else None
            if g is not None:
                return g
        return None


@lru_cache(maxsize=1)
def load_cue_table() -> CueTable:
    """Load ``probe/tasks/implicitbbq/resources/implicit_cues.yaml`` (cached)."""
    raw: dict[str, Any] = yaml.safe_load(
        resources.files("probe.tasks.implicitbbq").joinpath("resources/implicit_cues.yaml").read_text(encoding="utf-8"))
    groups, mapping, sources = {}, {}, {}
    for dim, spec in raw["dimensions"].items():
        groups[dim] = {g: tuple(c) for g, c in spec["groups"].items()}
        mapping[dim] = {group_key(k): v for k, v in spec["mapping"].items()}
        sources[dim] = spec["source"]
        bad = set(mapping[dim].values()) - set(groups[dim])
        if bad:
            raise ValueError(f"implicit_cues.yaml: dimension {dim!r} maps to unknown groups {sorted(bad)}")
    return CueTable(groups=groups, mapping=mapping, sources=sources, neutral=tuple(raw["neutral"]))


def _resource(name: str) -> Any:
    return yaml.safe_load(resources.files("probe.tasks.implicitbbq").joinpath(f"resources/{name}").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def load_exclusions() -> dict[str, dict[str, frozenset[str]]]:
    """``implicitbbq_exclusions.yaml`` as dimension -> template Q_id -> the cues excluded for it.

    ``"*"`` expands to every cue of the dimension (the template is removed whole). A cue that is
    not in Table 4 is an error, so a typo cannot silently keep a causally tied cue.
    """
    table = load_cue_table()
    out: dict[str, dict[str, set[str]]] = {}
    for e in _resource("implicitbbq_exclusions.yaml")["exclusions"]:
        dim, cues = e["dimension"], set(e["cues"])
        known = {c for cs in table.groups[dim].values() for c in cs}
        if "*" in cues:
            cues = known
        if cues - known:
            raise ValueError(f"implicitbbq_exclusions.yaml: {dim} Q{e['q_id']}: not Table 4 cues: {sorted(cues - known)}")
        out.setdefault(dim, {}).setdefault(str(e["q_id"]), set()).update(cues)
    return {d: {q: frozenset(c) for q, c in qs.items()} for d, qs in out.items()}


@lru_cache(maxsize=1)
def load_cue_sentences() -> dict[str, str]:
    """``implicit_cue_sentences.yaml``: Table 4 cue -> its sentence form (``{person}`` placeholder, no full stop)."""
    raw = _resource("implicit_cue_sentences.yaml")["sentences"]
    table = load_cue_table()
    cues = {c for g in table.groups.values() for cs in g.values() for c in cs} | set(table.neutral)
    missing = sorted(cues - set(raw))
    if missing:
        raise ValueError(f"implicit_cue_sentences.yaml: no sentence for {missing}")
    return {k: v for k, v in raw.items() if k in cues}


def cue_sentence(cue: str, person: str) -> str:
    """The background sentence of ``cue`` for ``person``: ``("has beard", "Person A")`` -> ``"Person A has a beard."``."""
    return load_cue_sentences()[cue].format(person=person) + "."


@dataclass(frozen=True)
class BoundTemplate:
    """A template whose group is bound to a slot by its wording (``implicitbbq_bound.yaml``)."""

    dimension: str
    q_id: str
    wording: str
    explicit: str  # keep | slot_groups | exclude
    implicit: str  # keep | exclude | rewrite
    rewrites: tuple[tuple[str, str], ...] = ()  # (regex, replacement) on the implicit text
    reason: str = ""

    def rewrite(self, text: str) -> str:
        for pattern, repl in self.rewrites:
            text = re.sub(pattern, repl, text)
        return text


@lru_cache(maxsize=1)
def load_bound_templates() -> dict[tuple[str, str], BoundTemplate]:
    """``implicitbbq_bound.yaml`` as (dimension, Q_id) -> :class:`BoundTemplate`."""
    out = {}
    for e in _resource("implicitbbq_bound.yaml")["bound"]:
        imp = e["implicit"]
        rewrites = tuple(imp["rewrite"].items()) if isinstance(imp, dict) else ()
        b = BoundTemplate(e["dimension"], str(e["q_id"]), e["wording"], e["explicit"],
                          "rewrite" if rewrites else imp, rewrites, e.get("reason", ""))
        if b.explicit not in ("keep", "slot_groups", "exclude") or b.implicit not in ("keep", "exclude", "rewrite"):
            raise ValueError(f"implicitbbq_bound.yaml: {b.dimension} Q{b.q_id}: unknown treatment")
        out[(b.dimension, b.q_id)] = b
    return out


@dataclass(frozen=True)
class PersonFix:
    """Hand-written corrections of one template's automatic Person A/B form (``implicitbbq_person_fixes.yaml``)."""

    dimension: str
    q_id: str
    rows: frozenset[int] | None  # template rows it is for (None: every row)
    fixes: tuple[tuple[str, str], ...]  # (regex, replacement), applied in order
    broken: str = ""

    def applies_to(self, row: int) -> bool:
        return self.rows is None or row in self.rows

    def apply(self, text: str, hits: list[int] | None = None) -> str:
        """``text`` with every fix applied; ``hits[k]`` (when given) is increased by fix k's substitutions."""
        for k, (pattern, repl) in enumerate(self.fixes):
            text, n = re.subn(pattern, repl, text)
            if hits is not None:
                hits[k] += n
        return text


@lru_cache(maxsize=1)
def load_person_fixes() -> dict[tuple[str, str], tuple[PersonFix, ...]]:
    """``implicitbbq_person_fixes.yaml`` as (dimension, Q_id) -> its :class:`PersonFix` entries.

    Raises ``ValueError`` naming the entry for an unknown dimension, an empty fix list or a regex
    that does not compile.
    """
    dims = set(load_cue_table().groups)
    out: dict[tuple[str, str], list[PersonFix]] = {}
    for i, e in enumerate(_resource("implicitbbq_person_fixes.yaml")["fixes"]):
        where = f"implicitbbq_person_fixes.yaml entry {i} ({e.get('dimension')} Q{e.get('q_id')})"
        if e.get("dimension") not in dims or not e.get("fix"):
            raise ValueError(f"{where}: needs a known dimension and a non-empty 'fix' list")
        fixes = []
        for pair in e["fix"]:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise ValueError(f"{where}: each fix is [regex, replacement], got {pair!r}")
            try:
                re.compile(pair[0])
            except re.error as exc:
                raise ValueError(f"{where}: bad regex {pair[0]!r}: {exc}") from None
            fixes.append((str(pair[0]), str(pair[1])))
        rows = frozenset(int(r) for r in e["rows"]) if e.get("rows") is not None else None
        fix = PersonFix(e["dimension"], str(e["q_id"]), rows, tuple(fixes), e.get("broken", ""))
        out.setdefault((fix.dimension, fix.q_id), []).append(fix)
    return {k: tuple(v) for k, v in out.items()}
