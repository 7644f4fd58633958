"""The demo task's label-mass report (#13 part 6): distribution, items below the floor, results without them."""

import pytest

from probe.errors import ProbeError
from probe.tasks import get
from probe.tasks.demo.task import summarize


def _rec(i: int, mass: float, pred_unknown: bool) -> dict:
    probs = [0.1, 0.1, 0.8] if pred_unknown else [0.8, 0.1, 0.1]
    return {"id": f"d{i}", "context_kind": "explicit", "dimension": "age", "context_condition": "ambig",
            "question_polarity": "neg", "label": 2, "target_index": 0, "unknown_index": 2, "probs": probs,
            "pred_index": 2 if pred_unknown else 0, "answer_mass": mass, "finite": True}


def test_items_below_the_floor_are_flagged_and_left_out_of_answering_only():
    # the low-mass item is the one that answers the target: without it every ambiguous answer is correct
    recs = [_rec(0, 0.05, False), _rec(1, 0.1, True), _rec(2, 0.6, True)]  # 0.1 sits exactly on the floor
    s = summarize(recs, mass_floor=0.1)
    assert s["mass"]["n_below_floor"] == 1 and s["mass"]["floor"] == 0.1
    assert s["mass"]["median"] == pytest.approx(0.1)
    assert s["by_context_kind"]["explicit"]["argmax"]["acc_amb"] == pytest.approx(2 / 3)
    assert s["answering_only"]["explicit"]["argmax"]["acc_amb"] == pytest.approx(1.0)
    assert s["answering_only"]["explicit"]["n_amb"] == 2


def test_floor_zero_keeps_everything_and_bad_floors_are_refused():
    recs = [_rec(0, 0.05, False), _rec(1, 0.6, True)]
    s = summarize(recs, mass_floor=0.0)
    assert s["mass"]["n_below_floor"] == 0 and s["answering_only"]["explicit"]["n_amb"] == 2
    with pytest.raises(ProbeError, match="mass_floor"):
        get("demo").make_config({"mass_floor": 1.5})
