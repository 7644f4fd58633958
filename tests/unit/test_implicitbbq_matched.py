"""ImplicitBBQ's matched explicit set and counts in records (issue #14 part 6), on hand-made items.

The real-build checks (weights per template, the docs table) are in test_implicitbbq_faithful.py.
"""

import json
from collections import Counter

import pytest

from probe.tasks.implicitbbq.match import apportion, format_record_counts, match_explicit, record_counts, weights
from probe.tasks.bbq.items import BBQItem, setting_name


def _unit(dim: str, kind: str, unit: str, q: str, g1: str, g2: str, **meta) -> list[BBQItem]:
    """The four records (condition x polarity) of one unit, as the builder names them."""
    out = []
    for cond in ("ambig", "disambig"):
        for pol in ("neg", "nonneg"):
            out.append(BBQItem(
                id=f"{unit}-{cond}-{pol}", source="implicitbbq", category=dim, context=f"ctx {unit} {cond}",
                question=f"q {pol}", options=("Person A", "Person B", "Unknown"), label=2, target_index=0,
                unknown_index=2, question_polarity=pol, context_condition=cond, context_kind=kind,
                setting=setting_name(kind, cond, pol), template_id=f"{dim}{q}",
                metadata={"q_id": q, "group1": g1, "group2": g2, **meta}))
    return out


@pytest.fixture()
def pool() -> list[BBQItem]:
    """age Q1: 1 implicit context x 3 cue pairs, 1 explicit filling; age Q2: 1 x 1, 4 fillings;
    age Q3: explicit only (no implicit form); one control unit each."""
    items = []
    for k in range(3):
        items += _unit("age", "implicit", f"ibbq-age-imp-1r2-000001-c{k}", "1", "Old", "Young", context_id="1r2-000001")
    items += _unit("age", "explicit", "ibbq-age-exp-r2-00000001", "1", "Old", "Young")
    items += _unit("age", "implicit", "ibbq-age-imp-2r5-000002-c0", "2", "Young", "Old", context_id="2r5-000002")
    for f in range(4):
        items += _unit("age", "explicit", f"ibbq-age-exp-r5-0000001{f}", "2", "Old" if f % 2 else "Young",
                       "Young" if f % 2 else "Old")
    items += _unit("age", "explicit", "ibbq-age-exp-r9-00000099", "3", "Old", "Young")
    items += _unit("age", "neutral", "ibbq-age-neu-1r2-000001-s0", "1", "Old", "Young", context_id="1r2-000001")
    items += _unit("age", "nochar", "ibbq-age-noc-1r2-000001-s0", "1", "Old", "Young", context_id="1r2-000001")
    return items


@pytest.mark.parametrize("n, w, want", [
    (10, {"a": 1, "b": 2, "c": 2}, {"a": 2, "b": 4, "c": 4}),
    (3, {"a": 1, "b": 1}, {"a": 2, "b": 1}),  # tie: key order
    (5, {"a": 0, "b": 1}, {"a": 0, "b": 5}),  # zero weight gets nothing
    (0, {"a": 1}, {"a": 0}),
    (7, {"a": 1, "b": 1, "c": 1}, {"a": 3, "b": 2, "c": 2}),
    (2, {"a": 0.4, "b": 0.35, "c": 0.25}, {"a": 1, "b": 1, "c": 0}),  # largest remainders: .8, .7, .5
])
def test_apportion(n, w, want):
    got = apportion(n, w)
    assert got == want and sum(got.values()) == n
    total = sum(w.values())
    assert all(int(n * w[k] / total) <= got[k] <= int(n * w[k] / total) + 1 for k in w)


def test_apportion_all_zero_raises():
    with pytest.raises(ValueError, match="every weight is 0"):
        apportion(2, {"a": 0})


def test_counting_unit_records_per_condition(pool):
    """A record is context x question: 1 implicit context of Q1 with 3 cue pairs = 2 base records
    (neg, nonneg) and 6 records per condition; the disambiguated condition is not added in."""
    full = record_counts(pool, pool)
    assert full["age"] == {"implicit_base": 4, "implicit": 8, "explicit": 12, "explicit_distinct": 12,
                           "explicit_full": 12, "neutral": 2, "nochar": 2}
    assert full["total"] == full["age"]
    m = match_explicit(pool)
    c = record_counts(m, pool)["age"]
    # explicit matched to implicit: Q1 3 units (its one filling 3 times), Q2 1 unit, Q3 none
    assert (c["explicit"], c["explicit_distinct"], c["explicit_full"], c["implicit"]) == (8, 4, 12, 8)
    table = format_record_counts(record_counts(m, pool))
    assert "| age | 4 | 8 | 8 | 4 | 12 | 2 | 2 |" in table
    assert table.splitlines()[-1] == "| paper (sections 3-4) | 760 | ~8,000 | ~8,500 | - | - | - | - |"
    assert record_counts([]) == {}
    plain = format_record_counts(record_counts(pool), matched=False)
    assert plain.splitlines()[0] == ("| records per condition | implicit, no cues (context x question) | "
                                     "implicit (x cue combinations) | explicit, every filling | neutral control | "
                                     "no-characteristics control |")
    assert "| age | 4 | 8 | 12 | 2 | 2 |" in plain


