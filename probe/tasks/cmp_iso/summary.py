"""One model's iso/cmp results from its records: PG per setting x benchmark x mode, comparisons, variants.

Input: the records of a ``cmp_iso`` run as a DataFrame (``meta`` flattened:
``setting``, ``base_setting``, ``variant``, ``benchmark``, ``context_pair_id``,
``task_type``, ``target``, ``order``) with ``options``, ``probs``, ``mass`` and
``finite``. Records with non-finite scores are never averaged; their ids are
listed in ``nonfinite_records``.

Modes: ``expected`` (exact label probabilities as expected counts),
``argmax`` (the most probable label as one answer) and, when the config names
the authors' sampling (``paper_temperature``, ``paper_top_p``), ``paper``: the
expected counts under that sampling, i.e. the label distribution at
temperature T cut to the top-p nucleus and renormalised over the labels (what
the authors' parser keeps: samples that are no label are excluded). A record
whose labels all fall outside the nucleus has no such distribution: it is
left out of the paper mode and counted (``paper_equivalent.n_unsampleable``). The summary's rows carry no model name;
:func:`probe.reports.cmp_iso_models.combine_summaries` adds it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from probe.metrics.cmp_iso import PAPER_MODE

MODES = ("expected", "argmax")
PAPER = PAPER_MODE  # the mode of the paper-equivalent estimate


def paper_spec(config: Any) -> dict[str, float] | None:
    """The authors' sampling as a spec mapping (None: paper_temperature is null, exact scores only)."""
    t = getattr(config, "paper_temperature", None)
    return None if t is None else {"temperature": float(t), "top_p": float(getattr(config, "paper_top_p", 1.0))}


def _entry(rec: dict, spec: dict[str, float]) -> dict | None:
    entries = rec.get("sampling")
    for e in entries if isinstance(entries, (list, tuple)) else ():
        if math.isclose(e["temperature"], spec["temperature"]) and math.isclose(e["top_p"], spec["top_p"]):
            return e
    return None


def sampled_probs(rec: dict, spec: dict[str, float]) -> tuple[list[float], float] | None:
    """(label probabilities, label mass) of ``rec`` under ``spec`` from its ``sampling`` entries;
    None when the record has no entry for it or no label can be sampled."""
    e = _entry(rec, spec)
    if e is None:
        return None
    probs = [math.nan if p is None else float(p) for p in e["probs"]]
    mass = math.nan if e.get("mass") is None else float(e["mass"])
    ok = all(math.isfinite(p) for p in probs) and math.isfinite(mass) and mass > 0
    return (probs, mass) if ok else None


def _finite(rec: dict) -> bool:
    probs = rec.get("probs")
    return bool(rec.get("finite", True)) and probs is not None and len(probs) > 0 and all(
        isinstance(p, (int, float)) and math.isfinite(p) for p in probs)


def _observation_dict(rec: dict) -> dict:
    """The ``probe metrics cmp-iso`` line of one record (label -> probability)."""
    return {"context_pair_id": rec["context_pair_id"], "task_type": rec["task_type"],
            "target": rec.get("target"), "order": rec.get("order"),
            "probs": dict(zip(rec["options"], rec["probs"]))}


def _key(kv: tuple) -> tuple:
    return tuple(map(str, kv[0]))


