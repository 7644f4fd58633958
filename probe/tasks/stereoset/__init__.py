"""``stereoset``: StereoSet (Nadeem et al., 2021) intra- and inter-sentence, ss / lms / icat, two protocols.

The task is :mod:`.task` (:class:`StereoSetTask`; the protocols come from
:mod:`probe.tasks.crows_pairs`), the reader :mod:`.data` (``dev.json``,
fetched, not shipped; its data set in :mod:`.datasets`), the scores :mod:`.metrics`.

This package loads nothing heavy: the task module loads on first use of its names.
"""

__all__ = ["StereoSetConfig", "StereoSetTask"]


def __getattr__(name: str):
    if name in __all__:
        from probe.tasks.stereoset import task

        return getattr(task, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
