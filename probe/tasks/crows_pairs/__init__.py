"""``crows_pairs``: CrowS-Pairs with a causal LM, in two protocols ((a) the HBB paper's two-choice question,
(b) lm-evaluation-harness's whole-sentence log-likelihood).

The task and its two protocols are :mod:`.task` (:class:`CrowsPairsTask`;
StereoSet and HBB's optional CrowS-Pairs column reuse them), the reader
:mod:`.data` (and its data set, :mod:`.datasets`), the scores :mod:`.metrics`,
the ``probe report`` section :mod:`.layout`. Protocol (a)'s prompt, the HBB
paper's two-choice question, is held here (:mod:`.prompts`), and the ``hbb``
and ``stereoset`` tasks import it: CrowS-Pairs imports neither.

This package loads nothing heavy: the task module loads on first use of its names.
"""

from probe.tasks.base import lazy_task_module

__all__ = ["CrowsPairsConfig", "CrowsPairsTask"]

__getattr__ = lazy_task_module(__name__, __all__)  # the task module loads on first use of its names