def run_summary(records: Any, config: Any) -> dict:
    """Everything the tables and the plot need for one model (JSON-ready).

    ``records``: a records DataFrame (or a list of such row dicts); ``config``:
    the task config (``n_boot``, ``n_iter``, ``seed``, ``alpha``,
    ``comparisons``, ``benchmarks``, ``max_pairs``, ``params_b``).
    """
    from probe.metrics.cmp_iso import analyze, observation_from_dict, summarize
    from probe.metrics.significance import randomization_test

    rows = records.to_dict("records") if hasattr(records, "to_dict") else list(records)
    nonfinite = [str(r["id"]) for r in rows if not _finite(r)]
    spec = paper_spec(config)
    unsampleable: list[str] = []
    has_entries = bool(spec) and any(_entry(r, spec) is not None for r in rows)  # False: an exact-only run
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if _finite(r):  # NaN/inf logits: never averaged, listed in the summary
            groups.setdefault((r["setting"], r["benchmark"]), []).append(r)
    results, gaps_by = [], {}
    for (setting, bench), recs in sorted(groups.items(), key=_key):
        base, variant = recs[0]["base_setting"], int(recs[0]["variant"])
        mass = {tt: float(np.mean([r["mass"] for r in recs if r["task_type"] == tt] or [np.nan]))
                for tt in ("iso", "cmp")}
        lines = {m: [_observation_dict(r) for r in recs] for m in MODES}
        if has_entries:
            sampled = [(r, sampled_probs(r, spec)) for r in recs]
            unsampleable += [str(r["id"]) for r, sp in sampled if sp is None]
            ok = [(r, sp) for r, sp in sampled if sp is not None]
            if ok:  # no row where no record can be sampled
                lines[PAPER] = [{**_observation_dict(r), "probs": dict(zip(r["options"], sp[0]))} for r, sp in ok]
            paper_mass = {tt: float(np.mean([sp[1] for r, sp in ok if r["task_type"] == tt] or [np.nan]))
                          for tt in ("iso", "cmp")}
        for mode, mode_lines in lines.items():
            # the paper mode is an expected count too, under the sampled distribution
            obs = [observation_from_dict(d, "argmax" if mode == "argmax" else "expected") for d in mode_lines]
            res = analyze(obs, n_boot=config.n_boot, n_iter=config.n_iter, seed=config.seed, alpha=config.alpha,
                          allow_incomplete=True)  # an interrupted run: finished pairs only
            results.append({"setting": setting, "base_setting": base, "variant": variant, "benchmark": bench,
                            "mode": mode, "label_mass": paper_mass if mode == PAPER else mass, **res})
            s = summarize(obs, allow_incomplete=True)
            for par in (s.iso, s.cmp):
                gaps_by[(base, variant, bench, mode, par.paradigm)] = dict(zip(par.pair_ids, par.gaps))
    return {"benchmarks": list(config.benchmarks), "settings": sorted({r["setting"] for r in results}),
            "max_pairs": config.max_pairs, "seed": config.seed, "alpha": config.alpha, "n_iter": config.n_iter,
            "n_boot": config.n_boot, "nonfinite_records": nonfinite, "n_nonfinite": len(nonfinite),
            "results": results, "comparisons": comparisons(gaps_by, config, randomization_test),
            "variants": variant_spread(results), "params_b": dict(config.params_b),
            "paper_equivalent": {} if not has_entries else {
                "mode": PAPER, "settings": {**spec, "source": "the authors' model_config/default.yaml"},
                "estimator": "expected counts under sampling at this temperature and nucleus, renormalised over "
                             "the labels (samples that are no label are excluded, as the authors' parser does)",
                "n_unsampleable": len(unsampleable), "unsampleable_records": unsampleable}}


def comparisons(gaps_by: dict[tuple, dict], config: Any, test: Any) -> list[dict]:
    """Randomization tests between the setting pairs of ``config.comparisons``, per benchmark, mode, paradigm.

    All variants of both settings enter; a pair's variants form one swap block
    (seed 003, appendix D). ``gaps_by``: (base setting, variant, benchmark,
    mode, paradigm) -> {pair id: gap}.
    """
    out = []
    for a, b in config.comparisons:
        # every (benchmark, mode, paradigm) where setting a has any variant (not only variant 0)
        cells = sorted({(k[2], k[3], k[4]) for k in gaps_by if k[0] == a}, key=lambda c: tuple(map(str, c)))
        for bench, mode, par in cells:
            xs, ys, blocks = [], [], []
            for (b2, v2, be2, mo2, pa2), ga in sorted(gaps_by.items(), key=_key):
                if (b2, be2, mo2, pa2) != (a, bench, mode, par):
                    continue
                other = gaps_by.get((b, v2, bench, mode, par), {})  # the same variant of setting b
                for cp, g in ga.items():
                    if cp in other:
                        xs.append(g), ys.append(other[cp]), blocks.append(str(cp))
            if not xs:
                continue
            t = test(xs, ys, n_iter=config.n_iter, seed=config.seed, blocks=blocks)
            out.append({"benchmark": bench, "mode": mode, "paradigm": par, "a": a, "b": b,
                        "pg_a": float(np.mean(xs)), "pg_b": float(np.mean(ys)), "observed": t.observed,
                        "p_value": t.p_value, "significant": t.p_value < config.alpha,
                        "n_units": t.n_units, "n_blocks": t.n_blocks})
    return out


def variant_spread(results: list[dict]) -> list[dict]:
    """PG over the variants of each base setting (mean, std, IQR, range), where it has two or more."""
    by_base: dict[tuple, dict[int, float]] = {}
    for r in results:
        for par in ("iso", "cmp"):
            by_base.setdefault((r["base_setting"], r["benchmark"], r["mode"], par), {})[r["variant"]] = r[par]["pg"]
    out = []
    for (base, bench, mode, par), pv in sorted(by_base.items(), key=_key):
        if len(pv) < 2:
            continue
        vals = np.array([pv[k] for k in sorted(pv)], dtype=float)
        q1, q3 = np.nanpercentile(vals, [25, 75])
        out.append({"setting": base, "benchmark": bench, "mode": mode, "paradigm": par,
                    "per_variant": {str(k): pv[k] for k in sorted(pv)}, "mean": float(np.nanmean(vals)),
                    "std": float(np.nanstd(vals, ddof=1)), "iqr": float(q3 - q1),
                    "min": float(np.nanmin(vals)), "max": float(np.nanmax(vals))})
    return out
