"""``implicitbbq``: ImplicitBBQ (explicit vs implicit, characteristic-cue identity), scored exactly.

The task is :mod:`.task` (:class:`ImplicitBBQTask`; its config in
:mod:`.config`). Beside it, what ImplicitBBQ owns: the builder
(:mod:`.data`: BBQ's templates (and BharatBBQ's, for caste) with Person A/B
and the cue table, :mod:`.implicit_text`; the matched explicit set,
:mod:`.match`), the shipped few-shot sets (:mod:`.fewshot_sets` writes and
checks them, :mod:`.fewshot` resolves them per item), the items each strategy
scores and the summary (:mod:`.selection`, :mod:`.summary`, :mod:`.chains`), the one-word answer parser
(:mod:`.parse`), the paper's tables and report (:mod:`.tables`,
:mod:`.sections`, :mod:`.layout`, :mod:`.figures`), the paper check
(:mod:`.paper_check`), the representations study's labels
(:mod:`.representations`) and ``probe data build implicitbbq`` (:mod:`.cli`).
BBQ's items, templates, prompts and metrics are imported from
:mod:`probe.tasks.bbq`.

This package loads nothing heavy: the task module loads on first use of its names.
"""

from probe.tasks.base import lazy_task_module

__all__ = ["ImplicitBBQConfig", "ImplicitBBQTask", "STRATEGIES", "FORMATS", "CONTEXT_KINDS", "request_id",
           "stratified_sample", "unit_key"]

__getattr__ = lazy_task_module(__name__, __all__)  # the task module loads on first use of its names
