"""Cue table, exclusion list and the "Person A"/"Person B" rewrite used by the ImplicitBBQ builder.

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

from probe.data.bbq import group_key

__all__ = ["CueTable", "load_cue_table", "load_exclusions", "load_unknown_answers", "person_agreement", "person_rewrite"]

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


@dataclass(frozen=True)
class CueTable:
    """The seed's Table 4 as loaded from ``implicit_cues.yaml``."""

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
    """Load ``probe/data/resources/implicit_cues.yaml`` (cached)."""
    raw: dict[str, Any] = yaml.safe_load(
        resources.files("probe.data").joinpath("resources/implicit_cues.yaml").read_text(encoding="utf-8"))
    groups, mapping, sources = {}, {}, {}
    for dim, spec in raw["dimensions"].items():
        groups[dim] = {g: tuple(c) for g, c in spec["groups"].items()}
        mapping[dim] = {group_key(k): v for k, v in spec["mapping"].items()}
        sources[dim] = spec["source"]
        bad = set(mapping[dim].values()) - set(groups[dim])
        if bad:
            raise ValueError(f"implicit_cues.yaml: dimension {dim!r} maps to unknown groups {sorted(bad)}")
    return CueTable(groups=groups, mapping=mapping, sources=sources, neutral=tuple(raw["neutral"]))


@lru_cache(maxsize=1)
def load_exclusions() -> dict[str, frozenset[str]]:
    """``implicitbbq_exclusions.yaml`` as dimension -> excluded template Q_ids."""
    raw = yaml.safe_load(resources.files("probe.data").joinpath(
        "resources/implicitbbq_exclusions.yaml").read_text(encoding="utf-8"))
    out: dict[str, set[str]] = {}
    for e in raw["exclusions"]:
        out.setdefault(e["dimension"], set()).add(str(e["q_id"]))
    return {k: frozenset(v) for k, v in out.items()}


@lru_cache(maxsize=1)
def load_unknown_answers() -> tuple[str, tuple[str, ...]]:
    """(canonical Unknown text, its paraphrases) from ``unknown_answers.yaml``."""
    raw = yaml.safe_load(resources.files("probe.data").joinpath(
        "resources/unknown_answers.yaml").read_text(encoding="utf-8"))
    return raw["canonical"], tuple(raw["paraphrases"])
