"""``--limit N`` as a stratified sample: every task's strata covered before any repeats, whole units kept.

A task names its strata (``task.selection.names``, e.g. ``("category",)`` for BBQ or
``("bias_type", "descriptor")`` for HBB) and gives each item its stratum values
(``selection.strata``) and its unit (``selection.units``: the items that are scored and
bootstrapped together, such as a BBQ template instance's four variants;
:class:`probe.tasks.facets.Selection`).

:func:`stratified_limit` orders the units by a nested round-robin (the first
stratum varies fastest, then the second within it, each outer value starting
at another inner one, ...), keeps each stratum's
own order (or a seeded hash order), and takes whole units in that order while
they fit in ``limit`` items. A smaller limit is a prefix of a larger one.

:func:`coverage` says what a selection covered and left out, per stratum name;
the runner prints it and records it in ``summary.json`` under ``coverage``.

>>> items = [("a", 1), ("a", 2), ("b", 3), ("c", 4), ("c", 5)]
>>> [i for _, i in stratified_limit(items, 3, [(s,) for s, _ in items])]
[1, 3, 4]
>>> cov = coverage(items, stratified_limit(items, 2, [(s,) for s, _ in items]), ("letter",),
...                lambda xs: [(s,) for s, _ in xs])
>>> cov["strata"]["letter"]["covered"], cov["strata"]["letter"]["left_out"]
({'a': 1, 'b': 1}, ['c'])
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Hashable, Sequence

__all__ = ["stratified_limit", "spread_limit", "coverage", "coverage_line"]


def _round_robin(node: Any, shift: int = 0) -> list:
    """The units under a nested dict of strata, interleaved one child at a time at every level; the
    children start their own children's rotations at different places, so inner strata are spread too."""
    if isinstance(node, list):
        return node
    children = list(node.values())
    if children:
        shift %= len(children)
        children = children[shift:] + children[:shift]
    # spread the starts over the inner values: with 10 outer and 16 inner values, start 2 apart
    inner = max((len(c) for c in children if isinstance(c, dict)), default=0)
    step = max(1, -(-inner // max(len(children), 1)))
    queues = [_round_robin(child, k * step) for k, child in enumerate(children)]
    out: list = []
    for i in range(max((len(q) for q in queues), default=0)):
        for q in queues:
            if i < len(q):
                out.append(q[i])
    return out


def stratified_limit(items: Sequence[Any], limit: int | None, strata: Sequence[tuple],
                     units: Sequence[Hashable] | None = None, seed: int | None = None) -> list:
    """The items a ``--limit`` run scores: whole units in nested round-robin order over ``strata``.

    ``strata``: one tuple of stratum values per item (the first value the outermost level);
    ``units``: one unit key per item (default: every item its own unit); a unit's stratum is its
    first item's. ``seed``: order the units within a stratum by a seeded hash (``None``: as given).
    Units are taken in order while they fit; a unit larger than what is left is passed over for a
    smaller one; a limit smaller than the first unit takes that unit's first ``limit`` items (the
    limit is never exceeded). ``limit`` None: all.
    """
    items = list(items)
    if limit is None or limit >= len(items):
        return items
    if limit < 1:
        return []
    keys = list(units) if units is not None else list(range(len(items)))
    groups: dict[Hashable, list[int]] = {}
    first_stratum: dict[Hashable, tuple] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
        first_stratum.setdefault(key, tuple(strata[i]))
    picked: list[int] = []
    for i, key in enumerate(_unit_order(groups, first_stratum, seed)):
        size = len(groups[key])
        if len(picked) + size <= limit:
            picked += groups[key]
        elif i == 0:  # a limit under one unit: that unit's first items
            picked = groups[key][:limit]
        if len(picked) >= limit:
            break
    return [items[i] for i in picked]


def spread_limit(items: Sequence[Any], limit: int | None, strata: Sequence[tuple],
                 units: Sequence[Hashable]) -> list:
    """Like :func:`stratified_limit`, but a limit too small to give every stratum cell one whole unit takes the
    first unit of each cell one item at a time (cell by cell in the same round-robin order; cell k starts at
    its unit's item k, so the items' places in their units, such as a context's condition and polarity, vary
    too): as many cells as there are items, rather than one whole unit. From the limit that holds those first
    units on, the selection is :func:`stratified_limit`'s (the same items at that limit); a smaller limit's
    selection is still a subset of a larger one's.

    >>> items = [("a", "u1", 1), ("a", "u1", 2), ("b", "u2", 3), ("b", "u2", 4)]
    >>> [i for *_, i in spread_limit(items, 2, [(s,) for s, *_ in items], [u for _, u, _ in items])]
    [1, 4]
    """
    items = list(items)
    if limit is None or limit >= len(items):
        return items
    groups: dict[Hashable, list[int]] = {}
    cell_of: dict[Hashable, tuple] = {}
    for i, key in enumerate(units):
        groups.setdefault(key, []).append(i)
        cell_of.setdefault(key, tuple(strata[i]))
    firsts: dict[tuple, Hashable] = {}
    for key in _unit_order(groups, cell_of):
        firsts.setdefault(cell_of[key], key)
    if limit >= sum(len(groups[k]) for k in firsts.values()):
        return stratified_limit(items, limit, strata, units)
    queues = [groups[k][j % len(groups[k]):] + groups[k][:j % len(groups[k])] for j, k in enumerate(firsts.values())]
    picked = [q[i] for i in range(max(map(len, queues))) for q in queues if i < len(q)][:limit]
    return [items[i] for i in picked]


def _unit_order(groups: dict[Hashable, list[int]], cell_of: dict[Hashable, tuple], seed: int | None = None) -> list:
    """The unit keys in nested round-robin order over their cells (a unit's cell: its first item's strata;
    no strata: one flat list); ``seed``: each cell's units in a seeded hash order, else as given."""
    tree: dict = {}
    for key in groups:
        node = tree
        path = cell_of[key] or ((),)
        for level, value in enumerate(path):
            node = node.setdefault(value, [] if level == len(path) - 1 else {})
        node.append(key)
    if seed is not None:
        from probe.io import stable_hash

        def shuffle(node: Any) -> None:
            for child in node.values():
                if isinstance(child, list):
                    child.sort(key=lambda u: (stable_hash(seed, u), str(u)))
                else:
                    shuffle(child)
        shuffle(tree)
    return _round_robin(tree)


def coverage(pool: Sequence[Any], selected: Sequence[Any], names: Sequence[str],
             strata_of: Callable[[Sequence[Any]], Sequence[tuple]], limit: int | None = None,
             unit: str | None = None, units_of: Callable[[Sequence[Any]], Sequence[Hashable] | None] | None = None
             ) -> dict[str, Any]:
    """What ``selected`` covers of ``pool``, per stratum name: items per value covered and the values
    left out; with two or more names also their combinations (``cells``); with ``units_of`` (one unit key
    per item) how many units the selection touches and how many of them only in part (``units``)."""
    pool_keys = [tuple(s) for s in strata_of(pool)]
    sel_keys = [tuple(s) for s in strata_of(selected)] if len(selected) != len(pool) else pool_keys
    out: dict[str, Any] = {"limit": limit, "n_items": len(selected), "n_available": len(pool),
                           "n_left_out": len(pool) - len(selected), "strata": {}}
    if unit:
        out["unit"] = unit
    for level, name in enumerate(names):
        total: dict[str, int] = defaultdict(int)
        for k in pool_keys:
            total[str(k[level])] += 1
        got: dict[str, int] = defaultdict(int)
        for k in sel_keys:
            got[str(k[level])] += 1
        out["strata"][name] = {"covered": dict(got), "n_covered": len(got), "n_total": len(total),
                               "left_out": [v for v in total if v not in got]}
    if len(names) > 1:
        cells = {tuple(map(str, k)) for k in pool_keys}
        got_cells = {tuple(map(str, k)) for k in sel_keys}
        out["cells"] = {"by": " x ".join(names), "n_covered": len(got_cells), "n_total": len(cells)}
    keys = units_of(selected) if units_of is not None else None
    if keys is not None:
        size: dict[Hashable, int] = defaultdict(int)
        for k in units_of(pool) or ():
            size[k] += 1
        got_units: dict[Hashable, int] = defaultdict(int)
        for k in keys:
            got_units[k] += 1
        out["units"] = {"n": len(got_units), "n_partial": sum(n < size.get(k, n) for k, n in got_units.items())}
    return out


def coverage_line(task: str, cov: dict[str, Any], shown: int = 12, terms: dict[str, str] | None = None) -> str:
    """One human line: ``bbq --limit 24: 24 of 81584 items; category: 6 of 11 (Age 4, ...); left out: ...``.
    Strata and their values are named by the task's ``reporting.terms`` where it has a word for them
    (``bias_type`` reads "bias type")."""
    words = terms or {}

    def name(key: Any) -> str:
        return words.get(str(key), str(key).replace("_", " "))

    def value(v: Any) -> str:
        return str(words.get(str(v), v))

    head = f"{task}"
    if cov.get("limit") is not None:  # as typed: a fraction (--limit 0.01) rather than the items it gave
        head += f" --limit {cov.get('limit_fraction', cov['limit'])}"
    parts = [f"{head}: {cov['n_items']} of {cov['n_available']} items"]
    for key, s in cov.get("strata", {}).items():
        got = ", ".join(f"{value(k)} {v}" for k, v in list(s["covered"].items())[:shown])
        if len(s["covered"]) > shown:
            got += ", ..."
        part = f"{name(key)}: {s['n_covered']} of {s['n_total']} covered ({got})"
        if s["left_out"]:
            left = ", ".join(map(value, s["left_out"][:shown])) + (", ..." if len(s["left_out"]) > shown else "")
            part += f"; left out: {left}"
        parts.append(part)
    if "cells" in cov:
        c = cov["cells"]
        by = " x ".join(name(k) for k in c["by"].split(" x "))
        parts.append(f"{by}: {c['n_covered']} of {c['n_total']} combinations covered")
    u = cov.get("units") or {}
    if u.get("n_partial"):
        noun = str(cov.get("unit") or "unit").partition(" (")[0]  # "context unit", without its gloss
        whole = u["n"] - u["n_partial"]
        parts.append(f"{u['n']} {noun}{'s' if u['n'] != 1 else ''}, {u['n_partial']} of them only in part"
                     + (f" ({whole} whole)" if whole else ""))
    return "; ".join(parts)
