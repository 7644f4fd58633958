"""Preference scores and the Parity Gap of the iso/cmp framework (iso/cmp paper, §3.5 and appendix B).

Inputs are per-prompt answer **counts** over the valid labels: sampled
answers counted (the paper's 5 generations), or the model's exact label
probabilities read as *expected counts* (one answer's worth of probability
mass), or the *argmax* label as a single count. Label sets: iso
``Yes/No[/Skip]``, cmp ``A/B[/C]``; anything else is an invalid answer and is
excluded, as the paper excludes unparsable generations.

iso, for the prompt about target x of context pair c (counts Y, N, S)::

    a_x = Y_x / (Y_x + N_x + S_x)                 (0 when the prompt has no valid answer)
    p_t = a_t / (a_t + a_t'),  0.5 if a_t + a_t' = 0   (no affirmative answer for either)

cmp, option order o in {t first, t' first}, k_x = picks of x's option::

    p_t^o = k_t / (k_t + k_t'),  0.5 if k_t + k_t' = 0  (only invalid / neutral answers)
    p_t   = (p_t^{t first} + p_t^{t' first}) / 2

In both paradigms p_t' = 1 - p_t, so the per-pair gap is p_t - p_t' = 2 p_t - 1
and ``PG = mean over pairs of (p_t - p_t')`` in [-1, 1]; PG of no pairs is NaN.
The 0.5 baselines are the paper's own rule; how often they fired is reported
(``n_baseline``), never hidden.

>>> obs = [CmpIsoObservation(0, "iso", "t", None, {"Yes": 0.8, "No": 0.2}),
...        CmpIsoObservation(0, "iso", "t_prime", None, {"Yes": 0.2, "No": 0.8})]
>>> r = summarize(obs)
>>> round(r.iso.pg, 3), r.cmp.n_pairs
(0.6, 0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np

from probe.metrics.significance import bootstrap_ci, randomization_test
from probe.tasks.cmp_iso.claims import preference_aligned

ISO_LABELS = ("Yes", "No", "Skip")
CMP_LABELS = ("A", "B", "C")
NEUTRAL_LABELS = {"iso": "Skip", "cmp": "C"}
#: the mode (estimator) name of the paper-equivalent estimate: expected counts under the authors' sampling
PAPER_MODE = "paper"
TARGETS = ("t", "t_prime")
ORDERS = ("t_first", "t_prime_first")


@dataclass(frozen=True)
class CmpIsoObservation:
    """One prompt's answer counts (see module doc for what a count can be)."""

    context_pair_id: str | int
    task_type: str  # "iso" | "cmp"
    target: str | None  # iso: "t" | "t_prime"
    order: str | None  # cmp: "t_first" | "t_prime_first"
    counts: Mapping[str, float]  # valid label -> count (expected count for probabilities)
    n_invalid: float = 0.0  # answers that were not a valid label (sampled answers only)

    def __post_init__(self) -> None:
        if self.task_type == "iso":
            if self.target not in TARGETS:
                raise ValueError(f"field 'target': iso needs 't' or 't_prime', got {self.target!r}")
            valid = ISO_LABELS
        elif self.task_type == "cmp":
            if self.order not in ORDERS:
                raise ValueError(f"field 'order': cmp needs 't_first' or 't_prime_first', got {self.order!r}")
            valid = CMP_LABELS
        else:
            raise ValueError(f"field 'task_type': expected 'iso' or 'cmp', got {self.task_type!r}")
        for k, v in self.counts.items():
            if k not in valid:
                raise ValueError(f"field 'probs': label {k!r} is not one of {valid} for {self.task_type}")
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"field 'probs': count of {k!r} must be a finite number >= 0, got {v!r}")

    @property
    def n_valid(self) -> float:
        return float(sum(self.counts.values()))


def counts_from_probs(probs: Mapping[str, float], mode: str = "expected") -> dict[str, float]:
    """Label probabilities -> counts: ``expected`` (the probabilities) or ``argmax`` (one-hot).

    Ties in ``argmax`` go to the first label in the given order (deterministic).

    >>> counts_from_probs({"A": 0.3, "B": 0.7}, "argmax")
    {'A': 0.0, 'B': 1.0}
    """
    if mode == "expected":
        return {k: float(v) for k, v in probs.items()}
    if mode == "argmax":
        items = list(probs.items())
        best = max(range(len(items)), key=lambda i: (items[i][1], -i))
        return {k: float(i == best) for i, (k, _) in enumerate(items)}
    raise ValueError(f"mode must be 'expected' or 'argmax', got {mode!r}")


