"""BBQItem schema, BBQ JSONL loader, template expander (vs BBQ's shipped JSONL), BharatBBQ."""

import json
import re

import pytest

from probe.data.bbq import find_target_index, group_key, load_bbq_jsonl
from probe.data.bbq_templates import expand_templates, parse_name_lists
from probe.data.bharatbbq import expand_bharatbbq_templates, load_bharatbbq_examples
from probe.data.items import SETTINGS, BBQItem, setting_name
from probe.errors import InputError


def _item(**kw):
    base = dict(id="x", source="t", category="Age", context="c", question="q", options=("a", "b", "Unknown"),
                label=2, target_index=0, unknown_index=2, question_polarity="neg", context_condition="ambig")
    base.update(kw)
    return BBQItem(**base)


def test_item_json_round_trip_and_validation():
    it = _item(answer_info={"ans0": ["a", "old"]}, stereotyped_groups=("old",), metadata={"k": [1, 2]})
    assert BBQItem.from_json(it.to_json()) == it
    assert it.non_target_index == 1
    with pytest.raises(ValueError, match="options"):
        _item(options=("a", "b"))
    with pytest.raises(ValueError, match="target_index equals"):
        _item(target_index=2)
    with pytest.raises(ValueError, match="unknown BBQItem field"):
        BBQItem.from_dict({**json.loads(it.to_json()), "bogus": 1})


def test_twelve_settings():
    assert len(SETTINGS) == 12
    assert setting_name("implicit", "ambig", "neg") == "implicit_amb_neg"
    assert setting_name("neutral", "disambig", "nonneg") == "neutral_nonneg"


def test_group_key_and_target():
    assert group_key("low SES") == group_key("lowSES")
    assert group_key("woman") == group_key("F")
    assert find_target_index([["grandfather", "old"], ["grandson", "nonOld"], ["Unknown", "unknown"]], ["old"]) == 0
    assert find_target_index([["a", "x"], ["b", "y"], ["Unknown", "unknown"]], ["z"]) is None


def test_parse_name_lists():
    assert parse_name_lists("{{NAME2}}: [baniya];\n{{NAME1}}: [rajput, jaat]") == (["rajput", "jaat"], ["baniya"])


def test_loader_keeps_fields(shared_data):
    items = load_bbq_jsonl("Religion")
    assert len(items) == 1200
    it = items[0]
    assert it.answer_info["ans1"][1] == "unknown" and it.unknown_index == 1
    assert it.options[it.target_index] == "The Muslim one" and it.stereotyped_groups == ("Muslim",)
    assert it.metadata["source"].startswith("https://") and it.metadata["example_id"] == 0


def test_loader_error_names_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"example_id": 0}\n')
    with pytest.raises(InputError, match=r"line 1, field 'question_index'"):
        load_bbq_jsonl(p)


def _key(it):
    u = it.unknown_index
    ans = frozenset(o.strip() for i, o in enumerate(it.options) if i != u)
    label = "UNKNOWN" if it.label == u else it.options[it.label].strip()
    return (it.context, it.question, ans, label, it.options[it.target_index].strip(),
            it.question_polarity, it.context_condition)


@pytest.mark.parametrize("category", ["Age", "Nationality", "Religion"])
def test_expander_reproduces_shipped_jsonl(shared_data, category):
    """Every shipped BBQ instance is produced by the expander (same text, answers, label, target).

    BBQ samples names/lexical variants at random; the expander is exhaustive, so the
    JSONL must be a subset; answer order and Unknown wording are compared as sets.
    """
    expanded = expand_templates(category)
    keys = {_key(it) for it in expanded}
    shipped = load_bbq_jsonl(category)
    missing = [it for it in shipped if _key(it) not in keys]
    assert not missing, f"{len(missing)} shipped {category} items not expanded, e.g. {_key(missing[0])}"
    # each filled template gives the four conditions
    assert len(expanded) % 4 == 0
    assert {(it.context_condition, it.question_polarity) for it in expanded} == {
        ("ambig", "neg"), ("ambig", "nonneg"), ("disambig", "neg"), ("disambig", "nonneg")}


def test_expander_both_orders_and_determinism(shared_data):
    a = expand_templates("Religion", lexical="first")
    b = expand_templates("Religion", lexical="first")
    assert [x.id for x in a] == [x.id for x in b]
    orders = {(x.metadata["name1"], x.metadata["name2"]) for x in a if x.metadata["q_id"] == "1"}
    assert ("Muslim", "Jewish") in orders and ("Jewish", "Muslim") in orders


@pytest.mark.parametrize("category", ["SES", "Gender_identity", "Race_ethnicity"])
def test_template_only_categories_expand(shared_data, category):
    items = expand_templates(category, lexical="first")
    assert len(items) > 500
    for it in items[:200]:
        assert "{{" not in it.context + it.question + "".join(it.options)
        assert it.options[it.unknown_index] and it.target_index != it.unknown_index
    assert {it.context_condition for it in items} == {"ambig", "disambig"}


def test_bharatbbq_examples(shared_data):
    items = load_bharatbbq_examples()
    assert len(items) == 3864
    it = items[0]
    assert it.options == ("can't answer", "baniya", "rajput") and it.label == 0 and it.target_index == 1
    assert it.context_condition == "ambig" and it.category == "Caste"


def test_bharatbbq_templates_match_examples(shared_data):
    """Non-proper-name BharatBBQ examples are produced by the template expander (whitespace-normalised)."""
    def k(it):
        norm = lambda s: re.sub(r"\s+", " ", s).strip().lower()
        lab = "U" if it.label == it.unknown_index else norm(it.options[it.label])
        return norm(it.context), norm(it.question), lab, it.context_condition
    expanded = {k(it) for it in expand_bharatbbq_templates()}
    examples = [it for it in load_bharatbbq_examples() if it.metadata["Proper_Noun"] == "0"]
    found = sum(k(it) in expanded for it in examples)
    assert found / len(examples) > 0.9
