"""The sampling check: probe's exact paper-equivalent estimates against the papers' own procedure.

probe computes each paper's sampled estimator exactly, from the label / answer
probabilities under the paper's temperature and top-p. This package runs the
procedure itself on a stratified sample of a task's items and measures the gap;
the task declares everything about its paper (:meth:`probe.tasks.facets.Paper.check`,
a :class:`probe.tasks.paper_check.PaperCheck`: the sample, the decoding settings,
the parser, the counted event, the headline metric), so nothing here names a
benchmark:

1. the task's own requests are scored (the exact estimate, with the paper's
   sampling spec computed in the same pass, as in ``probe run``);
2. ``K`` generations per prompt are sampled by transformers' own
   ``generate`` (:mod:`.judge`), not by probe's sampler, at the paper's sampler
   as its authors ran it (the check's ``sampler`` preset: temperature, top-p,
   top-k set explicitly, repetition penalty), with its own end-of-sequence
   rule and fixed per-prompt seeds; the exact side runs the published run's
   configuration (the task config's parse token budget, node cap and
   residual targets);
3. each generation is parsed by the paper's extraction rule (the task's
   ``PaperCheck.parse``) and also checked against what the exact estimator
   counts (``PaperCheck.counted``);
4. per prompt: the share of generations the parser accepts, the share the
   exact estimator counts (sampled, and its exact expectation), and the
   probability difference |Δ| between the parsed answers' distribution and the
   exact paper-equivalent distribution (total variation: for two options
   ``|p̂(A) - p(A)|``), beside the |Δ| that sampling noise alone gives;
5. in aggregate: the paper's headline metric from the sampled answers, its 95 %
   interval (bootstrap over units - instance, item or context pair - each with
   its own K sampled answers), and whether the exact paper-equivalent value
   lies inside it;
6. the verdict: the ranges the sampled values would fall in if the exact side
   were the truth, drawing each prompt's K answers from it on the same prompts
   (:func:`~probe.studies.sampling_check.ranges.predicted_draws`). The ranges are
   joint (:func:`~probe.studies.sampling_check.ranges.joint_ranges`): all the
   metrics lie inside together in 95 % of draws, so the verdict, which fails
   when any one metric leaves, is one test at the 5 % level, not one per metric
   (eight ranges of 95 % each would fail a right exact side in a third of runs).
   The test's power is stated as the smallest difference it detects (80 %
   power, at each metric's range level). A bootstrap of the sampled answers
   cannot produce an answer the sample missed, so for a rare count its
   interval is too narrow; this range is not. The unit bootstrap stays, for information. A prompt
   whose sampled answers parse where the enumeration found no parse is a
   miss (|Δ| = 1), never left out.

Modules: :mod:`.check` (:func:`run_check`), :mod:`.exact` (the exact side), :mod:`.judge` (the sampled
side), :mod:`.rows` (one prompt's row), :mod:`.aggregate` (the aggregate and summary), :mod:`.ranges`
(the verdict's ranges), :mod:`.report` (:func:`report_markdown`).
The papers' parsers live with their tasks (each task's ``paper_check`` module).
"""

from probe.studies.sampling_check.check import (SamplingCheck, checked_tasks, inside, paper_check_of, run_check,
                                                tv_distance)
from probe.studies.sampling_check.report import generation_kinds, report_markdown
from probe.tasks.paper_check import PromptCase, counted_forms, counted_label

__all__ = ["PromptCase", "SamplingCheck", "checked_tasks", "counted_forms", "counted_label", "generation_kinds",
           "inside", "paper_check_of", "report_markdown", "run_check", "tv_distance"]
