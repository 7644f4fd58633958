"""Linear probes on stored activations, with the controls that make them mean something.

* :class:`LinearProbe`: a scikit-learn classifier (standardize, then
  L2 logistic regression); ``fit`` / ``predict`` / ``score``, learned state in
  ``*_`` attributes, and :meth:`LinearProbe.direction` in activation space.
* :func:`grouped_cv_predict`: out-of-fold predictions with
  :class:`sklearn.model_selection.GroupKFold` over templates/contexts, so the
  paired variants of one question are never split across train and test
  (asserted on every fold by :func:`check_no_leak`).
* :func:`evaluate_probe`: accuracy with a cluster-bootstrap CI (resampling
  groups), the majority-class rate, a **control task** (Hewitt & Liang 2019:
  each control key, e.g. the cue phrase, gets a random class; selectivity =
  task accuracy - control accuracy) and a **shuffled-label baseline**
  (labels permuted, same CV; with a permutation p-value).
* :func:`transfer`: train on one domain (explicit), test on another
  (implicit), still with held-out groups.
* :func:`probe_sweep`: all of the above per ``{hook}@{position}`` key, as a
  DataFrame ready to plot per layer.

Edge cases: fewer than two classes or two groups raise ``ValueError``; rows
with NaN features (an item without the span) are dropped and counted in
``n_dropped``; a training fold with a single class predicts that class.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> y = np.repeat([0, 1], 40); X = rng.normal(size=(80, 5)); X[:, 0] += 3 * y
>>> groups = np.arange(80) // 2
>>> r = evaluate_probe(X, y, groups, n_shuffles=2, n_boot=200)
>>> r.accuracy > 0.9, r.shuffled_accuracy < 0.75
(True, True)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from probe.metrics.stats import cluster_bootstrap_ci


class LinearProbe(ClassifierMixin, BaseEstimator):
    """Standardized L2 logistic regression.

    Parameters
    ----------
    C : inverse regularization strength (smaller = stronger).
    max_iter : L-BFGS iterations.
    standardize : scale features to unit variance first (residual streams have
        a few huge dimensions that otherwise dominate the penalty).
    """

    def __init__(self, C: float = 0.1, max_iter: int = 500, standardize: bool = True) -> None:
        self.C = C
        self.max_iter = max_iter
        self.standardize = standardize

    def fit(self, X: np.ndarray, y: np.ndarray) -> "LinearProbe":
        X, y = np.asarray(X, dtype=np.float64), np.asarray(y)  # X: [n, d_model], y: [n]
        self.classes_ = np.unique(y)
        lr = LogisticRegression(C=self.C, max_iter=self.max_iter)
        steps = [StandardScaler(), lr] if self.standardize else [lr]
        if len(self.classes_) < 2:  # nothing to separate: constant prediction
            self.pipeline_ = None
        else:
            self.pipeline_ = make_pipeline(*steps).fit(X, y)
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if self.pipeline_ is None:
            return np.full(len(X), self.classes_[0])
        return self.pipeline_.predict(np.asarray(X, dtype=np.float64))

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        if self.pipeline_ is None:
            return np.ones((len(X), 1))
        return self.pipeline_.predict_proba(np.asarray(X, dtype=np.float64))

    def direction(self) -> np.ndarray:
        """Unit vector in activation space along which the (binary) probe's logit grows.

        Undoes the standardization (w / scale), so it can be added to the
        residual stream for steering.
        """
        if self.pipeline_ is None or len(self.classes_) != 2:
            raise ValueError("direction() needs a probe fitted on exactly two classes")
        lr = self.pipeline_[-1]
        w = lr.coef_[0].copy()
        if self.standardize:
            w = w / self.pipeline_[0].scale_
        return w / np.linalg.norm(w)


def check_no_leak(groups: np.ndarray, train: np.ndarray, test: np.ndarray) -> None:
    """Raise ``AssertionError`` if a group has rows in both ``train`` and ``test`` indices."""
    shared = set(np.asarray(groups)[train].tolist()) & set(np.asarray(groups)[test].tolist())
    if shared:
        raise AssertionError(f"{len(shared)} group(s) in both train and test, e.g. {sorted(map(str, shared))[:3]}")


def _folds(groups: np.ndarray, n_splits: int):
    n_groups = len(np.unique(groups))
    if n_groups < 2:
        raise ValueError(f"grouped cross-validation needs at least 2 groups, got {n_groups}")
    return GroupKFold(n_splits=min(n_splits, n_groups))


def grouped_cv_predict(X: np.ndarray, y: np.ndarray, groups: np.ndarray, estimator: Any = None,
                       n_splits: int = 5) -> np.ndarray:
    """Out-of-fold predictions; every fold is checked with :func:`check_no_leak`."""
    X, y, groups = np.asarray(X), np.asarray(y), np.asarray(groups)
    if len(np.unique(y)) < 2:
        raise ValueError("a probe needs at least two classes")
    estimator = estimator if estimator is not None else LinearProbe()
    pred = np.empty(len(y), dtype=y.dtype)
    for train, test in _folds(groups, n_splits).split(X, y, groups):
        check_no_leak(groups, train, test)
        pred[test] = clone(estimator).fit(X[train], y[train]).predict(X[test])
    return pred


def _accuracy_ci(correct: np.ndarray, groups: np.ndarray, n_boot: int, seed: int) -> tuple[float, float]:
    """95% CI of the accuracy, resampling whole groups (the items of a group are not independent)."""
    ci = cluster_bootstrap_ci(np.asarray(correct, dtype=float), list(np.asarray(groups)), {"acc": np.mean},
                              n_boot=n_boot, seed=seed, draw="counts")
    return ci["acc"]


def control_labels(keys: Sequence[Any], y: np.ndarray, seed: int = 0) -> np.ndarray:
    """Control task: each distinct key gets a class drawn from ``y``'s class frequencies."""
    keys = np.asarray([str(k) for k in keys])
    classes, freq = np.unique(np.asarray(y), return_counts=True)
    uniq = np.unique(keys)
    rng = np.random.default_rng(seed)
    table = dict(zip(uniq, rng.choice(classes, size=len(uniq), p=freq / freq.sum())))
    return np.array([table[k] for k in keys])


