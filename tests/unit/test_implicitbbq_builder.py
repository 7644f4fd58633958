"""ImplicitBBQ builder: cue table, Person rewrite, settings, counterbalancing, exclusions, counts."""

from collections import Counter

import pytest

from probe.tasks.implicitbbq.implicit_text import load_cue_table, load_exclusions, person_agreement, person_rewrite
from probe.tasks.bbq.answer_forms import load_unknown_answers
from probe.tasks.implicitbbq.data import DIMENSIONS, build_implicitbbq, count_table, format_count_table
from probe.tasks.bbq.items import SETTINGS


@pytest.fixture(scope="module")
def items(implicitbbq_matched):
    """``build_implicitbbq()``, built once per test run (tests/conftest.py)."""
    return implicitbbq_matched


def test_cue_table_is_table4():
    t = load_cue_table()
    assert t.dimensions == DIMENSIONS
    n_cues = sum(len(c) for g in t.groups.values() for c in g.values())
    # Table 4 as printed lists 63 cues; the seed's text says 64 (one is missing from the table)
    assert n_cues == 63
    assert len(t.neutral) == 8
    assert "prays namaz" in t.groups["religion"]["Muslim"]
    assert t.cue_group("age", "grandfather", "old") == "Old"
    assert t.cue_group("region", "British", "Europe") is None  # no validated cue
    assert t.cue_group("caste", "shudra caste", "shudra caste") == "Dalit"


def test_unknown_paraphrases_no_prefix_overlap():
    canonical, paras = load_unknown_answers()
    assert canonical == "Unknown" and canonical in paras
    for a in paras:
        for b in paras:
            assert a == b or not b.startswith(a + " ") and not (b.startswith(a) and b != a), (a, b)


def test_person_rewrite():
    assert person_rewrite("The {{NAME1}} person and a {{NAME2}} man met.", "Person A", "Person B") == \
        "Person A and Person B met."
    assert person_rewrite("my {{NAME1}} friend's car", "Person B", "Person A") == "Person B's car"
    assert person_rewrite("a {{NAME1}} {{WORD1}} and", "Person A", "Person B", word1="man") == "Person A and"
    assert person_rewrite("a {{NAME1}} {{WORD1}} and", "Person A", "Person B", word1="drinks") == \
        "Person A {{WORD1}} and"


@pytest.mark.parametrize("text, want", [
    ("while Person A are more open and friendly.", "while Person A is more open and friendly."),
    ("Person B have set up a range; Person A aren't and weren't.", "Person B has set up a range; Person A isn't and weren't."),
    ("Person A don't care.", "Person A doesn't care."),
    ("Person A and Person B were late.", "Person A and Person B were late."),  # a plural subject
    ("the parents of Person B were open", "the parents of Person B were open"),  # not the subject
    ("Person A and a Person B were talking", "Person A and Person B were talking"),  # article left by a group noun
    ("Person A arena", "Person A arena"),  # only whole words
])
def test_person_agreement(text, want):
    assert person_agreement(text, ("Person A", "Person B")) == want


def test_no_plural_verb_after_a_lone_person(items):
    import re

    lone = re.compile(r"(?<!\band )(?<!\bof )\bPerson [AB] (are|were|have|aren't|weren't)\b")
    bad = [it.id for it in items if lone.search(it.context) or lone.search(it.question)]
    assert not bad, bad[:5]


def test_all_twelve_settings_every_dimension(items):
    cells = Counter((it.category, it.setting) for it in items)
    for d in DIMENSIONS:
        for s in SETTINGS:
            assert cells[(d, s)] > 0, (d, s)


