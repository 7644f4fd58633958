"""``bbq``: the BBQ benchmark (Parrish et al., 2022) and the BBQ-family pieces other tasks share.

The task itself is :mod:`.task` (:class:`BBQTask`, :class:`BBQConfig`). The
rest of the folder is what BBQ owns and ImplicitBBQ and the demo import from
here: the item schema (:mod:`.items`), the JSONL reader (:mod:`.data`), the
template expander (:mod:`.templates`, :mod:`.template_rows`,
:mod:`.intersectional`) and BharatBBQ's caste templates in the same format
(:mod:`.bharatbbq`), the prompts and answer forms (:mod:`.prompts`,
:mod:`.answer_forms`), the metrics (:mod:`.metrics`), records as answer records
(:mod:`.records`), the run's report (:mod:`.reporting`), its section of ``probe
report`` (:mod:`.layout`, :mod:`.sections`, and its paired units,
:mod:`.paired_units`); BBQ items as ``probe activations`` input (:mod:`.capture`), its commands (:mod:`.cli`: ``probe data
build bbq``, ``probe metrics bbq``) and its data sets (:mod:`.datasets`: BBQ,
BharatBBQ).

This package loads nothing heavy: the task module loads on first use of its names.
"""

from probe.tasks.base import lazy_task_module

__all__ = ["BBQConfig", "BBQTask"]

__getattr__ = lazy_task_module(__name__, __all__)  # the task module loads on first use of its names
