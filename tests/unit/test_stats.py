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


# --- the one bootstrap module: the pieces every bootstrap draws through -------------------------------


def test_percentile_ci_is_the_quantiles_of_the_finite_values():
    from probe.metrics.stats import percentile_ci

    values = [4.0, float("nan"), 0.0, 2.0, float("inf"), 1.0, 3.0]  # finite: 0..4
    assert percentile_ci(values, tails=(0.25, 0.75)) == (1.0, 3.0)
    assert percentile_ci(values, level=0.5) == (1.0, 3.0)
    assert percentile_ci(values, min_finite=6) == (pytest.approx(math.nan, nan_ok=True),) * 2
    assert all(math.isnan(x) for x in percentile_ci([], level=0.9))


def test_bootstrap_p_counts_each_side_with_one_added():
    from probe.metrics.stats import bootstrap_p

    # 1 of 4 finite deltas <= 0, all 4 >= 0 except one: 2 * min((1+1)/5, (3+1)/5) = 0.8
    assert bootstrap_p([-1.0, 1.0, 2.0, 3.0, float("nan")]) == pytest.approx(0.8)
    assert bootstrap_p([1.0] * 99) == pytest.approx(2 / 100)  # never 0
    assert bootstrap_p([0.0, 0.0]) == 1.0  # capped


def test_cluster_draws_read_the_stream_as_documented():
    from probe.metrics.stats import cluster_members, cluster_weights, resample_clusters, resample_rows

    members = cluster_members(["x", "y", "x", "z"])
    assert [m.tolist() for m in members] == [[0, 2], [1], [3]]
    ids = np.random.default_rng(3).integers(0, 3, 3)
    assert resample_clusters(np.random.default_rng(3), 3).tolist() == ids.tolist()
    assert resample_rows(np.random.default_rng(3), members).tolist() == [i for j in ids for i in members[j].tolist()]
    w = cluster_weights(np.random.default_rng(1), 4, 5)
    assert w.shape == (5, 4) and w.sum(axis=1).tolist() == [4] * 5
    assert w.tolist() == np.random.default_rng(1).multinomial(4, [0.25] * 4, size=5).tolist()
    assert cluster_weights(np.random.default_rng(1), 0, 3).shape == (3, 0)


def test_stratified_bootstrap_resamples_each_stratum_on_its_own():
    from probe.metrics.stats import stratified_cluster_bootstrap

    data = {"a": np.array([0.0, 1.0]), "b": np.array([5.0, 5.0, 7.0]), "empty": np.array([])}
    members = {"a": [np.array([0]), np.array([1])], "b": [np.array([0, 1]), np.array([2])], "empty": []}
    seen = []

    def stat(rows):
        seen.append(sorted(rows))
        return float(np.mean([data[s][i].mean() for s, i in rows.items()]))

    boots = stratified_cluster_bootstrap(members, stat, 200, np.random.default_rng(0))
    assert seen[0] == ["a", "b"]  # a stratum without clusters draws nothing
    # the same draws by hand: stratum a, then b, per resample
    rng = np.random.default_rng(0)
    want = []
    for _ in range(200):
        a = np.concatenate([members["a"][j] for j in rng.integers(0, 2, 2)])
        b = np.concatenate([members["b"][j] for j in rng.integers(0, 2, 2)])
        want.append((data["a"][a].mean() + data["b"][b].mean()) / 2)
    assert boots.tolist() == want
