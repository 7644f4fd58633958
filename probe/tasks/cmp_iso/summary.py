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
:func:`probe.tasks.cmp_iso.model_tables.combine_summaries` adds it.

CoT (:mod:`.chains`): a prompt's counts are the mean over its valid chains
(per mode: probabilities, one-hot argmax, sampled probabilities); chains
without a valid boxed answer add none (``cot_require_cue``) and are counted in
``cot``. A prompt without any valid answer (no valid chain; in the paper mode
also no label inside the nucleus) is kept, as iso/cmp paper's appendix B and the
authors' code keep it (iso affirmation 0, cmp order 0.5), and counted
(``n_no_valid`` / ``n_pairs_no_valid`` per row, ``no_valid_answer`` in total). Each row also holds ``mass`` (the label-mass distribution per
paradigm, :func:`probe.metrics.mass.mass_summary`, floor ``mass_floor``),
``answering_only`` (PG, CIs and the cmp-vs-iso test without the prompts below
the floor; a pair missing a prompt drops out of that paradigm) and, for CoT,
``cmp.claimed_random`` (the paper's Table 6 on the pairs whose generations for
both orders claim randomness, :mod:`probe.tasks.cmp_iso.claims`). Every CI
resamples context pairs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from probe.metrics.mass import DEFAULT_FLOOR, answering, mass_summary
from probe.metrics.significance import randomization_test
from probe.tasks.cmp_iso.chains import chain_counts, chain_index, chain_stats, mean_counts, prompt_key, valid
from probe.tasks.cmp_iso.claims import CLAIM_KEYWORDS, claimed_consistency, claims_randomness
from probe.tasks.cmp_iso.metrics import PAPER_MODE, CmpIsoObservation, analyze, summarize
from probe.tasks.cmp_iso.model_metrics import pooled_cmp_vs_iso

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


def _key(kv: tuple) -> tuple:
    return tuple(map(str, kv[0]))


def _observation(key: tuple, counts: dict):
    _, _, cp, tt, slot = key
    return CmpIsoObservation(cp, tt, slot if tt == "iso" else None, slot if tt == "cmp" else None, counts)


def run_summary(records: Any, config: Any) -> dict:
    """Everything the tables and the plot need for one model (JSON-ready).

    ``records``: a records DataFrame (or a list of such row dicts); ``config``:
    the task config (``n_boot``, ``n_iter``, ``seed``, ``alpha``,
    ``comparisons``, ``benchmarks``, ``max_pairs``, ``params_b``, ``mass_floor``,
    the ``cot_*`` keys). A prompt's counts are its record's label probabilities
    or, for sampled CoT, the mean over its valid chains (:mod:`.chains`).
    """

    rows = records.to_dict("records") if hasattr(records, "to_dict") else list(records)
    nonfinite = [str(r["id"]) for r in rows if not _finite(r)]
    spec = paper_spec(config)
    floor = float(getattr(config, "mass_floor", DEFAULT_FLOOR))
    keywords = tuple(getattr(config, "claim_keywords", None) or CLAIM_KEYWORDS)
    has_entries = bool(spec) and any(_entry(r, spec) is not None for r in rows)  # False: an exact-only run
    grouped = _group(rows, bool(getattr(config, "cot_require_cue", True)), keywords)
    modes = MODES + ((PAPER,) if has_entries else ())
    unsampleable: list[str] = []
    results, gaps_by, cot_cells = [], {}, {}
    for (setting, bench), prompts in sorted(grouped.cells.items(), key=_key):
        obs, paper_mass = _observations(prompts, grouped.labels_of, modes, spec if has_entries else None,
                                        unsampleable)
        cell = _Cell.of(setting, bench, prompts, grouped, paper_mass)
        for mode in modes:
            row, s = _mode_result(cell, mode, obs[mode], config, floor)
            results.append(row)
            for par in (s.iso, s.cmp):
                gaps_by[(cell.base, cell.variant, bench, mode, par.paradigm)] = dict(zip(par.pair_ids, par.gaps))
        if cell.is_cot:
            cot_cells[f"{setting}|{bench}"] = _cot_cell(grouped.finite_rows[(setting, bench)], prompts,
                                                        _mode_counts(spec), modes, grouped.labels_of)
    return {"benchmarks": list(config.benchmarks), "settings": sorted({r["setting"] for r in results}),
            "max_pairs": config.max_pairs, "seed": config.seed, "alpha": config.alpha, "n_iter": config.n_iter,
            "n_boot": config.n_boot, "nonfinite_records": nonfinite, "n_nonfinite": len(nonfinite),
            "results": results, "comparisons": comparisons(gaps_by, config, randomization_test),
            # cmp vs iso with every prompt variation of a setting pooled, a pair's variations one swap block
            "pooled_cmp_vs_iso": pooled_cmp_vs_iso(gaps_by, config.n_iter, config.seed),
            "category": str(getattr(config, "category", "gender")),
            "variants": variant_spread(results), "params_b": dict(config.params_b),
            "ci": {"method": "percentile bootstrap", "level": 0.95, "n_boot": config.n_boot,
                   "unit": "context pair (its iso t/t' or both cmp orders, every CoT chain of them)"},
            "mass_floor": floor,
            "no_valid_answer": no_valid_summary(results),
            "cot": cot_summary(config, cot_cells, keywords) if cot_cells else {},
            "paper_equivalent": {} if not has_entries else _paper_equivalent(spec, unsampleable)}


