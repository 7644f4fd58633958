"""ImplicitBBQ builder faithful to the paper (issue #14 parts 3-7): slot-bound groups, unique ids,
no group words in implicit contexts, cue sentences, per-cue exclusions, no duplicate contexts, the
matched explicit set and its counts in records.

Each test here would have failed on the builder before the fix it names.
"""

import re
from collections import Counter, defaultdict
from pathlib import Path

import pandas as pd
import pytest

from probe.tasks.bbq.templates import parse_name_lists, read_templates
from probe.tasks.implicitbbq.implicit_text import (cue_sentence, load_bound_templates, load_cue_sentences, load_cue_table,
                                                   load_exclusions)
from probe.tasks.implicitbbq.data import DIMENSIONS, build_implicitbbq
from probe.tasks.implicitbbq.match import format_record_counts, match_explicit, record_counts, weights

DOCS = Path(__file__).resolve().parents[2] / "docs" / "implicitbbq.md"
# Group words that occur in an implicit context without naming a person's group (reviewed by hand).
ALLOWED = {
    ("age", "23", "kid"): "'even as a kid': both persons' childhood, not an age group",
    ("ses", "14", "poor"): "'poor English skills': the question's attribute, not SES",
}


def _shared():
    from tests.conftest import SHARED_DATA

    if not (SHARED_DATA / "bbq").is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="module")
def built(implicitbbq_full):
    # every explicit filling (the slot-bound checks need SES Q8's explicit items, which the matched set drops);
    # built once per test run (tests/conftest.py)
    return implicitbbq_full


@pytest.fixture(scope="module")
def items(built):
    return built[0]


def _group_words(shared: Path) -> dict[str, set[str]]:
    """Per dimension, every slot word of its templates that names a cue group (+ gendered pronouns)."""
    table = load_cue_table()
    tdir = shared / "bbq" / "templates"
    vocab = pd.read_csv(tdir / "vocabulary.csv", dtype=str).fillna("")
    words: dict[str, set[str]] = defaultdict(set)
    from probe.tasks.bbq.bharatbbq import bharatbbq_template_rows

    for dim, src in table.sources.items():
        kind, cat = src.split(":")
        rows = bharatbbq_template_rows(shared / "bharatbbq") if kind == "bharatbbq" else \
            read_templates(tdir / f"{cat}.csv", "bbq", cat)
        cands = [(n, i) for n, i in zip(vocab[vocab.Category == cat].Name, vocab[vocab.Category == cat].Info)]
        for r in rows:
            for side, lst in zip((1, 2), parse_name_lists(r.fields.get("Names", ""))):
                cands += [(w, r.fields.get(f"NAME{side}_info", "")) for w in lst]
            for side, lst in zip((1, 2), parse_name_lists(r.fields.get("Lexical_diversity", ""))):
                cands += [(w, "") for w in lst]  # SES Q8: "from a {{WORD1}} family" carries the group
        words[dim] = {re.sub(r"[-_]", " ", w.lower()) for w, i in cands if w and table.cue_group(dim, w, i)}
    words["gender"] |= {"he", "she", "him", "her", "his", "hers", "himself", "herself"}
    return words


def test_unique_ids_over_the_full_build(items):
    ids = Counter(it.id for it in items)
    assert not [i for i, n in ids.items() if n > 1]


def test_unique_ids_all_lexical_variants():
    _shared()
    items = build_implicitbbq(["ses", "gender"], lexical="all", controls=False)
    assert len({it.id for it in items}) == len(items)


def test_no_implicit_context_contains_its_group_words(items):
    """Over the full build: an implicit or control context / question never names its own groups
    (before: SES Q8 said "Person A is from a low income family"; gender Q7 "because she had")."""
    words = _group_words(_shared())
    pats = {d: [(w, re.compile(rf"\b{re.escape(w)}\b")) for w in ws] for d, ws in words.items()}
    leaks = Counter()
    for it in items:
        if it.context_kind == "explicit":
            continue
        text = re.sub(r"[-_]", " ", f"{it.context} {it.question}".lower())
        for w, pat in pats[it.category]:
            if pat.search(text) and (it.category, it.metadata["q_id"], w) not in ALLOWED:
                leaks[(it.category, it.metadata["q_id"], w)] += 1
    assert not leaks, leaks.most_common(10)
    assert {"low income", "wealthy", "she", "grandfather"} <= words["ses"] | words["gender"] | words["age"]


