"""Label / answer mass: the floor's boundary, the distribution, and the empty and invalid cases."""

import math

import pytest

from probe.metrics.mass import answering, mass_summary


def test_floor_boundary_counts_as_answering():
    assert answering(0.1, 0.1) and not answering(0.1 - 1e-12, 0.1)
    assert not answering(math.nan) and not answering(None) and not answering(math.inf, 0.1)


def test_summary_hand_computed():
    s = mass_summary([0.0, 0.1, 0.2, 1.0, None, math.nan], floor=0.1)
    assert s["n"] == 4 and s["n_invalid"] == 2
    assert s["n_below_floor"] == 1 and s["share_below_floor"] == 0.25  # 0.1 is on the floor: answering
    assert s["mean"] == pytest.approx(0.325) and s["median"] == pytest.approx(0.15)
    assert s["min"] == 0.0 and s["max"] == 1.0


def test_summary_of_nothing_is_nan_not_zero():
    s = mass_summary([], floor=0.1)
    assert s["n"] == 0 and s["n_below_floor"] == 0 and math.isnan(s["mean"]) and math.isnan(s["share_below_floor"])