#: the authors' one-letter iso answers (``MAP_ISO`` in their ``result_analysis/misc.py``)
ISO_ABBREVIATIONS = {"y": "Yes", "n": "No", "s": "Skip"}


def canonical_label(answer: object, valid: tuple[str, ...]) -> str | None:
    """``answer`` as one of ``valid``, mapped as the authors' parser maps it, else None.

    Surrounding spaces are stripped and case ignored (they lower-case answers);
    with iso labels the one-letter answers y / n / s name Yes / No / Skip.

    >>> canonical_label(" yes", ("Yes", "No")), canonical_label("N", ("Yes", "No")), canonical_label("s", ("Yes", "No"))
    ('Yes', 'No', None)
    >>> canonical_label("b", ("A", "B")), canonical_label("y", ("A", "B"))
    ('B', None)
    """
    if not isinstance(answer, str):
        return None
    a = answer.strip().casefold()
    hit = next((k for k in valid if k.casefold() == a), None)
    if hit is None and valid and set(valid) <= set(ISO_LABELS) and ISO_ABBREVIATIONS.get(a) in valid:
        hit = ISO_ABBREVIATIONS[a]
    return hit


def counts_from_answers(answers: Iterable[str | None], valid: tuple[str, ...]) -> tuple[dict[str, float], float]:
    """Count sampled answer labels as the authors' parser maps them; anything else (or None) is invalid.

    They lower-case answers before matching (so "a" is "A") and also map the
    iso answers y / n / s to Yes / No / Skip; surrounding spaces are stripped.
    A label not in ``valid`` (e.g. Skip or "s" without the neutral option) is
    invalid, as the authors zero the neutral label when it was not offered.

    >>> counts_from_answers(["A", "a", "x", None], ("A", "B"))
    ({'A': 2.0, 'B': 0.0}, 2.0)
    >>> counts_from_answers(["y", "N", "s", "yes"], ("Yes", "No"))
    ({'Yes': 2.0, 'No': 1.0}, 1.0)
    """
    counts = {k: 0.0 for k in valid}
    invalid = 0.0
    for a in answers:
        k = canonical_label(a, valid)
        if k is None:
            invalid += 1.0
        else:
            counts[k] += 1.0
    return counts, invalid


def neutral_offered(d: Mapping) -> bool:
    """Whether a ``probe metrics cmp-iso`` line shows the neutral option was offered.

    ``options`` (the labels offered, as in task records) names it, or a sampled
    answer chose it; a ``probs`` object that holds it also counts.
    """
    label = NEUTRAL_LABELS.get(d.get("task_type"))
    if label is None:
        return False
    seen = [x for key in ("options", "probs", "answers") if isinstance(d.get(key), (list, dict)) for x in d[key]]
    return any(canonical_label(x, (label,)) == label for x in seen)


def affirmation_rate(counts: Mapping[str, float]) -> float:
    """iso: Y / (Y + N + S); 0.0 when there is no valid answer (no affirmative answer observed)."""
    total = sum(counts.values())
    return counts.get("Yes", 0.0) / total if total > 0 else 0.0


def iso_preference(counts_t: Mapping[str, float], counts_t_prime: Mapping[str, float]) -> float:
    """p_t in iso: a_t / (a_t + a_t'), 0.5 when neither target got an affirmative answer.

    >>> iso_preference({"Yes": 0, "No": 5}, {"Yes": 0, "No": 5})
    0.5
    >>> iso_preference({"Yes": 3, "No": 1}, {"Yes": 1, "No": 3})
    0.75
    """
    a_t, a_tp = affirmation_rate(counts_t), affirmation_rate(counts_t_prime)
    return 0.5 if a_t + a_tp == 0 else a_t / (a_t + a_tp)


