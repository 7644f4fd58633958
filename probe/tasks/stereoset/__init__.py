"""``stereoset``: StereoSet (Nadeem et al., 2021) intra- and inter-sentence, ss / lms / icat, two protocols.

The task is :mod:`.task` (:class:`StereoSetTask`; the protocols come from
:mod:`probe.tasks.crows_pairs`), the reader :mod:`.data` (``dev.json``,
fetched, not shipped; its data set in :mod:`.datasets`), the scores :mod:`.metrics`.

This package loads nothing heavy: the task module loads on first use of its names.
"""

from probe.tasks.base import lazy_task_module

__all__ = ["StereoSetConfig", "StereoSetTask"]

__getattr__ = lazy_task_module(__name__, __all__)  # the task module loads on first use of its names
