"""Which ImplicitBBQ items each prompting strategy scores: stratified, paired, nested samples.

A *unit* is one context with one background (or none): its ambiguous /
disambiguated x negative / non-negative items, so the four explicit (or
implicit) settings are scored on the same contexts (paired). Units are ranked
by a seeded hash, so a smaller sample is a prefix of a larger one and the
strategies are compared on shared items. The selection a run scores is the
union of the strategies' samples in round-robin order over (dimension, context
kind); ``--limit N`` keeps N of its items, spread over
the dimensions first, then the context kinds, whole units once N holds one
unit of every (dimension, context kind) cell; a smaller N takes one item of a
unit per cell, its condition and polarity varying from cell to cell, so that
``--limit 4`` covers four dimensions, both context kinds and all four
condition x polarity variants (:func:`probe.tasks.stratify.spread_limit`).

The explicit units come from the matched explicit set
(:mod:`probe.tasks.implicitbbq.match`), where a filling that its template's
implicit weight needs several times is repeated under ids ``<unit>-m<k>``:
drawn like any unit, the repeats give each template its implicit weight in
the sample too (a filling drawn twice is scored twice; same prompt, same
bootstrap cluster).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

from probe.io import stable_hash

__all__ = ["Selection", "select", "strategy_samples", "stratified_sample", "unit_key"]


def unit_key(item: Any) -> str:
    """The (context, background) an item belongs to: its 4 condition x polarity variants share it."""
    return item.id.rsplit("-", 2)[0]


def stratified_sample(items: Iterable[Any], per_cell: int | None, seed: int,
                      settings: set[str] | None = None) -> list:
    """At least ``per_cell`` items per (dimension, setting), drawn as whole context units.

    Control settings hold both conditions, so they need half as many units.
    Units are ranked by a seeded hash (smaller samples are prefixes of larger
    ones) and returned round-robin over (dimension, kind): any prefix of the
    list stays stratified. ``per_cell`` None takes every unit.
    """

    units: dict[tuple[str, str], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for it in items:
        if settings is None or it.setting in settings:
            units[(it.category, it.context_kind)][unit_key(it)].append(it)
    ranked: dict[tuple[str, str], list[list]] = {}
    for key in sorted(units):
        order = sorted(units[key], key=lambda u: stable_hash(u, seed))
        need = None
        if per_cell is not None:
            need = per_cell if key[1] in ("explicit", "implicit") else -(-per_cell // 2)
        ranked[key] = [sorted(units[key][u], key=lambda it: it.id) for u in order[:need]]
    out = []
    depth = max((len(v) for v in ranked.values()), default=0)
    for i in range(depth):
        for v in ranked.values():
            if i < len(v):
                out.extend(v[i])
    return out


def strategy_samples(config: Any, items: Sequence[Any]) -> dict[str, list]:
    """Each strategy's stratified sample (the controls only for ``control_strategies``)."""
    kinds = set(getattr(config, "context_kinds", None) or ("explicit", "implicit", "neutral", "nochar"))
    all_settings = {it.setting for it in items}
    kept = {s for s in all_settings if s.split("_", 1)[0] in kinds}  # a setting is named "<kind>_..."
    mitigated = {s for s in kept if not s.startswith(("neutral", "nochar"))}
    # a unit's rank depends only on its key and the seed, so leaving kinds out keeps the others' samples
    return {s: stratified_sample(items, config.per_cell[s], config.seed,
                                 (kept if kept != all_settings else None) if s in config.control_strategies
                                 else mitigated)
            for s in config.strategies}


class Selection(list):
    """The items a run scores (in scoring order), with each strategy's sample and the whole pool.

    A plain list of items to the runner; the task's later stages read
    ``samples`` (strategy -> its items, in the same order) and ``pool`` (every
    built item: few-shot demonstrations and the full-grid counts come from it).
    """

    def __init__(self, items: Iterable[Any], samples: Mapping[str, list], pool: Sequence[Any]) -> None:
        super().__init__(items)
        self.samples = dict(samples)
        self.pool = pool


def select(config: Any, pool: Sequence[Any], limit: int | None = None) -> Selection:
    """The union of the strategies' samples (in ``config.strategies`` order), cut to its first ``limit`` items."""
    samples = strategy_samples(config, pool)
    order: list = []
    seen: set[str] = set()
    for strategy in config.strategies:
        for it in samples[strategy]:
            if it.id not in seen:
                seen.add(it.id)
                order.append(it)
    if limit is not None:  # round-robin over dimension, then context kind; whole units once every cell has one
        from probe.tasks.stratify import spread_limit

        order = spread_limit(order, limit, [(it.category, it.context_kind) for it in order],
                             [unit_key(it) for it in order])
        kept = {it.id for it in order}
        samples = {s: [it for it in v if it.id in kept] for s, v in samples.items()}
    return Selection(order, samples, pool)