def test_ses_q8_groups_follow_the_wording(items):
    """SES Q8 binds the group to the slot ("{{NAME1}} is from a {{WORD1}} family"): the explicit target
    is always the low-income person, and the template has no implicit form."""
    q8 = [it for it in items if it.category == "ses" and it.metadata["q_id"] == "8"]
    exp = [it for it in q8 if it.context_kind == "explicit"]
    assert exp and not [it for it in q8 if it.context_kind != "explicit"]
    low = ("low income", "poor", "working-class")
    for it in exp:
        target = it.options[it.target_index]
        m = re.search(rf"{re.escape(target)} is from an? ([\w -]+?) family", it.context)
        assert m and m.group(1) in low, (it.id, it.context)
        assert it.metadata["target_group"] == "Low SES"


def test_gender_q7_pronoun_rewritten(items):
    q7 = [it for it in items if it.category == "gender" and it.metadata["q_id"] == "7"
          and it.context_kind != "explicit" and it.context_condition == "disambig"]
    # the bound rewrite makes it "they had"; the hand fix (implicitbbq_person_fixes.yaml) names the person,
    # as "they" could be the parents
    assert q7 and all(re.search(r"with (Person [AB]) because \1 had more years", it.context) for it in q7)
    assert not any(re.search(r"\b(she|he)\b", it.context, re.I) for it in q7)


def test_bound_templates_listed_and_applied(items):
    bound = load_bound_templates()
    assert {("ses", "8"), ("gender", "7"), ("gender", "35"), ("gender", "36")} <= set(bound)
    present = {(it.category, it.metadata["q_id"], it.context_kind == "explicit") for it in items}
    for (dim, q), b in bound.items():
        assert ((dim, q, True) in present) == (b.explicit != "exclude"), (dim, q)
        assert ((dim, q, False) in present) == (b.implicit != "exclude"), (dim, q)
    doc = DOCS.read_text(encoding="utf-8")
    for (dim, q), b in bound.items():
        assert f"| {dim} | Q{q} |" in doc, (dim, q)


def test_kept_templates_target_a_cued_group(items):
    """A template whose stereotyped group has no cue (trans: gender Q35/Q36) is not in the build."""
    t = load_cue_table()
    for it in items[::13]:
        assert any(t.cue_group(it.category, g, g) for g in it.stereotyped_groups), it.id


def test_cue_sentences_grammatical_and_used(items):
    t = load_cue_table()
    sent = load_cue_sentences()
    cues = [c for g in t.groups.values() for cs in g.values() for c in cs] + list(t.neutral)
    assert set(sent) == set(cues) and len(cues) == 71
    assert cue_sentence("has beard", "Person A") == "Person A has a beard."  # the paper's own example
    assert cue_sentence("has smooth skin", "Person A") == "Person A has smooth skin."  # appendix B
    assert cue_sentence("ancestors used to live in a fort", "Person B") == "Person B's ancestors used to live in a fort."
    for cue, s in sent.items():
        assert s.startswith("{person}") and not s.endswith(".")
        # the Table 4 shorthand with only articles, "from" and a possessive added (one tense: nikkah)
        def norm(x: str) -> list[str]:
            return [w for w in re.sub(r"'s\b", "", x).split() if w not in ("a", "an", "the", "from")]
        assert norm(s.format(person="")) == norm(cue) or cue == "has nikkah", (cue, s)
    for it in items[::50]:
        if it.background:
            a, b = it.background.split("\n")
            assert a == cue_sentence(it.metadata["cue1" if it.metadata["person1"] == "Person A" else "cue2"], "Person A")
            assert b == cue_sentence(it.metadata["cue2" if it.metadata["person1"] == "Person A" else "cue1"], "Person B")


def test_cue_sentence_table_in_docs():
    doc = DOCS.read_text(encoding="utf-8")
    t = load_cue_table()
    for dim, groups in t.groups.items():
        for g, cues in groups.items():
            for c in cues:
                assert f"| {dim} | {g} | {c} | {cue_sentence(c, 'Person A')} |" in doc, c
    for c in t.neutral:
        assert f"| neutral | - | {c} | {cue_sentence(c, 'Person A')} |" in doc, c


def test_exclusions_per_cue_age_q1_stays(items):
    """Age Q1 (phone use) is the paper's appendix B example: it stays, without the phone cues only."""
    q1 = [it for it in items if it.category == "age" and it.metadata["q_id"] == "1"]
    kinds = {it.context_kind for it in q1}
    assert kinds == {"explicit", "implicit", "neutral", "nochar"}
    cues = {it.metadata["cue1"] for it in q1 if it.context_kind == "implicit"} | \
        {it.metadata["cue2"] for it in q1 if it.context_kind == "implicit"}
    assert "has wrinkles" in cues and "has smooth skin" in cues
    assert not cues & {"uses the latest smartphone", "is active on social media"}