@dataclass
class _Grouped:
    """A run's finite records grouped per (setting, benchmark) cell and prompt."""

    cells: dict[tuple, dict[tuple, list[dict]]] = field(default_factory=dict)  # cell -> prompt -> its valid records
    finite_rows: dict[tuple, list[dict]] = field(default_factory=dict)  # cell -> its finite records
    # cell -> cmp prompt -> whether a chain of it claims randomness
    claims: dict[tuple, dict[tuple, bool]] = field(default_factory=dict)
    labels_of: dict[tuple, tuple] = field(default_factory=dict)  # prompt -> the labels it offered


def _group(rows: list[dict], require_cue: bool, keywords: tuple[str, ...]) -> _Grouped:
    """``rows`` per cell and prompt: a prompt's valid records (chains), its labels, CoT randomness claims."""

    g = _Grouped()
    for r in rows:
        cell = (r["setting"], r["benchmark"])
        if r.get("reasoning") == "cot" and r["task_type"] == "cmp":
            k = prompt_key(r)
            g.claims.setdefault(cell, {})[k] = g.claims.get(cell, {}).get(k, False) or claims_randomness(
                r.get("generation"), keywords)
        if not _finite(r):  # NaN/inf logits: never averaged, listed in the summary
            continue
        g.finite_rows.setdefault(cell, []).append(r)
        prompts = g.cells.setdefault(cell, {})
        g.labels_of.setdefault(prompt_key(r), tuple(r["options"]))
        # a chain without a valid answer adds no answer, but its prompt stays: a prompt none of whose
        # chains has one is kept with no valid answer (iso/cmp paper, appendix B: iso affirmation 0, cmp order 0.5)
        chains_of = prompts.setdefault(prompt_key(r), [])
        if valid(r, require_cue):
            chains_of.append(r)
    return g


def _observations(prompts: dict[tuple, list[dict]], labels_of: dict[tuple, tuple], modes: tuple[str, ...],
                  spec: dict[str, float] | None, unsampleable: list[str]) -> tuple[dict[str, list], dict[tuple, float]]:
    """One cell's observations per mode, and per prompt its label mass under the authors' sampling (``spec``;
    None: an exact-only run). Records no label of which can be sampled are appended to ``unsampleable``."""

    obs: dict[str, list] = {m: [] for m in modes}
    paper_mass: dict[tuple, float] = {}
    for key, chains in prompts.items():
        none = {lab: 0.0 for lab in labels_of[key]}  # no valid answer: every count 0
        for m in MODES:
            obs[m].append(_observation(key, mean_counts([chain_counts(c, m) for c in chains]) if chains
                                       else none))
        if spec is not None:
            sp = [(c, sampled_probs(c, spec)) for c in chains]
            unsampleable += [str(c["id"]) for c, x in sp if x is None]
            ok = [(c, x) for c, x in sp if x is not None]
            # a chain (or direct record) whose labels all fall outside the nucleus never samples a label:
            # under the authors' sampling it gives no valid answer, so a prompt with none sampleable has
            # no valid answer there either (the appendix-B rule, not dropped)
            obs[PAPER].append(_observation(key, mean_counts([chain_counts(c, PAPER, x[0]) for c, x in ok])
                                           if ok else none))
            if ok:
                paper_mass[key] = float(np.mean([x[1] for _, x in ok]))
    return obs, paper_mass


