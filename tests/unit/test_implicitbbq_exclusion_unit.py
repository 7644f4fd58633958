"""ImplicitBBQ exclusions: per cue (default) or per template, as the paper words its rule (issue #23 part 3)."""

import pytest

from probe.tasks.implicitbbq.implicit_text import load_exclusions
from probe.tasks.implicitbbq.data import build_implicitbbq


@pytest.fixture(scope="module")
def age():
    from tests.conftest import SHARED_DATA

    if not (SHARED_DATA / "bbq").is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    cue, tpl = {}, {}
    return (build_implicitbbq(["age"], explicit_set="full", stats=cue),
            build_implicitbbq(["age"], explicit_set="full", stats=tpl, exclusion_unit="template"), cue, tpl)


def test_template_unit_removes_every_template_with_an_excluded_cue(age):
    by_cue, by_template, st_cue, st_tpl = age
    listed = set(load_exclusions()["age"])  # Q1, Q2, Q7, Q10, Q18, Q19, Q20
    assert listed == {"1", "2", "7", "10", "18", "19", "20"}
    q_cue = {it.metadata["q_id"] for it in by_cue if it.context_kind == "implicit"}
    q_tpl = {it.metadata["q_id"] for it in by_template if it.context_kind == "implicit"}
    assert listed <= q_cue  # per cue: the templates stay with their other cues (age Q1 is the paper's example)
    assert q_tpl == q_cue - listed
    # explicit items go with them, so both sets cover the same templates
    assert {it.template_id.rsplit(":", 1)[1] for it in by_template if it.context_kind == "explicit"} == q_tpl
    assert set(st_tpl["age"]["templates_excluded"]) == listed and st_cue["age"]["templates_excluded"] == []
    # a combination without an excluded cue is the same item in both builds
    ids = {it.id for it in by_template}
    assert ids <= {it.id for it in by_cue}


def test_exclusion_unit_is_checked():
    with pytest.raises(ValueError, match="exclusion_unit"):
        build_implicitbbq(["age"], exclusion_unit="row")
