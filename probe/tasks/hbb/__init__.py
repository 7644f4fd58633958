"""``hbb``: the Hidden Bias Benchmark: MCQ by exact label probabilities, HBB-SG by perplexity.

Flow: concept pairs x descriptors -> test instances (:mod:`probe.tasks.hbb.data`;
``sample_concepts`` / ``per_cell`` / ``categories`` select them, ``--limit N``
keeps the first N) -> HBB-SG's sentence variations (``sg_n`` per option: the
authors' released set when fetched, else one greedy generation per concept pair
and option with the authors' prompt, the runner's generate step, ``sg_generate``;
or a ``variations_file``; :mod:`probe.tasks.hbb.variations`) -> one label request per distinct question
and option order (``mcq``: a)=s1, ``mcq_swap``: a)=s2), one perplexity request
per HBB-SG option sentence variation (``sg``), and with ``crows_pairs: true`` two
per CrowS-Pairs pair (``crows``, for Table 1's CS column) -> per-question P(s1)
joined into per-instance P1(A), P2(A), S and direction for each variant (a)=s1,
swap-avg, HBB-SG) -> threshold metrics (S >= threshold up to 1e-9) with
concept-clustered CIs -> the paper's tables.

One forward pass per distinct question (and per option order) replaces the
paper's ten sampled generations per question.

Outputs besides the runner's (``records.jsonl``, ``generations.jsonl``,
``summary.json``, ``timing.json``, ``provenance.json``): ``instances.jsonl``
(per test instance), ``sg_variations.jsonl`` (the variations scored, in the
``variations_file`` format), ``tables/`` (Tables 1, 2, 8, 9 layouts, extra thresholds, the exact count
beside the paper's estimator at T = 0.8 (MCQ a)=s1 only), direction, Tables 3 and 7: top associations,
CrowS-Pairs; ``.md`` and ``.csv``),
``report.md``, ``hbb_hist.png`` (Figure 4 layout), ``figures/`` (Figures 3, 4, 8, 9 as
``.png``, ``.svg`` and the ``.csv`` of the numbers drawn) and
``timing_projection.json`` (seconds per request kind, projected to the full
103,649 instances). See ``docs/hbb.md``.

The folder: the task (:mod:`.task`, :mod:`.records`, :mod:`.summary`,
:mod:`.parsed`, :mod:`.variations`), the data (:mod:`.data`,
:mod:`.variation_data`, :mod:`.datasets`; the instances a run scores,
:mod:`.selection`), prompts and parser (:mod:`.prompts`, :mod:`.parse`), metrics
(:mod:`.metrics`, :mod:`.sampling`: the 10-sample estimator), tables and figures
(:mod:`.tables`, :mod:`.table1`, :mod:`.figures`, :mod:`.bbq_match`), the
``probe report`` section (:mod:`.sections`, :mod:`.layout`), the paper check
(:mod:`.paper_check`) and ``probe data build hbb`` / ``probe metrics hbb``
(:mod:`.cli`). CrowS-Pairs' protocols come from :mod:`probe.tasks.crows_pairs`.

>>> from probe.tasks import get
>>> cfg = get("hbb").make_config({"per_cell": 2, "categories": ["ses"]})
>>> cfg.categories, cfg.threshold, cfg.extra_thresholds, cfg.sg_n
(('ses',), 20.0, (5.0, 10.0), 10)
"""

from probe.tasks.base import lazy_task_module

__all__ = ["HBBConfig", "HBBTask", "sg_concept_ids"]

__getattr__ = lazy_task_module(__name__, __all__)  # the task module loads on first use of its names