@dataclass(frozen=True)
class _Cell:
    """What one (setting, benchmark) cell's per-mode analysis reads beside its observations."""

    setting: str
    bench: str
    base: Any
    variant: int
    is_cot: bool
    mass: dict[tuple, float]  # answered prompt -> its valid chains' mean label mass
    by_tt: dict[str, list[float]]  # paradigm -> those masses
    paper_mass: dict[tuple, float]  # prompt -> its label mass under the authors' sampling
    claims: dict[tuple, bool] | None  # cmp prompt -> a chain claims randomness; None: no CoT cmp prompt

    @classmethod
    def of(cls, setting: str, bench: str, prompts: dict[tuple, list[dict]], grouped: _Grouped,
           paper_mass: dict[tuple, float]) -> _Cell:
        first = grouped.finite_rows[(setting, bench)][0]
        answered = {k: v for k, v in prompts.items() if v}
        mass = {k: float(np.mean([c["mass"] for c in v])) for k, v in answered.items()}
        by_tt = {tt: [m for k, m in mass.items() if k[3] == tt] for tt in ("iso", "cmp")}
        return cls(setting, bench, first["base_setting"], int(first["variant"]), first.get("reasoning") == "cot",
                   mass, by_tt, paper_mass, grouped.claims.get((setting, bench)))


def _mode_result(cell: _Cell, mode: str, obs: list, config: Any, floor: float) -> tuple[dict, Any]:
    """One result row (PG, CIs, tests, label mass, answering-only) of ``cell`` in ``mode``, and its
    :func:`~probe.tasks.cmp_iso.metrics.summarize` (per-pair gaps)."""

    res = analyze(obs, n_boot=config.n_boot, n_iter=config.n_iter, seed=config.seed,
                  alpha=config.alpha, allow_incomplete=True)  # an interrupted run: finished pairs only
    # the same cell without the prompts whose labels carry less than the floor (a pair needs both prompts)
    kept = [o for o in obs if answering(cell.mass.get((cell.setting, cell.bench, o.context_pair_id, o.task_type,
                                                       o.target or o.order)), floor)]
    only = res if len(kept) == len(obs) else analyze(
        kept, n_boot=config.n_boot, n_iter=config.n_iter, seed=config.seed, alpha=config.alpha,
        allow_incomplete=True) if kept else None
    answering_only = None if only is None else {"iso": dict(only["iso"]), "cmp": dict(only["cmp"]),
                                                "gap": only["gap"], "cmp_vs_iso": only["cmp_vs_iso"]}
    s = summarize(obs, allow_incomplete=True)
    if cell.is_cot and cell.claims is not None:
        cl = cell.claims
        claimed = [cp for cp in s.cmp.pair_ids if cl.get((cell.setting, cell.bench, cp, "cmp", "t_first"))
                   and cl.get((cell.setting, cell.bench, cp, "cmp", "t_prime_first"))]
        res["cmp"]["claimed_random"] = claimed_consistency(
            dict(zip(s.cmp.pair_ids, s.cmp.pair_consistency)), claimed, config.n_boot, config.seed,
            config.alpha)
    lm = {tt: float(np.mean([cell.paper_mass[k] for k in cell.paper_mass if k[3] == tt] or [np.nan]))
          for tt in ("iso", "cmp")} if mode == PAPER else {tt: float(np.mean(v or [np.nan]))
                                                           for tt, v in cell.by_tt.items()}
    row = {"setting": cell.setting, "base_setting": cell.base, "variant": cell.variant, "benchmark": cell.bench,
           "mode": mode, "label_mass": lm, **res,
           "mass": {tt: mass_summary(v, floor) for tt, v in cell.by_tt.items()},
           "answering_only": answering_only}
    return row, s


def _mode_counts(spec: dict[str, float] | None) -> Callable[[dict, str], dict | None]:
    """A record's counts in a mode (the paper mode: under ``spec``, None when no label can be sampled)."""

    def counts(rec: dict, mode: str) -> dict | None:
        if mode != PAPER:
            return chain_counts(rec, mode)
        sp = sampled_probs(rec, spec) if spec else None
        return None if sp is None else chain_counts(rec, mode, sp[0])

    return counts


