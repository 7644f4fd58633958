"""bootstrap_ci: determinism, coverage of simple cases, 2-D rows, degenerate inputs."""

import math

import numpy as np
import pytest

from probe.metrics.stats import bootstrap_ci


def test_mean_ci_brackets_estimate_and_is_deterministic():
    x = np.array([0.0, 1.0] * 100)
    lo, hi = bootstrap_ci(x, np.mean, n_boot=500, seed=3)
    assert lo < 0.5 < hi
    assert (lo, hi) == bootstrap_ci(x, np.mean, n_boot=500, seed=3)
    # binomial sd of the mean is 0.035: a 95% interval is about +-0.07
    assert 0.04 < (hi - lo) / 2 < 0.1


def test_different_seed_changes_interval_slightly():
    x = np.random.default_rng(0).normal(size=200)
    a = bootstrap_ci(x, np.mean, n_boot=300, seed=0)
    b = bootstrap_ci(x, np.mean, n_boot=300, seed=1)
    assert a != b and abs(a[0] - b[0]) < 0.05


def test_rows_are_resampled_together():
    # statistic of two columns that are always equal within a row: any resample keeps the difference 0
    x = np.repeat(np.arange(50.0)[:, None], 2, axis=1)
    assert bootstrap_ci(x, lambda m: float(m[:, 0].mean() - m[:, 1].mean()), n_boot=200) == (0.0, 0.0)


def test_constant_data_gives_point_interval():
    assert bootstrap_ci(np.ones(10), np.mean, n_boot=100) == (1.0, 1.0)


def test_too_few_rows_is_nan():
    lo, hi = bootstrap_ci(np.array([1.0]), np.mean)
    assert math.isnan(lo) and math.isnan(hi)


def test_mostly_undefined_statistic_is_nan():
    x = np.arange(20.0)
    lo, hi = bootstrap_ci(x, lambda a: math.nan, n_boot=50)
    assert math.isnan(lo) and math.isnan(hi)


@pytest.mark.parametrize("level", [0.0, 1.0, 1.5])
def test_bad_level_raises(level):
    with pytest.raises(ValueError):
        bootstrap_ci(np.arange(5.0), np.mean, level=level)


def test_level_widens_interval():
    x = np.random.default_rng(1).normal(size=100)
    lo90, hi90 = bootstrap_ci(x, np.mean, n_boot=400, level=0.90)
    lo99, hi99 = bootstrap_ci(x, np.mean, n_boot=400, level=0.99)
    assert lo99 < lo90 and hi99 > hi90
