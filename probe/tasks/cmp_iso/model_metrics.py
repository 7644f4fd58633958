"""iso/cmp across models (iso/cmp paper, section 4.4, Table 8, Tables E.1 and E.2) and the pooled variation test.

Pure functions over numbers already aggregated per model (no torch):

- :func:`size_correlation` (Table 8 / E.2): Pearson r between a model's PG and
  its parameter count (total, or active with ``use_active``) with its p-value
  and a Fisher-z confidence interval. With ``dense_families`` (Table 8) only
  dense models (active = total) of families with at least two such sizes
  enter; without it (Table E.2) every model with a count does.
- :func:`neutral_rank_agreement` (Table E.1): Kendall tau between the ranking
  by neutral-option share and the ranking by low |PG|, and the top-5
  intersection of the two rankings.
- :func:`pooled_variation_test`: cmp vs iso pooled over prompt variations,
  per-pair PG contributions of all variations of one context pair swapped as
  one block (the paper's appendix D: "the entire block of generations is
  swapped as a single unit").

>>> info = {"a-1b": ModelSize(1, 1, "a"), "a-3b": ModelSize(3, 3, "a"), "a-7b": ModelSize(7, 7, "a")}
>>> r = size_correlation({"a-1b": 0.1, "a-3b": 0.3, "a-7b": 0.7}, info)
>>> round(r["r"], 6), r["models"]
(1.0, ['a-1b', 'a-3b', 'a-7b'])
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from probe.metrics.significance import kendall_tau, pearson, randomization_test, top_k_intersection


@dataclass(frozen=True)
class ModelSize:
    """A model's total and active parameter counts (billions) and its family name."""

    total_b: float
    active_b: float
    family: str

    @property
    def dense(self) -> bool:
        # Mixture-of-experts models have fewer active than total parameters
        return math.isfinite(self.total_b) and math.isclose(self.total_b, self.active_b, rel_tol=1e-6)


_SIZE_TOKEN = re.compile(r"[-_ .]?\d+(\.\d+)?\s*[bBmM](?![a-zA-Z])")


def family_of(name: str) -> str:
    """A model's family from its name: the name without its size token and anything after it.

    >>> family_of("Qwen2.5-14B-Instruct"), family_of("gemma3-270m"), family_of("smollm2-1.7b")
    ('qwen2.5', 'gemma3', 'smollm2')
    """
    base = name.rsplit("/", 1)[-1]
    m = _SIZE_TOKEN.search(base)
    return (base[: m.start()] if m else base).strip("-_ .").lower()


def model_sizes(params_b: Mapping[str, float], active_b: Mapping[str, float] | None = None,
                families: Mapping[str, str] | None = None) -> dict[str, ModelSize]:
    """:class:`ModelSize` per model: active defaults to total (dense), family to :func:`family_of`."""
    active_b, families = active_b or {}, families or {}
    return {m: ModelSize(float(t), float(active_b.get(m, t)), families.get(m) or family_of(m))
            for m, t in params_b.items()}