def _cot_cell(rows: list[dict], prompts: dict[tuple, list[dict]], counts: Callable[[dict, str], dict | None],
              modes: tuple[str, ...], labels_of: dict[tuple, tuple]) -> dict:
    """A CoT cell's chain statistics (:func:`~probe.tasks.cmp_iso.chains.chain_stats`) from its finite
    ``rows``; without chains, its prompt counts."""

    answered = {k: v for k, v in prompts.items() if v}
    chains = [r for r in rows if chain_index(r.get("chain")) is not None]
    return chain_stats(chains, answered, counts, modes, labels_of) if chains else {
        "n_prompts": len(prompts), "n_prompts_no_answer": len(prompts) - len(answered)}


def _paper_equivalent(spec: dict[str, float], unsampleable: list[str]) -> dict:
    """The summary's ``paper_equivalent`` entry: the authors' sampling and the records it cannot sample."""
    return {"mode": PAPER, "settings": {**spec, "source": "the authors' model_config/default.yaml"},
            "estimator": "expected counts under sampling at this temperature and nucleus, renormalised over "
                         "the labels (samples that are no label are excluded, as the authors' parser does)",
            "n_unsampleable": len(unsampleable), "unsampleable_records": unsampleable}


def no_valid_summary(results: list[dict]) -> dict:
    """Prompts (and pairs) kept without any valid answer, per mode, in total and per setting x benchmark.

    Seed 003 appendix B and the authors' ``_get_pg_iso`` / ``_get_pg_cmp``: such
    a prompt is kept, its affirmation rate 0 (iso; a pair with no affirmation
    for either target scores 0.5) or its order's preference 0.5 (cmp). A CoT
    prompt has none when no chain holds a valid boxed answer; in the ``paper``
    mode also when no chain's labels fall inside the nucleus.
    """
    out: dict[str, Any] = {"rule": "kept: iso affirmation 0 (0.5 when neither target is affirmed), cmp order 0.5 "
                                   "(iso/cmp paper, appendix B)", "by_mode": {}, "by_cell": []}
    for r in results:
        tot = out["by_mode"].setdefault(r["mode"], {f"{k}_{par}": 0 for k in ("n_prompts", "n_pairs")
                                                     for par in ("iso", "cmp")})
        cell = {"setting": r["setting"], "benchmark": r["benchmark"], "mode": r["mode"]}
        for par in ("iso", "cmp"):
            n, npairs = int(r[par].get("n_no_valid", 0)), int(r[par].get("n_pairs_no_valid", 0))
            tot[f"n_prompts_{par}"] += n
            tot[f"n_pairs_{par}"] += npairs
            cell.update({f"n_prompts_{par}": n, f"n_pairs_{par}": npairs, f"n_pairs_{par}_total": r[par]["n_pairs"]})
        if any(cell[f"n_prompts_{par}"] for par in ("iso", "cmp")):
            out["by_cell"].append(cell)
    return out


def cot_summary(config: Any, cells: dict, keywords: tuple[str, ...]) -> dict:
    """The CoT chains' settings and, per ``setting|benchmark``, their counts and spread."""
    k = int(getattr(config, "cot_chains", 0))
    totals = {t: sum(v.get(t, 0) for v in cells.values()) for t in ("n_chains", "n_chains_no_cue", "n_prompts",
                                                                     "n_prompts_no_valid_chain")}
    return {"settings": {"chains": k, "decoding": "sampled" if k else "greedy",
                         **({"temperature": config.cot_temperature, "top_p": config.cot_top_p} if k else {}),
                         "max_new_tokens": config.max_new_tokens, "seed": config.seed,
                         "require_cue": bool(getattr(config, "cot_require_cue", True)),
                         "answer": "the label scored exactly where the authors' parser finds the chain's last boxed "
                                   "answer (lower-cased boxed{yes|no|y|n|skip|s} / boxed{a|b|c}; an unoffered last "
                                   "label or none: no valid answer), summed over its forms without whitespace",
                         "estimator": "mean over a prompt's valid chains of the exactly scored label probabilities "
                                      "(Rao-Blackwellised counts); no valid chain: the prompt is kept with no "
                                      "valid answer (iso/cmp paper, appendix B)",
                         "claim_keywords": list(keywords)},
            **totals, "by_cell": cells}


def comparisons(gaps_by: dict[tuple, dict], config: Any, test: Any) -> list[dict]:
    """Randomization tests between the setting pairs of ``config.comparisons``, per benchmark, mode, paradigm.

    All variants of both settings enter; a pair's variants form one swap block
    (iso/cmp paper, appendix D). ``gaps_by``: (base setting, variant, benchmark,
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
