"""``cmp_iso``: "To Compare or Not to Compare": isolated (iso) vs comparative (cmp) prompts, the Parity Gap.

The task is :mod:`.task` (:class:`CmpIsoTask`; its config and item in
:mod:`.config`). Beside it, what the paper owns: the released prompt files
(:mod:`.data`) and other benchmarks converted to them (:mod:`.sources`,
:mod:`.convert`: BBQ, CrowS-Pairs and StereoSet read through their tasks'
readers), the authors' prompt builder and boxed-answer parser
(:mod:`.prompts`, :mod:`.parse`, ``resources/cmp_iso_variations.yaml``),
CoT chains (:mod:`.chains`), the metrics (:mod:`.metrics`, :mod:`.claims`,
:mod:`.model_metrics`, :mod:`.sampling`, :mod:`.parsed`), tables and the
report (:mod:`.summary`, :mod:`.tables`, :mod:`.model_tables`,
:mod:`.extra_tables`, :mod:`.sections`, :mod:`.layout`), the paper check
(:mod:`.paper_check`), the command-line extras (:mod:`.cli`) and the data set
``probe data fetch`` gets (:mod:`.datasets`).

This package loads nothing heavy: the task module loads on first use of its names.
"""

from probe.tasks.base import lazy_task_module

__all__ = ["CmpIsoConfig", "CmpIsoTask", "SampledPair", "SettingSpec", "request_id"]

__getattr__ = lazy_task_module(__name__, __all__)  # the task module loads on first use of its names
