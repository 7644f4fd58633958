"""ImplicitBBQ's matched explicit set and its counts in the paper's unit.

The paper (section 4) samples about 8.5k explicit records "to fair comparison" with its
combinatorial implicit set. Expanding every explicit template instead gives each
template the weight of its number of fillings (SES 56 % of the explicit records,
religion 2.5 %; 27 % and 30 % of the implicit ones), while an implicit template
weighs its contexts x cue combinations.
:func:`match_explicit` resamples the explicit set so that every (dimension,
template) carries the same share of the explicit records as of the implicit ones:

1. The target size N (explicit units; a unit is one filling with its ambiguous /
   disambiguated x negative / non-negative records) is the implicit set's number of
   units (context x cue combination), unless ``size`` (records per condition) is given.
2. N is apportioned over the (dimension, template) cells in proportion to their
   implicit units (largest remainders, so the shares match to within one unit), then
   within a template over its unordered group pairs in proportion to theirs.
3. A (template, pair) cell takes its fillings in a seeded order, cycling when it needs
   more than it has: every filling is used floor(n/a) or ceil(n/a) times. A repeat is
   the same four records under a new id (``<unit>-m<k>-<cond>-<pol>``, ``explicit_copy``
   = k) and the same ``context_id`` (its bootstrap cluster): an explicit context has no
   cue to vary, so its weight is carried by repetition, as an implicit context's is by
   its cue combinations.

Templates with explicit records but no implicit ones (SES Q8, whose wording binds the
groups; gender proper-name rows whose Person A/B form duplicates a group-word row) weigh
0 and leave the matched set. A template with implicit units but no explicit filling
cannot be matched and is reported in ``stats["unmatched"]``.

Counting unit (:func:`record_counts`): a *record* is one context (one condition) x one
question (one polarity), as in the paper's "question-context pairs" and BBQ. Every count
is records per condition (ambiguous, or disambiguated: the two are equal).

>>> from probe.tasks.implicitbbq.match import apportion
>>> apportion(10, {"a": 1, "b": 2, "c": 2})
{'a': 2, 'b': 4, 'c': 4}
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter, defaultdict
from typing import Any, Hashable, Iterable, Mapping, Sequence

from probe.io import stable_hash

__all__ = ["DIMENSIONS", "PAPER_RECORDS", "apportion", "format_record_counts", "match_explicit", "record_counts", "unit_of",
           "weights"]

#: ImplicitBBQ's dimensions in the paper's order (re-exported by :mod:`probe.tasks.implicitbbq.data`).
DIMENSIONS = ("age", "gender", "region", "religion", "ses", "caste")
#: The paper's counts (sections 3-4), in records (context x question) per condition.
#: "760 implicit contexts per condition" are also the "760 records" of its explicit remark;
#: "~8k total test instances per condition" add the cue combinations; "~8.5k records of
#: ambiguous and disambiguous contexts" are its sampled explicit set.
PAPER_RECORDS = {"implicit_base": 760, "implicit": 8000, "explicit": 8500}


def unit_of(item: Any) -> str:
    """The unit an item belongs to: its id without ``-<cond>-<pol>`` (same as the task's ``unit_key``)."""
    return item.id.rsplit("-", 2)[0]


def _pair(item: Any) -> tuple[str, str]:
    a, b = sorted((str(item.metadata.get("group1")), str(item.metadata.get("group2"))))
    return a, b


def _template(item: Any) -> tuple[str, str]:
    return item.category, str(item.metadata.get("q_id", item.template_id))


def apportion(n: int, weights: Mapping[Hashable, float]) -> dict[Hashable, int]:
    """Split ``n`` into integer parts proportional to ``weights`` (largest remainders; ties in key order).

    Every part is floor or ceil of its exact share; zero weights get 0. Raises ``ValueError`` when
    ``n`` > 0 and every weight is 0.
    """
    keys = list(weights)
    total = float(sum(weights.values()))
    if n <= 0 or not keys:
        return {k: 0 for k in keys}
    if total <= 0:
        raise ValueError("apportion: every weight is 0")
    exact = {k: n * weights[k] / total for k in keys}
    out = {k: int(exact[k]) for k in keys}
    rest = n - sum(out.values())
    for k in sorted(keys, key=lambda k: (-(exact[k] - out[k]), keys.index(k)))[:rest]:
        out[k] += 1
    return out


def weights(items: Iterable[Any], kind: str) -> Counter:
    """Units per (dimension, template) among the items of context kind ``kind``."""
    units: dict[tuple, set] = defaultdict(set)
    for it in items:
        if it.context_kind == kind:
            units[_template(it)].add(unit_of(it))
    return Counter({k: len(v) for k, v in units.items()})


def match_explicit(items: Sequence[Any], size: int | None = None, seed: int = 0,
                   stats: dict | None = None) -> list:
    """``items`` with the explicit ones resampled to the implicit set's (dimension, template) weights.

    ``size``: explicit records per condition (each unit gives 2: negative and non-negative
    question); default: as many as the implicit set has. Deterministic in (items, size, seed).
    ``stats`` (optional) gets ``units`` (N), ``distinct`` (fillings used), ``repeated``
    (fillings used more than once) and ``unmatched`` (templates with implicit but no explicit units).
    """
    imp_units: dict[tuple, dict[tuple, set]] = defaultdict(lambda: defaultdict(set))
    exp_units: dict[tuple, dict[tuple, dict[str, list]]] = defaultdict(lambda: defaultdict(dict))
    for it in items:
        if it.context_kind == "implicit":
            imp_units[_template(it)][_pair(it)].add(unit_of(it))
        elif it.context_kind == "explicit":
            exp_units[_template(it)][_pair(it)].setdefault(unit_of(it), []).append(it)
    unmatched = sorted(t for t in imp_units if t not in exp_units)
    n_imp = sum(len(u) for t in imp_units for u in imp_units[t].values())
    n = n_imp if size is None else size // 2
    per_template = apportion(n, {t: sum(len(u) for u in imp_units[t].values())
                                 for t in sorted(imp_units) if t in exp_units})
    picks: dict[str, int] = {}  # explicit unit -> how many times it is used
    for t, n_t in per_template.items():
        pools = exp_units[t]
        # a pair without explicit fillings passes its share to the template's other pairs
        per_pair = apportion(n_t, {p: len(imp_units[t][p]) if p in pools else 0 for p in sorted(imp_units[t])}) \
            if any(p in pools for p in imp_units[t]) else apportion(n_t, {p: len(pools[p]) for p in sorted(pools)})
        for p, n_p in per_pair.items():
            if not n_p:
                continue
            order = sorted(pools[p], key=lambda u: (stable_hash("explicit-match", seed, u), u))
            for i in range(n_p):
                u = order[i % len(order)]
                picks[u] = picks.get(u, 0) + 1
    out: list = []
    for it in items:
        if it.context_kind != "explicit":
            out.append(it)
            continue
        u = unit_of(it)
        if u not in picks:
            continue
        out.append(_tagged(it, u, 0))
    # repeats follow, in copy order, so that copy k of every unit comes after copy k-1
    copies = [(k, it) for it in items if it.context_kind == "explicit" and picks.get(unit_of(it), 0) > 1
              for k in range(1, picks[unit_of(it)])]
    out.extend(_tagged(it, unit_of(it), k) for k, it in sorted(copies, key=lambda x: x[0]))
    if stats is not None:
        stats.update(units=sum(picks.values()), distinct=len(picks),
                     repeated=sum(1 for v in picks.values() if v > 1), unmatched=unmatched)
    return out


def _tagged(item: Any, unit: str, k: int) -> Any:
    meta = {**item.metadata, "context_id": unit, "explicit_copy": k}
    new_id = item.id if k == 0 else f"{unit}-m{k}-{item.id.rsplit('-', 2)[1]}-{item.id.rsplit('-', 1)[1]}"
    return dataclasses.replace(item, id=new_id, metadata=meta)


COLUMNS = ("implicit_base", "implicit", "explicit", "explicit_distinct", "explicit_full", "neutral", "nochar")
HEADERS = {
    "implicit_base": "implicit, no cues (context x question)",
    "implicit": "implicit (x cue combinations)",
    "explicit": "explicit (matched set)",
    "explicit_distinct": "explicit distinct",
    "explicit_full": "explicit, every filling",
    "neutral": "neutral control",
    "nochar": "no-characteristics control",
}


def record_counts(items: Iterable[Any], full: Iterable[Any] | None = None) -> dict[str, dict[str, int]]:
    """Records (context x question) per condition, per dimension and in total.

    ``implicit_base``: implicit contexts x their 2 questions, each counted once whatever its cues;
    ``implicit``: with every cue combination; ``explicit``: the explicit records (repeats included);
    ``explicit_distinct``: without repeats; ``explicit_full``: the explicit records of ``full`` (the
    unmatched build; omitted when None); controls: each of their two person assignments counts.
    Only ambiguous records are counted: the disambiguated condition has the same numbers.
    """
    counts: dict[str, Counter] = defaultdict(Counter)
    base: dict[str, set] = defaultdict(set)
    distinct: dict[str, set] = defaultdict(set)
    for it in items:
        if it.context_condition != "ambig":
            continue
        kind, d = it.context_kind, it.category
        counts[d][kind] += 1
        if kind == "implicit":
            base[d].add((it.metadata.get("context_id"), it.question_polarity))
        elif kind == "explicit":
            distinct[d].add((it.metadata.get("context_id") or unit_of(it), it.question_polarity))
    full_counts: Counter = Counter()
    if full is not None:
        for it in full:
            if it.context_condition == "ambig" and it.context_kind == "explicit":
                full_counts[it.category] += 1
    out: dict[str, dict[str, int]] = {}
    for d in sorted(counts, key=lambda d: (DIMENSIONS.index(d) if d in DIMENSIONS else 99, d)):
        row = {"implicit_base": len(base[d]), "implicit": counts[d]["implicit"], "explicit": counts[d]["explicit"],
               "explicit_distinct": len(distinct[d]), "neutral": counts[d]["neutral"], "nochar": counts[d]["nochar"]}
        if full is not None:
            row["explicit_full"] = full_counts[d]
        out[d] = row
    if out:
        out["total"] = {k: sum(r[k] for r in out.values()) for k in next(iter(out.values()))}
    return out


def format_record_counts(table: Mapping[str, Mapping[str, int]], matched: bool = True) -> str:
    """Markdown table of :func:`record_counts` with the paper's numbers as the last row.

    ``matched=False``: the explicit records are the full expansion (no distinct / full columns).
    """
    cols = [c for c in COLUMNS if any(c in r for r in table.values())
            and (matched or c not in ("explicit_distinct", "explicit_full"))]
    headers = {**HEADERS, "explicit": HEADERS["explicit" if matched else "explicit_full"]}
    lines = ["| records per condition | " + " | ".join(headers[c] for c in cols) + " |",
             "|---" + "|---:" * len(cols) + "|"]
    for dim, row in table.items():
        cells = [f"{row[c]:,}" if c in row else "" for c in cols]
        name = f"**{dim}**" if dim == "total" else dim
        lines.append(f"| {name} | " + " | ".join(f"**{c}**" if dim == "total" else c for c in cells) + " |")
    paper = {"implicit_base": "760", "implicit": "~8,000", "explicit": "~8,500"}
    lines.append("| paper (sections 3-4) | " + " | ".join(paper.get(c, "-") for c in cols) + " |")
    return "\n".join(lines)
