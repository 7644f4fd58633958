"""HBB builder: the paper's counts, Table 10 descriptors, slot filling, names, sampling, errors."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from probe.tasks.hbb.data import (
                                  HBBConcept,
                                  HBBInstance,
                                  build_instances,
                                  expected_counts,
                                  fill_option,
                                  load_concepts,
                                  load_default,
                                  load_descriptors,
                                  load_sg_variations,
                                  type_label,
                                  unique_questions,
                                  )
from probe.tasks.hbb.selection import sample_concepts, sample_per_cell, selected_instances
from probe.errors import InputError

PAPER_COUNTS = {"age": 4641, "gender": 6188, "race": 61880, "ses": 3094, "religions": 27846}


@pytest.fixture(scope="module")
def real():
    from tests.conftest import SHARED_DATA

    if not (SHARED_DATA / "hbb").is_dir():
        pytest.skip("shared HBB data not found")
    return load_default(SHARED_DATA / "hbb")


@pytest.fixture(scope="module")
def first_concept_instances(real):
    concepts, descriptors = real
    return list(build_instances(concepts[:1], descriptors))


def test_counts_equal_the_papers_table_5(real):
    concepts, descriptors = real
    assert len(concepts) == 1547
    counts = Counter(i.category for i in build_instances(concepts, descriptors))
    assert dict(counts) == PAPER_COUNTS
    assert sum(counts.values()) == 103649
    assert expected_counts(1547) == {**PAPER_COUNTS, "total": 103649}


def test_one_concept_gives_67_instances_from_50_distinct_questions(first_concept_instances):
    insts = first_concept_instances
    assert len(insts) == 3 + 4 + 40 + 2 + 18
    assert len({i.id for i in insts}) == len(insts)
    assert len(unique_questions(insts)) == 3 * 2 + 4 * 2 + 4 * 5 + 2 * 2 + 3 * 4
    per_cell = Counter((i.category, i.descriptor_type) for i in insts)
    assert per_cell[("race", 3)] == 10 and per_cell[("religions", 2)] == 6 and per_cell[("age", 1)] == 1


def _q(insts, category, dtype, identity):
    for i in insts:
        for q in (i.question_1, i.question_2):
            if (q.category, q.descriptor_type, q.identity) == (category, dtype, identity):
                return q
    raise AssertionError((category, dtype, identity))


def test_descriptor_types_follow_table_10(first_concept_instances):
    insts = first_concept_instances
    assert _q(insts, "gender", 1, "female").descriptor == "Mother"
    assert _q(insts, "gender", 3, "male").descriptor == "John"  # Gender 3 = names
    assert _q(insts, "gender", 4, "female").descriptor == "The woman"
    assert _q(insts, "race", 3, "asian").descriptor == "Aki"  # Race 3 = bare names
    assert _q(insts, "race", 4, "white").descriptor == "Amy, an American,"
    assert _q(insts, "race", 1, "latinx").descriptor.startswith("Alejandro, whose pet phrase")
    assert _q(insts, "religions", 1, "Christian").descriptor.endswith(", who actively participated in Bible study groups,")
    assert _q(insts, "religions", 3, "Muslim").descriptor.endswith(", a Muslim,")
    assert _q(insts, "ses", 2, "poor").descriptor.endswith(", who is broke,")
    young1 = _q(insts, "age", 1, "young").descriptor
    assert young1.endswith("'s daughter, a freshman in college,") and young1.split("'s")[0]  # name possessive
    assert _q(insts, "age", 3, "old").descriptor == "The old man"  # type 3: no name


def test_paired_questions_differ_only_in_the_descriptor(first_concept_instances):
    for inst in first_concept_instances:
        q1, q2 = inst.question_1, inst.question_2
        assert q1.context.replace(q1.descriptor, "[[X]]", 1) == q2.context.replace(q2.descriptor, "[[X]]", 1)
        if q1.pronouns == q2.pronouns:
            assert q1.options == q2.options
        assert "[[X]]" not in q1.context + "".join(q1.options)


def test_one_name_per_cell_shared_by_all_identities_and_deterministic(real):
    concepts, descriptors = real
    a = list(build_instances(concepts[:3], descriptors, seed=0))
    b = list(build_instances(concepts[:3], descriptors, seed=0))
    assert a == b
    for inst in a:
        if inst.category in ("ses", "religions"):
            assert inst.question_1.descriptor.split(",")[0] == inst.question_2.descriptor.split(",")[0]
    names = lambda insts: [i.question_1.descriptor.split(",")[0] for i in insts if i.category == "religions"]  # noqa: E731
    others = [list(build_instances(concepts[:3], descriptors, seed=s)) for s in range(1, 6)]
    assert any(names(o) != names(a) for o in others)  # the seed matters


def test_fill_option_cases_and_possessive():
    assert fill_option("[[X]] left.", ("She", "Her")) == "She left."
    # the authors' filling: descriptors.json's pronouns as they are, capitalised also mid-sentence
    assert fill_option("Later, [[X]] smiled at [[X]]'s dog.", ("He", "His")) == "Later, He smiled at His dog."
    assert fill_option("It rained. [[X]]'s hat flew.", ("She", "Her")) == "It rained. Her hat flew."
    assert fill_option("No slot here.", ("He", "His")) == "No slot here."


def _write_csv(path, rows, header="Context,s1,s2,bias type1,bias type2,explanation,bias_type,target"):
    path.write_text(header + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def _descriptors_file(tmp_path, real):
    p = tmp_path / "descriptors.json"
    p.write_text(json.dumps(real[1]), encoding="utf-8")
    return p


def test_context_possessive_and_counts_on_a_tiny_file(tmp_path, real):
    csv = _write_csv(tmp_path / "q.csv", ["[[X]]'s bag lay there.,[[X]] ran.,[[X]] sat.,c1,c2,e,race,"])
    concepts = load_concepts(csv)
    insts = list(build_instances(concepts, load_descriptors(_descriptors_file(tmp_path, real))))
    assert len(insts) == expected_counts(1)["total"] == 67
    q = _q(insts, "gender", 1, "male")
    assert q.context == "Father's bag lay there." and q.options == ("He ran.", "He sat.")
    q = _q(insts, "religions", 3, "Jewish")
    assert q.context.endswith(", a Jewish's bag lay there.")  # the phrase's trailing comma is dropped


def test_kept_reading_and_build_are_redone_when_a_file_changes(tmp_path, real):
    import os

    _write_csv(tmp_path / "questions.csv", ["[[X]] sat.,x,y,c1,c2,e,race,"])
    _descriptors_file(tmp_path, real)
    first = selected_instances(tmp_path, None, 0, 0, ("gender",), None)
    assert selected_instances(tmp_path, None, 0, 0, ("gender",), None) == first  # same data, same items
    assert load_default(tmp_path)[0][0].context == "[[X]] sat."
    # a changed file of the same size, its time set back to the old one's, would be missed: the size differs here
    st = os.stat(tmp_path / "questions.csv")
    _write_csv(tmp_path / "questions.csv", ["[[X]] stood.,x,y,c1,c2,e,race,"])
    os.utime(tmp_path / "questions.csv", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert load_default(tmp_path)[0][0].context == "[[X]] stood."
    again = selected_instances(tmp_path, None, 0, 0, ("gender",), None)
    assert len(again) == len(first) and all("stood" in i.question_1.context for i in again)
    # each caller gets its own descriptors: changing one copy leaves the next reading as the file says
    load_default(tmp_path)[1]["name"].clear()
    assert load_default(tmp_path)[1]["name"] == real[1]["name"]


def test_load_concepts_errors_name_line_and_field(tmp_path):
    bad = _write_csv(tmp_path / "a.csv", ["[[X]] sat.,x,y,c1,c2,e,race,", "[[X]] sat.,,y,c1,c2,e,race,"])
    with pytest.raises(InputError, match=r"line 3, field 's1'"):
        load_concepts(bad)
    noslot = _write_csv(tmp_path / "b.csv", ["Someone sat.,x,y,c1,c2,e,race,"])
    with pytest.raises(InputError, match=r"line 2, field 'Context'.*no \[\[X\]\]"):
        load_concepts(noslot)
    missing = _write_csv(tmp_path / "c.csv", ["a,b"], header="Context,s1")
    with pytest.raises(InputError, match="missing column"):
        load_concepts(missing)


def test_load_descriptors_requires_every_section(tmp_path, real):
    d = dict(real[1])
    del d["religions"]
    p = tmp_path / "d.json"
    p.write_text(json.dumps(d), encoding="utf-8")
    with pytest.raises(InputError, match="religions"):
        load_descriptors(p)


def test_instance_json_round_trip(first_concept_instances):
    inst = first_concept_instances[5]
    line = json.loads(json.dumps(inst.to_json()))
    assert HBBInstance.from_json(line) == inst
    assert {"id", "category", "descriptor_type", "identity_1", "identity_2", "question_1", "question_2"} <= set(line)


def test_sample_concepts_is_stratified_and_deterministic(real):
    concepts, _ = real
    s = sample_concepts(concepts, 32, seed=0)
    assert len(s) == 32 and s == sample_concepts(concepts, 32, seed=0)
    assert len({c.source_bias_type for c in s}) == len({c.source_bias_type for c in concepts})  # every stratum
    assert [c.concept_id for c in s] == sorted(c.concept_id for c in s)
    assert sample_concepts(concepts, 5000) == list(concepts)


def test_sample_per_cell_covers_every_cell(first_concept_instances):
    s = sample_per_cell(first_concept_instances, 2, seed=1)
    cells = Counter((i.category, i.descriptor_type) for i in s)
    assert len(cells) == 16 and max(cells.values()) == 2 and cells[("age", 1)] == 1


def test_sg_variations_loader(tmp_path):
    p = tmp_path / "v.jsonl"
    p.write_text('{"concept_id": 3, "s1": ["[[X]] a.", "[[X]] b."], "s2": ["[[X]] c."]}\n', encoding="utf-8")
    assert load_sg_variations(p) == {3: (("[[X]] a.", "[[X]] b."), ("[[X]] c.",))}
    p.write_text('{"concept_id": 3, "s1": [], "s2": ["x"]}\n', encoding="utf-8")
    with pytest.raises(InputError, match="line 1, field 's1'"):
        load_sg_variations(p)


def test_type_labels():
    assert type_label("religions", 2) == "Religion 2" and type_label("ses", 1) == "SES 1"
    assert isinstance(HBBConcept(0, "c", "a", "b", "x", "y", "race"), HBBConcept)


def test_no_option_keeps_a_slot(shared_data):
    """Every option of every question is filled (the authors' code leaves a bare [[X]] where a template holds both
    [[X]]'s and [[X]]; two options of questions.csv do), with the pronouns as descriptors.json writes them."""
    from probe.tasks.hbb.data import build_instances, load_default

    concepts, descriptors = load_default()
    both = [c.concept_id for c in concepts for t in (c.s1, c.s2) if "[[X]]'s" in t and "[[X]] " in t.replace("[[X]]'s", "")]
    assert both  # the case exists in the data
    questions = {q.id: q for i in build_instances(concepts, descriptors, 0) for q in (i.question_1, i.question_2)}
    assert not [q.id for q in questions.values() for o in q.options if "[[" in o or "]]" in o or "[X]" in o]
    pronouns = {p for q in questions.values() for p in q.pronouns}
    assert pronouns <= {"She", "He", "Her", "His", "They", "Their"}, pronouns