@dataclass(frozen=True)
class ProbeResult:
    """Cross-validated probe accuracy and its controls (NaN where a control was not run)."""

    accuracy: float
    ci_low: float
    ci_high: float
    majority: float
    control_accuracy: float
    selectivity: float
    shuffled_accuracy: float
    shuffled_p: float
    n: int
    n_groups: int
    n_dropped: int

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _clean(X, y, groups, *others):
    X = np.asarray(X, dtype=np.float64)
    ok = np.all(np.isfinite(X), axis=1)
    return (X[ok], np.asarray(y)[ok], np.asarray(groups)[ok],
            *[None if o is None else np.asarray(o)[ok] for o in others], int((~ok).sum()))


def evaluate_probe(X: np.ndarray, y: Sequence[Any], groups: Sequence[Any], control_keys: Sequence[Any] | None = None,
                   estimator: Any = None, n_splits: int = 5, n_shuffles: int = 200, n_boot: int = 1000,
                   seed: int = 0) -> ProbeResult:
    """Grouped-CV accuracy with bootstrap CI, control task and shuffled-label baseline."""
    X, y, groups, control_keys, dropped = _clean(X, y, groups, control_keys)
    pred = grouped_cv_predict(X, y, groups, estimator, n_splits)
    correct = pred == y
    acc = float(correct.mean())
    lo, hi = _accuracy_ci(correct, groups, n_boot, seed)
    _, counts = np.unique(y, return_counts=True)
    ctrl = float("nan")
    if control_keys is not None:
        yc = control_labels(control_keys, y, seed)
        ctrl = float((grouped_cv_predict(X, yc, groups, estimator, n_splits) == yc).mean()) \
            if len(np.unique(yc)) > 1 else float("nan")
    rng = np.random.default_rng(seed + 1)
    shuffled = []
    for _ in range(n_shuffles):
        ys = rng.permutation(y)
        shuffled.append(float((grouped_cv_predict(X, ys, groups, estimator, n_splits) == ys).mean()))
    sh = float(np.mean(shuffled)) if shuffled else float("nan")
    p = (1 + sum(s >= acc for s in shuffled)) / (1 + len(shuffled)) if shuffled else float("nan")
    return ProbeResult(acc, lo, hi, float(counts.max() / counts.sum()), ctrl, acc - ctrl, sh, p,
                       len(y), len(np.unique(groups)), dropped)


