"""Linear probes: sklearn conventions, grouped CV without leakage, controls, bootstrap CIs, transfer."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GroupKFold

from probe.analysis import probes
from probe.analysis.probes import (LinearProbe, check_no_leak, control_labels, evaluate_probe, grouped_cv_predict,
                                   parse_key, probe_sweep, transfer)
from probe.metrics.stats import cluster_bootstrap_ci


def _data(n=120, d=6, signal=3.0, seed=0):
    rng = np.random.default_rng(seed)
    y = np.tile([0, 1], n // 2)
    X = rng.normal(size=(n, d))
    X[:, 0] += signal * (2 * y - 1) / 2
    groups = np.arange(n) // 4  # 4 paired variants per template
    return X, y, groups


def test_linear_probe_sklearn_conventions():
    X, y, _ = _data()
    p = LinearProbe(C=1.0)
    assert p.get_params() == {"C": 1.0, "max_iter": 500, "standardize": True}
    assert clone(p).get_params() == p.get_params()
    p.fit(X, y)
    assert list(p.classes_) == [0, 1] and p.n_features_in_ == 6
    assert p.score(X, y) > 0.9
    assert p.predict_proba(X).shape == (120, 2)
    d = p.direction()
    assert abs(np.linalg.norm(d) - 1) < 1e-9 and np.argmax(np.abs(d)) == 0 and d[0] > 0


def test_single_class_probe_predicts_it_and_has_no_direction():
    p = LinearProbe().fit(np.zeros((3, 2)), np.array(["x", "x", "x"]))
    assert list(p.predict(np.ones((2, 2)))) == ["x", "x"]
    with pytest.raises(ValueError):
        p.direction()


def test_check_no_leak_raises_on_shared_group():
    groups = np.array(["t1", "t1", "t2", "t3"])
    check_no_leak(groups, np.array([0, 1]), np.array([2, 3]))
    with pytest.raises(AssertionError, match="t1"):
        check_no_leak(groups, np.array([0, 2]), np.array([1, 3]))


def test_grouped_cv_never_splits_a_template(monkeypatch):
    X, y, groups = _data()
    seen = []
    real = probes.check_no_leak

    def spy(g, train, test):
        seen.append((set(g[train]), set(g[test])))
        real(g, train, test)

    monkeypatch.setattr(probes, "check_no_leak", spy)
    grouped_cv_predict(X, y, groups, n_splits=5)
    assert len(seen) == 5
    assert all(not (a & b) for a, b in seen)
    assert set().union(*(b for _, b in seen)) == set(groups)  # every template tested once


def test_leaky_splitter_is_caught(monkeypatch):
    X, y, groups = _data()

    class Leaky(GroupKFold):
        def split(self, X, y=None, groups=None):
            n = len(X)
            yield np.arange(0, n, 2), np.arange(1, n, 2)  # alternate rows: pairs split

    monkeypatch.setattr(probes, "GroupKFold", Leaky)
    with pytest.raises(AssertionError, match="both train and test"):
        grouped_cv_predict(X, y, groups)


def _acc_ci(correct, groups, n_boot=1000):
    # The probes' accuracy interval: the metrics' cluster bootstrap with the multinomial draw.
    return cluster_bootstrap_ci(np.asarray(correct, dtype=float), list(groups), {"acc": np.mean}, n_boot=n_boot,
                                draw="counts")["acc"]


def test_cluster_bootstrap_hand_cases():
    assert _acc_ci(np.ones(10), np.arange(10)) == (1.0, 1.0)
    lo, hi = _acc_ci(np.array([]), np.array([]))
    assert np.isnan(lo) and np.isnan(hi)
    # fewer than ten groups: no interval (the small-sample rule, probe.metrics.small_sample)
    lo, hi = _acc_ci(np.array([1, 1, 0, 0]), np.array([0, 0, 1, 1]), n_boot=2000)
    assert np.isnan(lo) and np.isnan(hi)
    # five groups all right, five all wrong: an interval around 0.5
    lo, hi = _acc_ci(np.repeat([1, 0], 10), np.repeat(np.arange(10), 2), n_boot=2000)
    assert lo < 0.5 < hi


def test_probe_interval_is_the_multinomial_cluster_bootstrap():
    # The probes' former private bootstrap (group sums weighted by multinomial counts), written out:
    # the shared one with draw="counts" gives the same interval to the last bit on 0/1 data.
    rng = np.random.default_rng(7)
    correct, groups = rng.random(90) < 0.6, rng.integers(0, 12, 90)
    _, inv = np.unique(groups, return_inverse=True)
    sums, counts = np.bincount(inv, weights=correct.astype(float)), np.bincount(inv).astype(float)
    w = np.random.default_rng(0).multinomial(len(sums), np.full(len(sums), 1 / len(sums)), size=500)
    boots = (w @ sums) / (w @ counts)
    assert _acc_ci(correct, groups, n_boot=500) == (float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975)))
    assert probes._accuracy_ci(correct, groups, 500, 0) == _acc_ci(correct, groups, n_boot=500)


def test_control_labels_are_a_function_of_the_key():
    keys = ["wrinkles", "cane", "wrinkles", "skateboard", "cane"] * 4
    y = np.array([0, 1] * 10)
    c = control_labels(keys, y, seed=3)
    table = {}
    for k, v in zip(keys, c):
        assert table.setdefault(k, v) == v
    assert set(c) <= {0, 1}
    assert (control_labels(keys, y, seed=3) == c).all()


def test_evaluate_probe_signal_vs_controls():
    X, y, groups = _data(n=160)
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 8, size=len(y))  # a surface feature, unrelated to y
    r = evaluate_probe(X, y, groups, control_keys=keys, n_shuffles=3, n_boot=300)
    assert r.accuracy > 0.9 and r.ci_low <= r.accuracy <= r.ci_high
    assert r.shuffled_accuracy < 0.7 and r.shuffled_p == 0.25  # (1 + 0) / (1 + 3)
    assert r.selectivity == pytest.approx(r.accuracy - r.control_accuracy)
    assert r.majority == 0.5 and r.n == 160 and r.n_groups == 40 and r.n_dropped == 0


def test_evaluate_probe_drops_nan_rows_and_rejects_degenerate_input():
    X, y, groups = _data()
    X[:5] = np.nan
    r = evaluate_probe(X, y, groups, n_shuffles=0, n_boot=50)
    assert r.n_dropped == 5 and r.n == 115 and np.isnan(r.shuffled_accuracy) and np.isnan(r.control_accuracy)
    with pytest.raises(ValueError, match="two classes"):
        evaluate_probe(X[5:], np.zeros(115), groups[5:])
    with pytest.raises(ValueError, match="2 groups"):
        evaluate_probe(X[5:], y[5:], np.zeros(115))


def test_transfer_explicit_to_implicit():
    X, y, groups = _data(n=160)
    domain = np.where(np.arange(160) % 4 < 2, "explicit", "implicit")
    r = transfer(X, y, groups, domain, "explicit", "implicit", n_boot=100)
    assert r.accuracy > 0.9 and r.n == 80
    # a direction that flips between domains transfers below chance
    X2 = X.copy()
    X2[domain == "implicit", 0] *= -1
    assert transfer(X2, y, groups, domain, "explicit", "implicit", n_boot=100).accuracy < 0.2
    with pytest.raises(ValueError, match="fewer than two classes"):
        transfer(X, np.where(domain == "explicit", 0, y), groups, domain, "explicit", "implicit")


def test_probe_sweep_and_parse_key():
    X, y, groups = _data()
    arrays = {"blocks.0.hook_resid_post@last": X, "blocks.1.hook_resid_post@last": np.zeros_like(X)}
    df = probe_sweep(arrays, y, groups, n_shuffles=1, n_boot=50)
    assert list(df["layer"]) == [0, 1]
    assert df.loc[0, "accuracy"] > 0.9 and df.loc[1, "accuracy"] <= 0.6
    assert parse_key("ln_final.hook_normalized@mean:cue") == {
        "key": "ln_final.hook_normalized@mean:cue", "layer": -1, "hook": "normalized", "position": "mean:cue"}
