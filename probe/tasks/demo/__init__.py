"""``demo``: the embedded demo set on the ImplicitBBQ zero-shot prompt (``probe demo``; no download).

The task is :mod:`.task` (:class:`DemoTask`), its items :mod:`.data` (the
scenarios in ``resources/demo_scenarios.yaml``, written for probe), its
command :mod:`.cli` (``probe demo``), its ``probe report`` section
:mod:`.layout`. BBQ's metrics and paired units are imported from
:mod:`probe.tasks.bbq`.

This package loads nothing heavy: the task module loads on first use of its names.
"""

__all__ = ["DemoConfig", "DemoTask"]


def __getattr__(name: str):
    if name in __all__:
        from probe.tasks.demo import task

        return getattr(task, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