def fisher_ci(r: float, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Confidence interval of Pearson's r by Fisher's z (NaN with n <= 3 or r undefined).

    >>> lo, hi = fisher_ci(0.5, 28)
    >>> round(lo, 3), round(hi, 3)
    (0.156, 0.736)
    """
    if n <= 3 or not math.isfinite(r):
        return (math.nan, math.nan)
    if abs(r) >= 1:
        return (r, r)
    z, se = math.atanh(r), 1 / math.sqrt(n - 3)
    q = float(stats.norm.ppf(1 - alpha / 2))
    return (math.tanh(z - q * se), math.tanh(z + q * se))


def eligible_models(sizes: Mapping[str, ModelSize], dense_families: bool = True) -> list[str]:
    """Models entering the correlation: with ``dense_families`` (Table 8) dense models of families
    holding >= 2 distinct dense sizes; otherwise (Table E.2) every model with a finite count."""
    ok = [m for m, s in sizes.items() if math.isfinite(s.total_b)]
    if not dense_families:
        return sorted(ok)
    dense = [m for m in ok if sizes[m].dense]
    per_family: dict[str, set[float]] = {}
    for m in dense:
        per_family.setdefault(sizes[m].family, set()).add(sizes[m].total_b)
    return sorted(m for m in dense if len(per_family[sizes[m].family]) >= 2)


def size_correlation(pg: Mapping[str, float], sizes: Mapping[str, ModelSize], use_active: bool = False,
                     dense_families: bool = True, alpha: float = 0.05) -> dict[str, Any]:
    """Pearson r of PG with (total or active) parameters over the eligible models with a finite PG.

    Returns ``r``, ``p``, ``ci`` (Fisher z, 1 - alpha), ``n`` and ``models``;
    r is NaN with fewer than 3 models or a constant input.
    """
    models = [m for m in eligible_models(sizes, dense_families) if m in pg and math.isfinite(float(pg[m]))]
    x = [sizes[m].active_b if use_active else sizes[m].total_b for m in models]
    y = [float(pg[m]) for m in models]
    r, p = pearson(x, y)
    return {"r": r, "p": p, "ci": fisher_ci(r, len(models), alpha), "n": len(models), "models": models,
            "parameters": "active" if use_active else "total", "dense_families": dense_families}


def neutral_rank_agreement(neutral_share: Mapping[str, float], pg: Mapping[str, float], k: int = 5) -> dict[str, Any]:
    """Table E.1: does ranking models by neutral share (high = "less biased") match ranking by low |PG|?

    Models with a non-finite neutral share or PG are left out. Returns
    ``tau``, ``p`` (Kendall tau-b), ``top_k`` (size of the intersection of the
    two top-``k`` sets, ties broken by name), ``k`` and ``n``.

    >>> d = neutral_rank_agreement({"a": .9, "b": .5, "c": .1}, {"a": .0, "b": .2, "c": -.5}, k=2)
    >>> d["tau"], d["top_k"]
    (1.0, 2)
    """
    models = sorted(m for m in neutral_share if m in pg and math.isfinite(float(neutral_share[m]))
                    and math.isfinite(float(pg[m])))
    ns = [float(neutral_share[m]) for m in models]
    neg_abs = [-abs(float(pg[m])) for m in models]
    tau, p = kendall_tau(ns, neg_abs)
    top = top_k_intersection(models, ns, neg_abs, k=k) if models else 0
    return {"tau": tau, "p": p, "top_k": top, "k": k, "n": len(models)}


def pooled_variation_test(rows: Sequence[Mapping[str, Any]], a: str = "cmp", b: str = "iso",
                          n_iter: int = 10000, seed: int = 0) -> dict[str, Any]:
    """Pooled randomization test of PG(a) - PG(b) over all prompt variations.

    ``rows``: one per (context pair, variation) with ``pair`` (the context
    pair id, benchmark-qualified if several benchmarks are pooled),
    ``variant`` and the per-pair gap ``a`` / ``b`` of each paradigm (p_t - p_t').
    Rows missing either gap are dropped and counted. The pooled PG of a
    paradigm is the mean gap over all rows; under the null a pair's two
    paradigms are exchangeable, and all variations of one pair are dependent,
    so they are swapped together (one block per pair).

    >>> rows = [{"pair": p, "variant": v, "cmp": 0.5, "iso": 0.0} for p in range(4) for v in range(2)]
    >>> r = pooled_variation_test(rows, n_iter=200)
    >>> r["diff"], r["n_blocks"], r["p"] < 0.2
    (0.5, 4, True)
    """
    keep = [r for r in rows if r.get(a) is not None and r.get(b) is not None
            and math.isfinite(float(r[a])) and math.isfinite(float(r[b]))]
    dropped = len(rows) - len(keep)
    if not keep:
        return {"diff": math.nan, "p": math.nan, "pg_" + a: math.nan, "pg_" + b: math.nan, "n_rows": 0,
                "n_blocks": 0, "n_variants": 0, "n_dropped": dropped, "n_iter": n_iter}
    x = np.array([float(r[a]) for r in keep])
    y = np.array([float(r[b]) for r in keep])
    blocks = [str(r["pair"]) for r in keep]
    res = randomization_test(x, y, n_iter=n_iter, seed=seed, blocks=blocks)
    return {"diff": res.observed, "p": res.p_value, "pg_" + a: float(x.mean()), "pg_" + b: float(y.mean()),
            "n_rows": len(keep), "n_blocks": res.n_blocks, "n_variants": len({r.get("variant") for r in keep}),
            "n_dropped": dropped, "n_iter": n_iter}


def pooled_cmp_vs_iso(gaps_by: Mapping[tuple, Mapping[Any, float]], n_iter: int = 10000,
                      seed: int = 0) -> list[dict[str, Any]]:
    """:func:`pooled_variation_test` per (base setting, benchmark, mode) from a run's per-pair gaps.

    ``gaps_by``: (base setting, variant, benchmark, mode, paradigm) -> {pair id:
    gap}, the layout :func:`probe.tasks.cmp_iso.summary.run_summary` builds.
    Every variant of the base setting enters; a pair's rows across variants
    form one block.

    >>> g = {("direct", v, "bbq", "expected", par): {c: (0.4 if par == "cmp" else 0.0) for c in range(3)}
    ...      for v in range(2) for par in ("iso", "cmp")}
    >>> r = pooled_cmp_vs_iso(g, n_iter=100)[0]
    >>> r["setting"], r["n_variants"], r["n_blocks"], round(r["diff"], 3)
    ('direct', 2, 3, 0.4)
    """
    cells: dict[tuple, list[dict]] = {}
    for (base, variant, bench, mode, par), gaps in gaps_by.items():
        if par != "cmp":
            continue
        iso = gaps_by.get((base, variant, bench, mode, "iso"), {})
        rows = cells.setdefault((base, bench, mode), [])
        rows += [{"pair": cp, "variant": variant, "cmp": g, "iso": iso.get(cp)} for cp, g in gaps.items()]
    out = []
    for (base, bench, mode), rows in sorted(cells.items(), key=lambda kv: tuple(map(str, kv[0]))):
        out.append({"setting": base, "benchmark": bench, "mode": mode,
                    **pooled_variation_test(rows, n_iter=n_iter, seed=seed)})
    return out
