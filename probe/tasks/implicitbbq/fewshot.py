"""The shipped ImplicitBBQ few-shot demonstration sets (``probe/tasks/implicitbbq/resources/implicitbbq_demos.yaml``).

Five demonstrations per dimension x context kind (explicit, implicit), never
a control, fixed and hand-audited (how they were drawn and their answer mix:
:mod:`probe.tasks.implicitbbq.fewshot_sets`, ``docs/implicitbbq.md``). A neutral or
no-characteristics item gets none (the paper applies no mitigation to controls).

For a test item, slot k shows its primary demonstration unless that shares the
item's template; then its alternate (same answer role, another template) is
shown, and if that shares it too (never in the shipped file) the slot is
skipped. :meth:`DemoSets.select` says which happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping, Sequence

import yaml

from probe.errors import InputError

__all__ = ["DEMO_FILE", "DemoChoice", "DemoSets", "demo_ids", "load_demo_sets"]

DEMO_FILE = "resources/implicitbbq_demos.yaml"
_KINDS = ("explicit", "implicit")


def _path() -> str:
    return str(resources.files("probe.tasks.implicitbbq").joinpath(DEMO_FILE))


@lru_cache(maxsize=1)
def load_demo_sets() -> dict[str, Any]:
    """The shipped sets: ``{"seed", "balance", "sets": {dimension: {kind: [slot, ...]}}}``."""
    text = resources.files("probe.tasks.implicitbbq").joinpath(DEMO_FILE).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    for dim, kinds in data["sets"].items():
        for kind, slots in kinds.items():
            for k, s in enumerate(slots):
                for key in ("id", "template", "alternate"):
                    if key not in s:
                        raise InputError(_path(), None, f"sets.{dim}.{kind}[{k}].{key}", "missing")
    return data


def demo_ids(dimensions: Sequence[str], sets: Mapping[str, Any] | None = None) -> set[str]:
    """Every item id (primaries and alternates) the sets of ``dimensions`` use."""
    sets = sets if sets is not None else load_demo_sets()["sets"]
    return {d["id"] for dim in dimensions for slots in sets.get(dim, {}).values()
            for s in slots for d in (s, s["alternate"])}


@dataclass(frozen=True)
class DemoChoice:
    """The demonstrations of one test item and how they were chosen."""

    demos: tuple[Any, ...]
    ids: tuple[str, ...]
    fallback: tuple[int, ...] = ()  # slots (1-based) whose alternate replaced a same-template primary
    skipped: tuple[int, ...] = ()  # slots left out: primary and alternate share the item's template

    def note(self) -> dict[str, Any]:
        """Record fields: ``demo_ids``, ``demo_fallback``, ``demo_skipped``."""
        return {"demo_ids": list(self.ids), "demo_fallback": list(self.fallback), "demo_skipped": list(self.skipped)}


class DemoSets:
    """The shipped sets resolved against built items (a pool that holds every demonstration id)."""

    def __init__(self, pool: Sequence[Any], dimensions: Sequence[str] | None = None,
                 sets: Mapping[str, Any] | None = None) -> None:
        self.sets = dict(sets if sets is not None else load_demo_sets()["sets"])
        by_id = {it.id: it for it in pool}
        dims = list(dimensions) if dimensions is not None else sorted({it.category for it in pool})
        self._items: dict[str, Any] = {}
        for dim in dims:
            for kind in _KINDS:
                slots = self.sets.get(dim, {}).get(kind)
                if not slots:
                    raise InputError(_path(), None, f"sets.{dim}.{kind}", "no demonstration set")
                for k, s in enumerate(slots):
                    for d in (s, s["alternate"]):
                        if d["id"] not in by_id:
                            raise InputError(_path(), None, f"sets.{dim}.{kind}[{k}].id",
                                             f"{d['id']!r} is not a built ImplicitBBQ item (the builder changed? "
                                             "re-make the sets with python -m probe.tasks.implicitbbq.fewshot_sets and "
                                             "audit them)")
                        self._items[d["id"]] = by_id[d["id"]]

    def select(self, item: Any, k: int = 5) -> DemoChoice:
        """The first ``k`` slots of the item's set, none from the item's template."""
        kind = item.context_kind
        if kind not in _KINDS:  # controls get no demonstrations
            return DemoChoice((), ())
        demos, fallback, skipped = [], [], []
        for s in self.sets[item.category][kind][:k]:
            slot = int(s.get("slot", len(demos) + len(skipped) + 1))
            if s["template"] != item.template_id:
                demos.append(self._items[s["id"]])
            elif s["alternate"]["template"] != item.template_id:
                demos.append(self._items[s["alternate"]["id"]])
                fallback.append(slot)
            else:
                skipped.append(slot)
        return DemoChoice(tuple(demos), tuple(d.id for d in demos), tuple(fallback), tuple(skipped))
