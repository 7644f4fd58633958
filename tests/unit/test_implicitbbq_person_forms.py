"""ImplicitBBQ Person A/B forms read as sentences (issue #23 part 2).

Builds every implicit and control context from the real templates and fails on the broken patterns
the automatic rewrite used to produce ("A person Person A and Person B", "many of Person A get off
track", "one had Person A teacher", "stay around Person A side of town", ...).
"""

from collections import defaultdict

import pytest

from probe.tasks.implicitbbq.implicit_text import BROKEN_PERSON_PATTERNS, PersonFix, load_person_fixes, person_problems

# Typos of BBQ's own templates, present in the explicit item too: kept so that the implicit text
# differs from the explicit one only in how the persons are named.
BBQ_TYPOS = {("religion", "3"): "people people", ("religion", "5"): "with with"}


@pytest.fixture(scope="module")
def built(implicitbbq_full):
    """``build_implicitbbq(stats=stats, explicit_set="full")`` and its stats, built once per test run."""
    return implicitbbq_full


@pytest.mark.parametrize("text, name", [
    ("A person Person A and Person B had to complete forms.", "determiner before a person"),
    ("The Person A felt they were at a disadvantage.", "determiner before a person"),
    ("while the motivated Person B passionately advocated", "determiner before a person"),
    ("The parents Person A never showed up.", "determiner before a person"),
    ("Students from Person A and Person B are classmates.", "group noun before a person"),
    ("a group of Person A and another group of Person B", "group noun before a person"),
    ("many of Person A get off track", "quantifier before a person"),
    ("needles that were left behind by all Person A.", "quantifier before a person"),
    ("Two politicians, one Person A and the other Person B, debated.", "'one' used as a group adjective"),
    ("one of them from Person A and the other from Person B", "'one' used as a group adjective"),
    ("a neighbor who's Person B", "'who's' + person (a group description)"),
    ("Two old friends, now Person A and Person B, talked.", "'who's' + person (a group description)"),
    ("one had Person A teacher and the other Person B teacher", "noun after a person (possessive missing)"),
    ("stay around Person A side of town", "noun after a person (possessive missing)"),
    ("while Person A home will be a breeze to sell", "noun after a person (possessive missing)"),
    ("the only two houses within 5 miles are Person A and Person B.", "a place named as a person"),
    ("while in contrast their parents of Person B were open", "'their X of' + person"),
    ("including Person A and Person B Person A showed up early", "two persons without a conjunction"),
    ("While Person B flourish, others struggle.", "plural verb after a lone person"),
    ("Person A rarely come to the conferences", "plural verb after a lone person"),
    ("They met a the teacher.", "doubled article"),
    ("They met with with the police.", "doubled word"),
])
def test_person_problems_catch_each_broken_form(text, name):
    assert name in {n for n, _ in person_problems(text)}, person_problems(text)


@pytest.mark.parametrize("text", [
    "I saw Person A and Person B last week outside the Walmart.",
    "one was Person A, and the other Person B.",  # an elided "was" reads well
    "one of the drivers was Person A and the other driver Person B.",
    "It's just that Person B is out at all hours, while Person A can't keep track.",
    "Person A and Person B were late, and the parents of Person B were open to anything.",
    "the child of Person B has been having issues; Person A's arms had bruises.",
    "The parents of Person A rarely come to the conferences.",
    "Person A had had enough.",
])
def test_person_problems_leave_fluent_text_alone(text):
    assert person_problems(text) == []


def test_every_pattern_has_a_name_and_compiles():
    import re

    names = [n for n, _ in BROKEN_PERSON_PATTERNS]
    assert len(names) == len(set(names))
    for _, p in BROKEN_PERSON_PATTERNS:
        re.compile(p)


def test_person_fix_apply_counts_hits():
    fix = PersonFix("ses", "24", None, ((r"\b[Aa] person (Person [AB])", r"\1"), (r"\b[Tt]he (Person [AB])", r"\1")))
    hits = [0, 0]
    out = fix.apply("A person Person B and a person Person A met. The Person B left.", hits)
    assert out == "Person B and Person A met. Person B left." and hits == [2, 1]
    assert fix.applies_to(7) and not PersonFix("ses", "1", frozenset({0}), ()).applies_to(1)


def test_no_implicit_or_control_context_is_broken(built):
    items, _ = built
    explicit_text = defaultdict(str)
    for it in items:
        if it.context_kind == "explicit":
            explicit_text[(it.category, it.template_id.rsplit(":", 1)[1])] += it.context + " "
    for key, typo in BBQ_TYPOS.items():  # a typo is allowed only where BBQ's explicit text has it too
        assert typo in explicit_text[key], key
    bad: dict[tuple, set] = defaultdict(set)
    n = 0
    for it in items:
        if it.context_kind == "explicit":
            continue
        n += 1
        key = (it.category, it.metadata["q_id"])
        allowed = (BBQ_TYPOS[key],) if key in BBQ_TYPOS else ()
        for text in (it.context, it.question):
            for name, hit in person_problems(text, allowed):
                bad[key + (it.metadata["row"],)].add(f"{name}: {hit!r}")
    assert n > 30_000  # implicit + neutral + no-characteristics, every dimension
    assert not bad, "\n".join(f"{k}: {sorted(v)}" for k, v in sorted(bad.items()))


def test_every_hand_fix_is_used(built):
    """A fix that matches nothing is stale (the template or the automatic rewrite changed)."""
    _, stats = built
    hits = {(dim, key): h for dim, s in stats.items() for key, h in s["person_fix_hits"].items()}
    for (dim, q), fixes in load_person_fixes().items():
        for fix in fixes:
            key = q + (":" + ",".join(map(str, sorted(fix.rows))) if fix.rows else "")
            assert (dim, key) in hits, (dim, key)
            assert all(n > 0 for n in hits[(dim, key)]), (dim, key, hits[(dim, key)])


def test_issue_templates_are_fixed():
    """The templates issue #23 names (SES has 12 here; SES Q8 has no implicit form)."""
    fixed = set(load_person_fixes())
    named = {("gender", "7"), ("region", "10"), ("region", "17"), ("region", "19"), ("religion", "14"),
             ("religion", "20"), ("religion", "23")}
    assert named <= fixed
    assert len({q for d, q in fixed if d == "ses"}) == 12