def test_implicit_items_have_no_group_words_and_two_cues(items):
    t = load_cue_table()
    imp = [it for it in items if it.context_kind == "implicit"]
    for it in imp[:: max(1, len(imp) // 500)]:
        lines = it.background.split("\n")
        assert [ln[:8] for ln in lines] == ["Person A", "Person B"] and all(ln.endswith(".") for ln in lines)
        assert set(it.options) == {"Person A", "Person B", "Unknown"}
        assert "{{" not in it.context + it.question
        for name in it.metadata["source_names"]:
            assert name.lower() not in it.context.lower().split(), (name, it.context)
        assert it.metadata["cue1"] in t.groups[it.category][it.metadata["group1"]]
        assert it.metadata["cue2"] in t.groups[it.category][it.metadata["group2"]]
        assert it.options[it.target_index] == it.metadata["person1" if it.metadata["target_group"] ==
                                                             it.metadata["group1"] else "person2"]


def test_all_cue_combinations_and_counterbalancing(items):
    t = load_cue_table()
    by_ctx = {}
    for it in items:
        if it.context_kind == "implicit" and it.setting == "implicit_amb_neg":
            by_ctx.setdefault(it.metadata["context_id"], []).append(it)
    excl = load_exclusions()
    for ctx, its in list(by_ctx.items())[:50] + list(by_ctx.items())[-50:]:
        dim, g1, g2 = its[0].category, its[0].metadata["group1"], its[0].metadata["group2"]
        bad = excl.get(dim, {}).get(its[0].metadata["q_id"], frozenset())
        want = [(a, b) for a in t.groups[dim][g1] for b in t.groups[dim][g2] if a not in bad and b not in bad]
        assert sorted((it.metadata["cue1"], it.metadata["cue2"]) for it in its) == sorted(want)
    persons = Counter(it.metadata["person1"] for its in by_ctx.values() for it in its)
    assert abs(persons["Person A"] - persons["Person B"]) <= len(by_ctx)  # alternation: at most 1 per context


def test_controls(items):
    t = load_cue_table()
    neu = [it for it in items if it.context_kind == "neutral"]
    noc = [it for it in items if it.context_kind == "nochar"]
    assert neu and noc
    assert all(it.metadata["cue1"] in t.neutral and it.metadata["cue2"] in t.neutral for it in neu[:200])
    assert all(it.background == "" for it in noc)
    assert {it.context_condition for it in neu} == {"ambig", "disambig"}


def test_exclusions_applied(items):
    excl = load_exclusions()
    assert "uses walking cane" in excl["age"]["2"] and "uses the latest smartphone" in excl["age"]["1"]
    for it in items:
        bad = excl.get(it.category, {}).get(it.metadata["q_id"], frozenset())
        assert it.metadata.get("cue1") not in bad and it.metadata.get("cue2") not in bad, it.id


def test_labels_consistent(items):
    for it in items[::97]:
        if it.context_condition == "ambig":
            assert it.label == it.unknown_index
        else:
            assert it.label != it.unknown_index


def test_counts_table(items):
    table = count_table(items)
    assert set(table) == set(DIMENSIONS) | {"total"}
    total = table["total"]
    assert total["implicit_contexts"] == sum(table[d]["implicit_contexts"] for d in DIMENSIONS)
    # our counts (lexical="first"): documented in docs/implicitbbq.md beside the seed's 760 / ~8k
    assert 300 < total["implicit_contexts"] < 1000
    assert total["implicit_amb_neg"] + total["implicit_amb_nonneg"] > 5000
    assert "760" in format_count_table(table)


def test_unknown_dimension_raises():
    with pytest.raises(ValueError, match="unknown ImplicitBBQ dimension"):
        build_implicitbbq(["race"])


def test_kept_build_is_redone_when_a_template_file_changes(tmp_path):
    import shutil

    from tests.conftest import SHARED_DATA

    if not (SHARED_DATA / "bbq" / "templates").is_dir():
        pytest.skip("shared BBQ templates not found")
    tdir = tmp_path / "bbq" / "templates"
    shutil.copytree(SHARED_DATA / "bbq" / "templates", tdir)
    stats: dict = {}
    first = build_implicitbbq(["age"], bbq_dir=tmp_path / "bbq", controls=False, explicit_set="full", stats=stats)
    again: dict = {}
    assert build_implicitbbq(["age"], bbq_dir=tmp_path / "bbq", controls=False, explicit_set="full",
                             stats=again) == first
    assert again == stats and again is not stats  # the stats too, in the caller's own dict
    # the age templates without their last rows: a smaller file, read anew
    csv = tdir / "Age.csv"
    lines = csv.read_text(encoding="utf-8").splitlines(keepends=True)
    csv.write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    fewer = build_implicitbbq(["age"], bbq_dir=tmp_path / "bbq", controls=False, explicit_set="full")
    assert 0 < len(fewer) < len(first) and {it.id for it in fewer} < {it.id for it in first}