def transfer(X: np.ndarray, y: Sequence[Any], groups: Sequence[Any], domain: Sequence[Any], train_domain: Any,
             test_domain: Any, estimator: Any = None, n_splits: int = 5, n_boot: int = 1000,
             seed: int = 0) -> ProbeResult:
    """Train on ``train_domain`` rows, test on ``test_domain`` rows of held-out groups only.

    Grouped folds as in :func:`grouped_cv_predict`: an implicit item is never
    tested by a probe that saw the explicit version of its template. Controls
    are not run (NaN).
    """
    X, y, groups, domain, dropped = _clean(X, y, groups, domain)
    estimator = estimator if estimator is not None else LinearProbe()
    src, dst = domain == train_domain, domain == test_domain
    if len(np.unique(y[src])) < 2:
        raise ValueError(f"transfer: the {train_domain!r} rows have fewer than two classes")
    correct, test_groups = [], []
    for train, test in _folds(groups, n_splits).split(X, y, groups):
        check_no_leak(groups, train, test)
        tr, te = train[src[train]], test[dst[test]]
        if len(tr) == 0 or len(te) == 0:
            continue
        correct.append(clone(estimator).fit(X[tr], y[tr]).predict(X[te]) == y[te])
        test_groups.append(groups[te])
    if not correct:
        raise ValueError(f"transfer: no fold has both {train_domain!r} training and {test_domain!r} test rows")
    c, g = np.concatenate(correct), np.concatenate(test_groups)
    lo, hi = _accuracy_ci(c, g, n_boot, seed)
    _, counts = np.unique(y[dst], return_counts=True)
    nan = float("nan")
    return ProbeResult(float(c.mean()), lo, hi, float(counts.max() / counts.sum()), nan, nan, nan, nan,
                       int(len(c)), len(np.unique(g)), dropped)


def parse_key(key: str) -> dict[str, Any]:
    """``"blocks.3.hook_resid_post@last"`` -> ``{"layer": 3, "hook": "resid_post", "position": "last"}``."""
    hook, _, pos = key.partition("@")
    parts = hook.split(".")
    layer = int(parts[1]) if len(parts) > 2 and parts[0] == "blocks" else -1
    return {"key": key, "layer": layer, "hook": parts[-1].removeprefix("hook_"), "position": pos}


def probe_sweep(arrays: Mapping[str, np.ndarray], y: Sequence[Any], groups: Sequence[Any],
                keys: Sequence[str] | None = None, mask: np.ndarray | None = None, **kwargs: Any):
    """:func:`evaluate_probe` for every key (rows selected by ``mask``); a tidy DataFrame."""

    rows = []
    mask = np.ones(len(y), bool) if mask is None else np.asarray(mask, bool)
    ctrl = kwargs.pop("control_keys", None)
    for key in keys or list(arrays):
        res = evaluate_probe(arrays[key][mask], np.asarray(y)[mask], np.asarray(groups)[mask],
                             None if ctrl is None else np.asarray(ctrl)[mask], **kwargs)
        rows.append({**parse_key(key), **res.to_dict(), "caution": caution(res)})
    return pd.DataFrame(rows)


def caution(res: ProbeResult) -> str:
    """What to read a probe row with: a control accuracy far below the majority rate (the control task is not
    learnable across the grouped folds, so selectivity is inflated), few groups, a missing CI; "" when none.

    >>> caution(ProbeResult(0.9, 0.8, 1.0, 0.5, 0.0, 0.9, 0.5, 0.01, 40, 4, 0))
    'control accuracy 0.00, far below the majority rate 0.50: selectivity overstates; only 4 groups: wide CI'
    """
    notes = []
    if res.control_accuracy == res.control_accuracy and res.control_accuracy < res.majority - 0.2:
        notes.append(f"control accuracy {res.control_accuracy:.2f}, far below the majority rate {res.majority:.2f}: "
                     "selectivity overstates")
    if res.n_groups < 10:
        notes.append(f"only {res.n_groups} groups: wide CI")
    if not (res.ci_low == res.ci_low and res.ci_high == res.ci_high):
        notes.append("CI n/a")
    return "; ".join(notes)
