"""The shipped few-shot demonstrations and the one-word answer forms, checked against the real build (#14 parts 1-2).

Reads BBQ / BharatBBQ from ../shared/data (skipped without it).
"""

from collections import Counter

import pytest

from probe.tasks.implicitbbq.data import DIMENSIONS, build_implicitbbq
from probe.tasks.implicitbbq.fewshot_sets import AUDIT_SKIP, demo_role, make_demo_sets, set_balance
from probe.tasks.bbq.answer_forms import load_unknown_answers
from probe.tasks.bbq.answer_forms import option_forms
from probe.tasks.implicitbbq.fewshot import DemoSets, load_demo_sets


@pytest.fixture(scope="module")
def full():
    from tests.conftest import SHARED_DATA

    if not (SHARED_DATA / "bbq").is_dir() or not (SHARED_DATA / "bharatbbq").is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return build_implicitbbq(DIMENSIONS, SHARED_DATA / "bbq", SHARED_DATA / "bharatbbq", controls=False,
                             explicit_set="full")


def test_shipped_demos_are_built_items_of_their_kind_and_role(full):
    by_id = {it.id: it for it in full}
    sets = load_demo_sets()["sets"]
    demos = DemoSets(full)  # every id resolves
    for dim, kinds in sets.items():
        for kind, slots in kinds.items():
            for s in slots:
                for d in (s, s["alternate"]):
                    it = by_id[d["id"]]
                    assert it.category == dim and it.context_kind == kind  # own kind, never a control
                    assert it.template_id == d["template"]
                    assert demo_role(it) == (s["condition"], s["polarity"], s["answer"])
                    assert (dim, kind, it.template_id) not in AUDIT_SKIP
                    if kind == "implicit" and s["answer"] != "unknown":
                        assert it.options[it.label] == s["person"]
                    if kind == "implicit":
                        assert it.background  # a Person context with its cues
            # a test item from a primary's template gets that slot's alternate, never its own template
            for s in slots:
                probe_item = by_id[s["id"]]
                choice = demos.select(probe_item, 5)
                assert all(d.template_id != probe_item.template_id for d in choice.demos)
                assert s["slot"] in choice.fallback and len(choice.demos) == 5 and not choice.skipped


def test_shipped_demos_are_what_the_generator_makes(full):
    """The file is the contract; the seeded generator reproduces it (so it can be re-made and re-audited)."""
    data = load_demo_sets()
    made = make_demo_sets(full, DIMENSIONS, data["seed"])
    assert made == data["sets"]
    assert set_balance(made) == data["balance"]
    assert Counter(s["answer"] for k in made.values() for ss in k.values() for s in ss)["unknown"] == 24


def test_answer_forms_never_shared_or_contained_across_options(full):
    """Over the full build: no surface form of one option is another option's form, or starts one."""
    _, paraphrases = load_unknown_answers()
    seen = set()
    lower = 0
    for it in full:
        key = (it.options, it.group_words, bool(it.metadata.get("proper_names")), it.unknown_index)
        if key in seen:
            continue
        seen.add(key)
        forms = option_forms(it, paraphrases)
        for i in range(3):
            if i != it.unknown_index:
                assert forms[i][0][:1].isupper() or forms[i][0][:1].isdigit()  # a capitalised form first
                lower += forms[i][0] != it.options[i]
            for j in range(3):
                if i != j:
                    assert not any(b == a or b.startswith(a) for a in forms[i] for b in forms[j]), (it.id, forms)
    assert lower > 0