def test_matched_weights_copies_and_clusters(pool):
    st: dict = {}
    m = match_explicit(pool, stats=st)
    assert weights(m, "explicit") == weights(m, "implicit") == Counter({("age", "1"): 3, ("age", "2"): 1})
    assert st == {"units": 4, "distinct": 2, "repeated": 1, "unmatched": []}
    ids = [it.id for it in m]
    assert len(ids) == len(set(ids))
    q1 = [it for it in m if it.context_kind == "explicit" and it.metadata["q_id"] == "1"]
    assert sorted({it.id.rsplit("-", 2)[0] for it in q1}) == [
        "ibbq-age-exp-r2-00000001", "ibbq-age-exp-r2-00000001-m1", "ibbq-age-exp-r2-00000001-m2"]
    # the copies are the same records (one bootstrap cluster), only the id and copy index differ
    assert {it.metadata["context_id"] for it in q1} == {"ibbq-age-exp-r2-00000001"}
    assert Counter(it.metadata["explicit_copy"] for it in q1) == {0: 4, 1: 4, 2: 4}
    assert len({(it.context, it.question) for it in q1}) == 4
    # the non-explicit items are untouched and keep their order
    assert [it for it in m if it.context_kind != "explicit"] == [it for it in pool if it.context_kind != "explicit"]


def test_matched_deterministic_and_seeded(pool):
    a = [it.id for it in match_explicit(pool, seed=0)]
    assert a == [it.id for it in match_explicit(list(pool), seed=0)]
    picks = {tuple(sorted(it.id for it in match_explicit(pool, seed=s) if it.metadata["q_id"] == "2"))
             for s in range(12)}
    assert len(picks) > 1  # the paper chooses which of Q2's four fillings is used


def test_matched_size_and_pairs(pool):
    """``size`` is records per condition (2 per unit); within a template the group pairs follow the implicit
    ones (Q2's implicit pair is (Old, Young) in either slot order: every filling qualifies)."""
    m = match_explicit(pool, size=16)
    w = weights(m, "explicit")
    assert w == {("age", "1"): 6, ("age", "2"): 2}
    assert record_counts(m)["age"]["explicit"] == 16
    assert weights(match_explicit(pool, size=2), "explicit") == {("age", "1"): 1}


def test_unmatched_template_reported(pool):
    """A template with implicit units but no explicit filling cannot be matched: reported, its share
    goes to the others."""
    pool = [it for it in pool if not (it.context_kind == "explicit" and it.metadata["q_id"] == "2")]
    st: dict = {}
    m = match_explicit(pool, stats=st)
    assert st["unmatched"] == [("age", "2")]
    assert weights(m, "explicit") == {("age", "1"): 4}


def test_cli_writes_count_table(tmp_path, capsys, monkeypatch):
    """``probe data build implicitbbq`` prints the table in records and writes it beside the output."""
    from tests.conftest import SHARED_DATA

    if not (SHARED_DATA / "bharatbbq").is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    from probe.cli import main

    out = tmp_path / "build" / "items.jsonl"
    assert main(["data", "build", "implicitbbq", "--dimensions", "caste", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    md = (tmp_path / "build" / "items.counts.md").read_text()
    assert md.split("\n\n")[0] in printed
    assert "| paper (sections 3-4) | 760 | ~8,000 | ~8,500 |" in md
    data = json.loads((tmp_path / "build" / "items.counts.json").read_text())
    assert data["unit"] == "records (context x question) per condition" and data["explicit_set"] == "matched"
    c = data["counts"]["caste"]
    assert c["explicit"] == c["implicit"] and c["explicit_full"] >= c["explicit_distinct"]
    n_lines = sum(1 for _ in out.open())
    assert n_lines == 2 * sum(c[k] for k in ("implicit", "explicit", "neutral", "nochar"))