def cmp_order_preference(counts: Mapping[str, float], t_label: str) -> float:
    """p_t for one option order: k_t / (k_t + k_t'), 0.5 when no option was picked."""
    tp_label = "B" if t_label == "A" else "A"
    k_t, k_tp = counts.get(t_label, 0.0), counts.get(tp_label, 0.0)
    return 0.5 if k_t + k_tp == 0 else k_t / (k_t + k_tp)


def cmp_preference(counts_t_first: Mapping[str, float], counts_t_prime_first: Mapping[str, float]) -> float:
    """p_t in cmp: the mean of both option orders (t is A in the first, B in the second).

    >>> cmp_preference({"A": 1, "B": 0}, {"A": 1, "B": 0})   # always "A": pure position bias
    0.5
    """
    return 0.5 * (cmp_order_preference(counts_t_first, "A") + cmp_order_preference(counts_t_prime_first, "B"))


def target_consistency(counts_t_first: Mapping[str, float], counts_t_prime_first: Mapping[str, float]) -> float:
    """P(two independent draws, one per option order, pick the same target), choices among A/B only.

    A diagnostic, not the paper's Table 6 (which compares the orders' preferred
    targets: :func:`probe.tasks.cmp_iso.claims.preference_aligned`): with
    expected counts this probability is pulled toward 0.5. 0.5 = random, 0 =
    pure position bias, 1 = a fixed target. NaN when an order has no A/B pick.

    >>> target_consistency({"A": 1, "B": 0}, {"A": 0, "B": 1})   # t both times
    1.0
    """
    q = []
    for counts, t_label in ((counts_t_first, "A"), (counts_t_prime_first, "B")):
        k = counts.get("A", 0.0) + counts.get("B", 0.0)
        if k <= 0:
            return math.nan
        q.append(counts.get(t_label, 0.0) / k)
    return q[0] * q[1] + (1 - q[0]) * (1 - q[1])


def neutral_share(counts: Mapping[str, float], neutral_label: str) -> float:
    """Share of valid answers that are the neutral label; NaN without valid answers."""
    total = sum(counts.values())
    return counts.get(neutral_label, 0.0) / total if total > 0 else math.nan


def parity_gap(gaps: np.ndarray | list[float]) -> float:
    """PG = mean of per-pair gaps (p_t - p_t'); NaN for no pairs."""
    arr = np.asarray(gaps, dtype=float)
    return float(arr.mean()) if arr.size else math.nan


@dataclass(frozen=True)
class ParadigmResult:
    """One paradigm's PG and its per-pair gaps (kept for CIs and significance tests)."""

    paradigm: str
    pg: float
    n_pairs: int
    pair_ids: tuple = ()
    gaps: tuple[float, ...] = ()  # p_t - p_t' per pair, aligned with pair_ids
    neutral_share: float = math.nan  # mean share of the neutral label over prompts (NaN: not offered)
    n_baseline: int = 0  # iso: pairs with no affirmation at all; cmp: orders with no A/B pick
    n_no_valid: int = 0  # prompts without any valid answer (kept: iso affirmation 0, cmp order 0.5)
    n_pairs_no_valid: int = 0  # pairs with at least one such prompt in this paradigm
    # cmp only: mean over pairs of preference_aligned (the paper's Table 6 quantity, here on all pairs), NaN skipped
    consistency: float = math.nan
    pair_consistency: tuple[float, ...] = ()  # cmp: preference_aligned per pair, aligned with pair_ids

    def as_dict(self) -> dict:
        return {
            "pg": self.pg,
            "n_pairs": self.n_pairs,
            "preference_t": (self.pg + 1) / 2 if self.n_pairs else math.nan,
            "neutral_share": self.neutral_share,
            "n_baseline": self.n_baseline,
            "n_no_valid": self.n_no_valid,
            "n_pairs_no_valid": self.n_pairs_no_valid,
            **({"consistency": self.consistency} if self.paradigm == "cmp" else {}),
        }


@dataclass(frozen=True)
class CmpIsoSummary:
    iso: ParadigmResult
    cmp: ParadigmResult
    n_context_pairs: int  # distinct pair ids seen (incomplete ones included)
    incomplete: tuple = field(default=())  # pair ids with a missing prompt (error unless allowed)


