"""The task hooks' names from before the facets, kept so that code and plugins written with them still run.

A task's optional hooks live on its facets (:mod:`probe.tasks.facets`): ``task.reporting.results(...)``, not
``task.results(...)``. Two things keep the flat names working:

- reading one from a task (``task.results``, ``task.strata_names``) reads its facet's hook
  (:class:`OldNames`, a base of :class:`~probe.tasks.base.Task`);
- a task class that still defines one (``def sampling(self, config)``, ``strata_names = (...)``) gets a
  facet whose hook is that definition (:func:`adapt`, run for every subclass).

New code uses the facets; this module goes once no caller needs the old names.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["OLD_NAMES", "OldNames", "adapt"]

#: old name -> (facet, the hook's name on it)
OLD_NAMES: dict[str, tuple[str, str]] = {
    "strata_names": ("selection", "names"), "unit_name": ("selection", "unit_name"),
    "strata": ("selection", "strata"), "units": ("selection", "units"), "limit_seed": ("selection", "seed"),
    "select": ("selection", "select"), "coverage": ("selection", "coverage"),
    "generation_requests": ("paper", "generation_requests"), "generation_note": ("paper", "generation_note"),
    "sampling": ("paper", "sampling"), "parse_requests": ("paper", "parse_requests"),
    "paper_check": ("paper", "check"),
    "metric_notes": ("reporting", "metric_notes"), "terms": ("reporting", "terms"),
    "bias_metrics": ("reporting", "headline_metrics"), "results": ("reporting", "results"),
    "report_warnings": ("reporting", "warnings"), "report_layout": ("reporting", "layout"),
    "report": ("reporting", "write"),
    "analysis_units": ("analyses", "units"), "patch_pairs": ("analyses", "patch_pairs"),
    "representation_labels": ("analyses", "representation_labels"), "capture_item": ("analyses", "capture_item"),
}
#: the old names that are values, not methods
OLD_VALUES = frozenset({"strata_names", "unit_name", "metric_notes", "terms"})


class OldNames:
    """Each old name, read from a task, is its facet's hook (methods) or value (names, notes, terms)."""


def _forward(facet: str, hook: str) -> Callable[..., Any]:
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = getattr(self, facet)
        if hook in vars(bound).get("_inside", ()):  # super().hook() inside a hook defined the old way
            return getattr(super(type(bound), bound), hook)(*args, **kwargs)
        return getattr(bound, hook)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = hook
    forward.__doc__ = f"``{facet}.{hook}`` (the name before the facets)"
    forward.old_name = True  # type: ignore[attr-defined]
    return forward


for _old, (_facet, _hook) in OLD_NAMES.items():
    setattr(OldNames, _old, property(lambda self, f=_facet, h=_hook: getattr(getattr(self, f), h))
            if _old in OLD_VALUES else _forward(_facet, _hook))


def adapt(cls: type) -> None:
    """Give ``cls`` facets that run the hooks it defines under their old names (none: nothing changes)."""
    by_facet: dict[str, dict[str, Any]] = {}
    for old, (facet, hook) in OLD_NAMES.items():
        own = vars(cls).get(old)
        if own is None or getattr(own, "old_name", False):
            continue
        by_facet.setdefault(facet, {})[hook] = own if old in OLD_VALUES else _run_old(hook, own)
    for facet, hooks in by_facet.items():
        base = type(getattr(cls, facet))
        made = type(f"{cls.__name__}{base.__name__}", (base,), {"__module__": cls.__module__, **hooks})()
        made.__set_name__(cls, facet)
        setattr(cls, facet, made)


def _run_old(hook: str, fn: Any) -> Callable[..., Any]:
    """A facet hook that calls ``fn``, the task's own method of the old name, on the facet's task."""
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        inside = vars(self).setdefault("_inside", set())
        inside.add(hook)
        try:
            return fn.__get__(self.task, type(self.task))(*args, **kwargs)
        finally:
            inside.discard(hook)

    run.__name__ = run.__qualname__ = hook
    return run
