"""ImplicitBBQ task: ``context_kinds`` restricts the sample to some context kinds without changing it."""

import pytest

from probe.errors import ProbeError
from probe.tasks import get
from probe.tasks.implicitbbq.selection import strategy_samples


@pytest.fixture(scope="module")
def caste_items():
    from tests.conftest import SHARED_DATA

    if not (SHARED_DATA / "bharatbbq").is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    from probe.tasks.implicitbbq.data import build_implicitbbq

    return build_implicitbbq(["caste"])


def test_context_kinds_keeps_the_same_units(caste_items):
    task = get("implicitbbq")
    base = {"dimensions": ["caste"], "strategies": ["zero_shot", "safety"], "per_cell": {"zero_shot": 3, "safety": 2}}
    every = strategy_samples(task.make_config(base), caste_items)
    only = strategy_samples(task.make_config({**base, "context_kinds": ["explicit"]}), caste_items)
    for s in ("zero_shot", "safety"):
        assert only[s] and {it.context_kind for it in only[s]} == {"explicit"}
        # the explicit part of the full sample, item for item and in order
        assert [it.id for it in only[s]] == [it.id for it in every[s] if it.context_kind == "explicit"]
    assert len(only["zero_shot"]) == 3 * 4  # 3 units x (amb, dis) x (neg, nonneg)
    ctrl = strategy_samples(task.make_config({**base, "context_kinds": ["neutral", "implicit"]}), caste_items)
    assert {it.context_kind for it in ctrl["zero_shot"]} == {"neutral", "implicit"}
    assert {it.context_kind for it in ctrl["safety"]} == {"implicit"}  # controls: zero-shot only


@pytest.mark.parametrize("kinds", [[], ["explicit", "control"]])
def test_context_kinds_rejects_unknown(kinds):
    with pytest.raises(ProbeError, match="context_kinds"):
        get("implicitbbq").make_config({"context_kinds": kinds})