def summarize(observations: Iterable[CmpIsoObservation], allow_incomplete: bool = False) -> CmpIsoSummary:
    """PG and diagnostics of both paradigms from per-prompt observations.

    A pair enters a paradigm when it has both of that paradigm's prompts
    (iso: t and t'; cmp: both orders). A pair with only one of them raises
    ``ValueError`` (naming it) unless ``allow_incomplete``, in which case it is
    skipped and listed in ``incomplete``. Duplicate prompts raise.
    """
    slots: dict[tuple, CmpIsoObservation] = {}
    pair_order: dict = {}  # insertion-ordered set of pair ids
    for o in observations:
        key = (o.context_pair_id, o.task_type, o.target if o.task_type == "iso" else o.order)
        if key in slots:
            raise ValueError(f"context pair {o.context_pair_id!r}: duplicate {o.task_type} prompt {key[2]!r}")
        slots[key] = o
        pair_order.setdefault(o.context_pair_id, None)
    incomplete = []
    iso_ids, iso_gaps, cmp_ids, cmp_gaps, cons = [], [], [], [], []
    iso_base = cmp_base = iso_nv = cmp_nv = 0
    for cp in pair_order:
        it, itp = slots.get((cp, "iso", "t")), slots.get((cp, "iso", "t_prime"))
        c1, c2 = slots.get((cp, "cmp", "t_first")), slots.get((cp, "cmp", "t_prime_first"))
        if (it is None) != (itp is None) or (c1 is None) != (c2 is None):
            if not allow_incomplete:
                raise ValueError(f"context pair {cp!r} lacks one of its paired prompts (iso t/t' or cmp orders)")
            incomplete.append(cp)
        if it is not None and itp is not None:
            if affirmation_rate(it.counts) + affirmation_rate(itp.counts) == 0:
                iso_base += 1
            iso_ids.append(cp)
            iso_gaps.append(2 * iso_preference(it.counts, itp.counts) - 1)
            iso_nv += it.n_valid == 0 or itp.n_valid == 0
        if c1 is not None and c2 is not None:
            cmp_base += sum(c.get("A", 0.0) + c.get("B", 0.0) == 0 for c in (c1.counts, c2.counts))
            cmp_ids.append(cp)
            cmp_gaps.append(2 * cmp_preference(c1.counts, c2.counts) - 1)
            cmp_nv += c1.n_valid == 0 or c2.n_valid == 0
            cons.append(preference_aligned(c1.counts, c2.counts))
    obs = list(slots.values())

    def shares(tt: str, label: str) -> float:
        vals = [neutral_share(o.counts, label) for o in obs if o.task_type == tt and label in o.counts]
        vals = [v for v in vals if not math.isnan(v)]
        return float(np.mean(vals)) if vals else math.nan

    def no_valid(tt: str) -> int:
        return sum(1 for o in obs if o.task_type == tt and o.n_valid == 0)

    cons_f = [c for c in cons if not math.isnan(c)]
    iso = ParadigmResult("iso", parity_gap(iso_gaps), len(iso_ids), tuple(iso_ids), tuple(iso_gaps),
                         shares("iso", "Skip"), iso_base, no_valid("iso"), iso_nv)
    cmp = ParadigmResult("cmp", parity_gap(cmp_gaps), len(cmp_ids), tuple(cmp_ids), tuple(cmp_gaps),
                         shares("cmp", "C"), cmp_base, no_valid("cmp"), cmp_nv,
                         float(np.mean(cons_f)) if cons_f else math.nan, tuple(cons))
    return CmpIsoSummary(iso, cmp, len(pair_order), tuple(incomplete))


