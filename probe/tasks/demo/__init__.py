"""``demo``: the embedded demo set on the ImplicitBBQ zero-shot prompt (``probe demo``; no download).

The task is :mod:`.task` (:class:`DemoTask`), its items :mod:`.data` (the
scenarios in ``resources/demo_scenarios.yaml``, written for probe), its
command :mod:`.cli` (``probe demo``), its ``probe report`` section
:mod:`.layout`. BBQ's metrics and paired units are imported from
:mod:`probe.tasks.bbq`.

This package loads nothing heavy: the task module loads on first use of its names.
"""

from probe.tasks.base import lazy_task_module

__all__ = ["DemoConfig", "DemoTask"]

__getattr__ = lazy_task_module(__name__, __all__)  # the task module loads on first use of its names