def test_exclusions_per_cue_not_per_template(built):
    items, stats = built
    excl = load_exclusions()
    kept = {(it.category, it.metadata["q_id"]) for it in items if it.context_kind == "implicit"}
    whole = {(d, q) for d, s in stats.items() for q in s["templates_excluded"]}
    assert ("religion", "15") in whole  # cues: "*"
    for dim, qs in excl.items():
        for q in qs:
            assert ((dim, q) in kept) != ((dim, q) in whole), (dim, q)
    assert ("caste", "25") in kept  # loses its Dalit-Vaishya pair only (both groups' single cues)
    assert not {(it.category, it.metadata["q_id"]) for it in items} & whole  # explicit and controls too
    # counterbalanced over the kept combinations: Person A in slot 1 for half of each context's cues
    by_ctx = defaultdict(list)
    for it in items:
        if it.context_kind == "implicit" and it.setting == "implicit_amb_neg":
            by_ctx[it.metadata["context_id"]].append(it.metadata["person1"])
    assert all(abs(p.count("Person A") - p.count("Person B")) <= 1 for p in by_ctx.values())


def test_no_duplicate_implicit_contexts(built):
    """Gender's proper-name rows repeat its group-word rows once written with Person A/B (24 of 92)."""
    items, stats = built
    seen = defaultdict(set)
    for it in items:
        if it.context_kind == "implicit" and it.setting == "implicit_dis_neg":
            m = it.metadata
            p1 = m["person1"]
            key = (it.context if p1 == "Person A" else None, it.question, m["group1"], m["group2"], m["target_group"])
            if key[0] is not None:
                seen[key].add(m["context_id"])
    dup = {k: v for k, v in seen.items() if len(v) > 1}
    assert not dup, list(dup.items())[:2]
    assert stats["gender"]["duplicate_contexts"] == 24


@pytest.fixture(scope="module")
def matched(items):
    return match_explicit(items)


def test_matched_explicit_weights_equal_implicit(items, matched):
    """Each (dimension, template) weighs the same in the explicit and the implicit set (before: SES 48 %
    of the explicit records, religion 2.8 %)."""
    full = weights(items, "explicit")
    assert full[("ses", "8")] and max(full.values()) / min(full.values()) > 10  # unmatched before
    imp, exp = weights(matched, "implicit"), weights(matched, "explicit")
    assert exp == imp  # default size: exactly the implicit units of every template
    dims = Counter()
    for (d, _), n in exp.items():
        dims[d] += n
    assert dims["ses"] / sum(dims.values()) < 0.3 and dims["religion"] / sum(dims.values()) > 0.25
    small = weights(match_explicit(items, size=8500), "explicit")
    n_imp, n_small = sum(imp.values()), sum(small.values())
    assert n_small == 4250
    assert all(abs(small[t] - n_small * imp[t] / n_imp) < 1 for t in imp)  # largest remainders
    ids = [it.id for it in matched]
    assert len(ids) == len(set(ids))
    assert not [it for it in matched if it.category == "ses" and it.metadata["q_id"] == "8"]
    # copies share their context (one bootstrap cluster) and text
    copies = [it for it in matched if it.metadata.get("explicit_copy", 0) > 0]
    first = {it.id: it for it in matched if it.metadata.get("explicit_copy") == 0}
    assert copies
    for it in copies[::97]:
        orig = first[f"{it.metadata['context_id']}-{it.context_condition}-{it.question_polarity}"]
        same = ("context", "question", "options", "label", "target_index")
        assert [getattr(orig, k) for k in same] == [getattr(it, k) for k in same]


def test_matched_explicit_deterministic_and_nested(items, matched):
    """Seeded and deterministic; building one dimension gives the same explicit set as the full build's."""
    assert [it.id for it in match_explicit(items)] == [it.id for it in matched]
    religion = build_implicitbbq(["religion"], controls=False)  # default: the matched set
    assert sorted(it.id for it in religion if it.context_kind == "explicit") == \
        sorted(it.id for it in matched if it.context_kind == "explicit" and it.category == "religion")
    other = {it.id for it in match_explicit(items, seed=1) if it.context_kind == "explicit"}
    assert other != {it.id for it in matched if it.context_kind == "explicit"}


def test_count_table_in_docs(items, matched):
    """docs/implicitbbq.md shows the count table the builder prints (records = context x question)."""
    table = format_record_counts(record_counts(matched, items))
    doc = DOCS.read_text(encoding="utf-8")
    for line in table.splitlines():
        assert line in doc, line