def observation_from_dict(d: Mapping, mode: str = "expected", neutral: bool | None = None) -> CmpIsoObservation:
    """Parse one input line of ``probe metrics cmp-iso`` (raises ValueError naming the field).

    Lines: ``{"context_pair_id", "task_type", "target" (iso) | "order" (cmp),
    and "probs": {label: p} or "answers": [label, ...]}``, optionally
    ``"options"``: the labels offered. Labels are read as the task reads them
    (:func:`canonical_label`: any case, iso y / n / s; ``probs`` keys naming
    one label are summed). For sampled answers the neutral label
    (Skip / C) is a valid answer only when the neutral option was offered:
    ``neutral`` says so for the whole run (``None``: this line decides, see
    :func:`neutral_offered`); otherwise the neutral share is NaN, not 0.
    """
    for key in ("context_pair_id", "task_type"):
        if key not in d:
            raise ValueError(f"field {key!r}: missing")
    tt = d["task_type"]
    if tt not in ("iso", "cmp"):
        raise ValueError(f"field 'task_type': expected 'iso' or 'cmp', got {tt!r}")
    valid = ISO_LABELS if tt == "iso" else CMP_LABELS
    if ("probs" in d) == ("answers" in d):
        raise ValueError("field 'probs': give exactly one of 'probs' or 'answers'")
    n_invalid = 0.0
    if "probs" in d:
        probs = d["probs"]
        if not isinstance(probs, dict) or not probs:
            raise ValueError("field 'probs': expected a non-empty object {label: probability}")
        if any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in probs.values()):
            raise ValueError("field 'probs': probabilities must be numbers")
        merged: dict[str, float] = {}  # labels named as the task names them (any case; iso y / n / s), summed
        for k, v in probs.items():
            lab = canonical_label(k, valid)
            if lab is None:
                raise ValueError(f"field 'probs': label {k!r} is not one of {valid} for {tt}")
            merged[lab] = merged.get(lab, 0.0) + float(v)
        counts = counts_from_probs(merged, mode)
    else:
        answers = d["answers"]
        if not isinstance(answers, list):
            raise ValueError("field 'answers': expected a list of labels")
        offered = neutral_offered(d) if neutral is None else neutral
        counts, n_invalid = counts_from_answers(answers, valid if offered else valid[:2])
    return CmpIsoObservation(d["context_pair_id"], tt, d.get("target"), d.get("order"), counts, n_invalid)


def paired_gaps(a: ParadigmResult, b: ParadigmResult) -> tuple[list, np.ndarray, np.ndarray]:
    """The pair ids both results hold, with their gaps aligned (for paired tests)."""
    gb = dict(zip(b.pair_ids, b.gaps))
    ids = [cp for cp in a.pair_ids if cp in gb]
    ga = dict(zip(a.pair_ids, a.gaps))
    return ids, np.array([ga[c] for c in ids], dtype=float), np.array([gb[c] for c in ids], dtype=float)


def analyze(
    observations: Iterable[CmpIsoObservation],
    n_boot: int = 2000,
    n_iter: int = 10000,
    seed: int = 0,
    alpha: float = 0.05,
    allow_incomplete: bool = False,
) -> dict:
    """PG of both paradigms with bootstrap 95% CIs, and the cmp-vs-iso randomization test.

    Returns a JSON-ready dict: ``iso`` and ``cmp`` (``pg``, ``ci``, ``n_pairs``,
    ``neutral_share``, ...), ``n_context_pairs``, ``gap`` (PG_cmp - PG_iso) and
    ``cmp_vs_iso`` (``observed``, ``p_value``, ``significant``, ``n_pairs``;
    ``None`` when no pair has both paradigms). The test swaps a pair's iso and
    cmp outcomes with p = 0.5 (iso/cmp paper, F.2).
    """

    s = summarize(observations, allow_incomplete=allow_incomplete)
    out: dict = {"n_context_pairs": s.n_context_pairs, "incomplete": list(s.incomplete)}
    for res in (s.iso, s.cmp):
        d = res.as_dict()
        gaps = np.asarray(res.gaps, dtype=float)
        d["ci"] = list(bootstrap_ci(gaps, np.mean, n_boot=n_boot, seed=seed)) if gaps.size else [math.nan, math.nan]
        out[res.paradigm] = d
    out["gap"] = s.cmp.pg - s.iso.pg if s.cmp.n_pairs and s.iso.n_pairs else math.nan
    ids, cg, ig = paired_gaps(s.cmp, s.iso)
    if ids:
        t = randomization_test(cg, ig, n_iter=n_iter, seed=seed)
        out["cmp_vs_iso"] = {"observed": t.observed, "p_value": t.p_value, "significant": t.p_value < alpha,
                             "n_pairs": len(ids)}
    else:
        out["cmp_vs_iso"] = None
    return out
