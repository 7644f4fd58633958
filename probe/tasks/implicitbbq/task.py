"""``implicitbbq``: ImplicitBBQ, 12 settings x 4 prompting strategies, scored exactly.

Flow: every item of the configured dimensions (:mod:`probe.tasks.implicitbbq.data`)
-> each strategy's stratified sample (``per_cell`` items per dimension x
setting; :mod:`.selection`) -> the strategy's prompt in each answer format
(:mod:`probe.tasks.bbq.prompts`) -> for CoT, ``cot_chains`` reasoning chains sampled
first at the paper's temperature (the runner's generation stage; 0 = one greedy
chain) and the final answer scored after each chain's ``Final Answer:``, the
item's probabilities the mean over its chains (:mod:`.chains`) ->
BBQ accuracy and bias per strategy|format, context kind and dimension, argmax
and expected, with bootstrap CIs (:mod:`probe.tasks.implicitbbq.tables`).

    probe run configs/implicitbbq_quick.yaml
    probe run implicitbbq --model smollm2 --limit 12 --output runs/x

One record per (item, strategy, format), id ``ITEM|STRATEGY|FORMAT``; its
``meta`` holds the item fields, ``kind`` = the strategy (the runner times each
kind; CoT reasoning is ``cot/generate``) and, for CoT, the ``reasoning``.
Sampled CoT has one record per chain, id ``ITEM|cot|FORMAT|chain{k}``
(``meta.chain`` = k); the metrics average them back to one per (item, format).
Outputs beside the runner's: ``tables/table2_{expected,argmax}`` (the paper's
Table 2 layout), ``tables/per_dimension_<strategy>_<format>_<version>``
(Tables 5-7), ``figure3_zero_shot_<format>.png``, ``counts.json`` (builder
counts) and ``projection.json`` (hours to score the full grid at the measured
rates).

>>> from probe.tasks import get
>>> cfg = get("implicitbbq").make_config({"strategies": ["zero_shot"], "per_cell": {"zero_shot": 1}})
>>> cfg.strategies, cfg.answer_formats
(('zero_shot',), ('oneword',))
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from probe.data.paths import dataset_dir
from probe.errors import ProbeError
from probe.metrics.certified import RESIDUAL_POLICY, answer_target
from probe.metrics.mass import answering, mass_summary
from probe.scoring.generate import GenerationRequest
from probe.scoring.parse.exact import ParseRequest
from probe.scoring.parse.schema import TailSpec
from probe.scoring.requests import ContinuationRequest, LabelRequest
from probe.tasks import base
from probe.tasks.base import Aggregate, CheckCase, Task
from probe.tasks.bbq.items import BBQItem
from probe.tasks.bbq.prompts import cot_final_prompt, prepare
from probe.tasks.implicitbbq import summary as results  # `summary` is the dict below
from probe.tasks.chains import chain_id
from probe.tasks.implicitbbq.certify import certified_summary
from probe.tasks.implicitbbq.chains import chain_summary
from probe.tasks.implicitbbq.config import CONTEXT_KINDS, FORMATS, STRATEGIES, ImplicitBBQConfig
from probe.tasks.implicitbbq.data import build_implicitbbq, count_table
from probe.tasks.implicitbbq.fewshot import DemoSets, demo_ids
from probe.tasks.implicitbbq.implicit_text import load_cue_table
from probe.tasks.implicitbbq.parse import PARSER_VERSION, oneword_decided, parse_oneword
from probe.tasks.implicitbbq.selection import Selection, select, stratified_sample, unit_key
from probe.tasks.implicitbbq.reporting import ImplicitBBQReporting
from probe.tasks.implicitbbq.representations import LABELS
from probe.tasks.implicitbbq.tables import KINDS, summarize

__all__ = ["ImplicitBBQConfig", "ImplicitBBQTask", "STRATEGIES", "FORMATS", "CONTEXT_KINDS", "request_id",
           "stratified_sample", "unit_key"]

def request_id(item: Any, strategy: str, answer_format: str) -> str:
    """The id of one (item, strategy, format) request and record."""
    return f"{item.id}|{strategy}|{answer_format}"


class ImplicitBBQSelection(base.Selection):
    """Each strategy's stratified sample; ``limit``: the first N items of their union (see :mod:`.selection`)."""

    names = ("dimension", "context_kind")
    unit_name = "context unit (its condition x polarity variants)"

    def select(self, config: ImplicitBBQConfig, items: Sequence[BBQItem], limit: int | None) -> Selection:
        return select(config, items.pool if isinstance(items, Selection) else items, limit)

    def strata(self, config: ImplicitBBQConfig, items: Sequence[BBQItem]) -> list[tuple]:
        return [(it.category, it.context_kind) for it in items]

    def units(self, config: ImplicitBBQConfig, items: Sequence[BBQItem]) -> list[str]:
        """Each item's context unit (what the coverage line counts; :meth:`select` keeps or spreads them)."""
        return [unit_key(it) for it in items]


class ImplicitBBQPaper(base.Paper):
    """CoT chains sampled first, the paper's answer sampling (T = 0.1) and its parsed one-word answers."""

    def generation_requests(self, config: ImplicitBBQConfig, items: Sequence[BBQItem], tokenizer: Any) -> list:
        """CoT: ``cot_chains`` sampled reasoning chains per (item, format), adjacent (they share the
        prompt), seeded by (``seed``, chain id); with ``cot_chains`` 0 one greedy chain."""

        out = []
        for strategy, it, fmt in self.task._jobs(config, items, only="cot"):
            prep = prepare(it, tokenizer, strategy, fmt, (), config.chat_template)
            meta = {"kind": f"{strategy}/generate", "item_id": it.id}
            rid = request_id(it, strategy, fmt)
            if not config.cot_chains:
                out.append(GenerationRequest(rid, prep.prompt, config.cot_max_new_tokens, meta=meta))
            for k in range(config.cot_chains):
                out.append(GenerationRequest(chain_id(rid, k), prep.prompt, config.cot_max_new_tokens,
                                             meta={**meta, "chain": k}, temperature=float(config.cot_temperature),
                                             top_p=float(config.cot_top_p), seed=config.seed))
        return out

    def generation_note(self, config: ImplicitBBQConfig) -> str:
        return ("chain-of-thought reasoning for the cot strategy (cot_chains sampled chains per item); skip with "
                "--set strategies=[zero_shot,safety,few_shot], or --set cot_chains=0 for one greedy chain")

    def parse_requests(self, config: ImplicitBBQConfig, items: Sequence[BBQItem], tokenizer: Any) -> list:
        """The paper's sampling + parsing, enumerated exactly: each zero-shot / safety / few-shot one-word
        prompt, sampled at the paper's temperature and read by :func:`probe.tasks.implicitbbq.parse.parse_oneword`
        (uncertainty answers normalised to Unknown). Same ids as the scored records."""

        spec = results.paper_spec(config)
        if not config.parse_exact or spec is None or "oneword" not in config.answer_formats:
            return []
        sel = self.task._selection(config, items)
        demos = self.task._demo_sets(config, sel.pool) if "few_shot" in config.strategies else None
        out = []
        for strategy, it, fmt in self.task._jobs(config, sel):
            if fmt != "oneword" or strategy == "cot":
                continue  # CoT chains run to 1,024 tokens: they are sampled, their final answers scored
            choice = demos.select(it, config.n_shots) if strategy == "few_shot" else None
            prep = prepare(it, tokenizer, strategy, fmt, choice.demos if choice else (), config.chat_template)
            options, unknown = tuple(it.options), int(it.unknown_index)
            out.append(ParseRequest(
                id=request_id(it, strategy, fmt), prompt=prep.prompt, max_new_tokens=config.parse_max_new_tokens,
                temperature=float(spec["temperature"]), top_p=float(spec["top_p"]),
                parser_name=f"implicitbbq-{PARSER_VERSION}:" + json.dumps([options, unknown]),
                parser=functools.partial(parse_oneword, options=options, unknown_index=unknown),
                decided=oneword_decided, residual=float(config.parse_residual), max_nodes=config.parse_max_nodes,
                answer_residual=config.parse_answer_residual,
                tail=TailSpec(int(config.parse_k), None, int(config.seed)) if config.parse_tail == "hybrid" else None,
                meta={"kind": f"{strategy}/parse", "item_id": it.id}))
        return out

    def sampling(self, config: ImplicitBBQConfig) -> tuple[dict, ...]:
        """The paper's answer sampling (T = 0.1), scored beside the exact scores."""
        spec = results.paper_spec(config)
        return (spec,) if spec else ()


class ImplicitBBQAnalyses(base.Analyses):
    """Unit: template x context (as the CIs); pairs explicit <-> implicit and the two orders; the labels of
    the representations study."""

    def units(self, config: ImplicitBBQConfig, records: Any, items: Sequence[BBQItem]) -> list[str]:
        units = {it.id: results.cluster_of(it) for it in self.task._selection(config, items).pool}
        return [units.get(i, i) for i in records["item_id"]]

    def patch_pairs(self, config: ImplicitBBQConfig, records: Any, items: Sequence[BBQItem]) -> list[tuple[str, str, str]]:
        """The pairs the representations study patches (:mod:`probe.studies.representations`),
        within a strategy and format: ``explicit->implicit`` / ``implicit->explicit``, an implicit record and
        the explicit record of its template row, groups, condition and polarity; ``A<->B``, the cue variants
        of one implicit context (Person A's and B's groups exchanged). A small stratified sample may hold none."""
        pool = {it.id: it for it in self.task._selection(config, items).pool}

        def key(it: Any) -> tuple:
            m = it.metadata
            return (it.template_id, m.get("row"), m.get("group1"), m.get("group2"), it.context_condition,
                    it.question_polarity)

        explicit: dict[tuple, str] = {}
        contexts: dict[tuple, list[str]] = {}
        rows = list(zip(records["id"], records["item_id"], records["strategy"], records["answer_format"]))
        for rid, iid, strategy, fmt in rows:
            it = pool.get(iid)
            if it is not None and it.context_kind == "explicit":
                explicit.setdefault((key(it), strategy, fmt), rid)
            elif it is not None and it.context_kind == "implicit":
                ctx = (it.metadata.get("context_id"), it.context_condition, it.question_polarity, strategy, fmt)
                contexts.setdefault(ctx, []).append(rid)
        out = []
        for rid, iid, strategy, fmt in rows:
            it = pool.get(iid)
            src = explicit.get((key(it), strategy, fmt)) if it is not None and it.context_kind == "implicit" else None
            if src is not None:
                out += [(src, rid, "explicit->implicit"), (rid, src, "implicit->explicit")]
        for ids in contexts.values():
            out += [(a, b, "A<->B") for a in ids for b in ids if a != b]
        return out

    def representation_labels(self) -> Any:
        """The representations study's labels of ImplicitBBQ items (:mod:`probe.tasks.implicitbbq.representations`)."""

        return LABELS


class ImplicitBBQTask(Task[ImplicitBBQConfig, BBQItem]):
    name = "implicitbbq"
    description = "ImplicitBBQ: explicit vs implicit identity, 12 settings x zero-shot/safety/few-shot/CoT"
    Config = ImplicitBBQConfig
    selection = ImplicitBBQSelection()
    paper = ImplicitBBQPaper()
    reporting = ImplicitBBQReporting()
    analyses = ImplicitBBQAnalyses()

    def check_case(self) -> CheckCase:
        """A quick run for :func:`probe.testing.check_task`: 2 item(s) of a small config."""
        return CheckCase({"dimensions": ["age"], "strategies": ["zero_shot"], "per_cell": {"zero_shot": 1}, "n_boot": 10}, 2)

    def items(self, config: ImplicitBBQConfig) -> list[BBQItem]:
        return build_implicitbbq(config.dimensions, config.bbq_dir, config.bharatbbq_dir, lexical=config.lexical,
                                 explicit_set=config.explicit_set, seed=config.seed,
                                 exclusion_unit=config.exclusion_unit)

    def requests(self, config: ImplicitBBQConfig, items: Sequence[BBQItem], tokenizer: Any,
                 generations: Mapping[str, str] | None = None) -> list:

        sel = self._selection(config, items)
        demos = self._demo_sets(config, sel.pool) if "few_shot" in config.strategies else None
        out = []
        for strategy, it, fmt in self._jobs(config, sel):
            rid = request_id(it, strategy, fmt)
            choice = demos.select(it, config.n_shots) if strategy == "few_shot" else None
            prep = prepare(it, tokenizer, strategy, fmt, choice.demos if choice else (), config.chat_template)
            meta = _meta(it, strategy, fmt, prep.owner)
            if choice is not None:  # which shipped demonstrations, and which slots fell back to their alternate
                meta.update(choice.note())
            # a context unit's 4 variants (both formats) go in one chunk: they share its system prompt and context
            group = f"{strategy}|{unit_key(it)}"
            cls, key = (LabelRequest, "labels") if fmt == "labels" else (ContinuationRequest, "options")
            if strategy != "cot":
                out.append(cls(id=rid, prompt=prep.prompt, group=group, space=prep.space, meta=meta,
                               **{key: prep.texts}))
                continue
            # one scoring request per reasoning chain: its final answer, scored after the chain
            chains = [(rid, None)] if not config.cot_chains else [(chain_id(rid, k), k)
                                                                   for k in range(config.cot_chains)]
            for cid, k in chains:
                if generations is None or cid not in generations:
                    raise ProbeError(f"implicitbbq: no CoT reasoning was generated for {cid!r}")
                final = cot_final_prompt(prep, generations[cid], tokenizer)
                # whether the chain reached an answer cue is read back from the reasoning (results.metric_records)
                extra = {"reasoning": generations[cid], "owner": list(final.owner),
                         **({} if k is None else {"chain": k})}
                out.append(cls(id=cid, prompt=final.prompt, group=group, space=final.space, meta={**meta, **extra},
                               **{key: final.texts}))
        return out

    def aggregate(self, config: ImplicitBBQConfig, records: Any, items: Sequence[BBQItem]) -> Aggregate:
        sel = self._selection(config, items)
        recs, skipped = results.metric_records(records, require_cue=config.cot_require_cue)
        results.add_clusters(recs, sel.pool)
        by_strategy = summarize(recs, n_boot=config.n_boot, seed=config.seed, cluster_key="cluster")
        spec = results.paper_spec(config)
        paper = _paper_equivalent(config, records, spec, sel.pool) if spec else {}
        parsed: dict[str, Any] = {}
        if spec and "parsed" in records.columns and records["parsed"].notna().any():
            parsed = _paper_parsed(config, records, spec, sel.pool)
        keys = sorted({f"{r['strategy']}|{r['answer_format']}" for r in recs})
        mass = {k: mass_summary([r["mass"] for r in recs if f"{r['strategy']}|{r['answer_format']}" == k],
                                config.mass_floor) for k in keys}
        # the same metrics without the items whose answers carry less than the floor
        answering_only = summarize([r for r in recs if answering(r["mass"], config.mass_floor)],
                                   n_boot=config.n_boot, seed=config.seed, cluster_key="cluster")
        summary = {
            "by_strategy": by_strategy,
            "mass": mass,
            "answering_only": answering_only,
            "ci": {"method": "percentile cluster bootstrap, 95% (whole clusters resampled; the macro mean "
                             "resamples within each dimension)", "n_boot": config.n_boot, "unit": results.CI_UNIT},
            "option_mass": results.option_mass_summary(recs),
            "few_shot_demos": results.demo_summary(records),
            "paper_equivalent": paper,
            "paper_parsed": parsed,
            "cot": self._cot_summary(config, records),
            "n_nonfinite": skipped,
            "sample": {s: len(v) for s, v in sel.samples.items()},
            "full_grid_items": results.full_grid_items(sel.pool, config.strategies, config.control_strategies),
            "counts": count_table(sel.pool),
        }
        model = str(records["model"].iloc[0]) if len(records) else "model"
        return Aggregate(summary, _tables(summary, model, spec))

    def data_files(self, config: ImplicitBBQConfig) -> list[Path]:
        files = []
        sources = load_cue_table().sources
        for dim in config.dimensions:
            kind, category = sources[dim].split(":")
            if kind == "bharatbbq":
                files.append(Path(config.bharatbbq_dir or dataset_dir("bharatbbq")) / "Caste_templates.csv")
            else:
                tdir = Path(config.bbq_dir or dataset_dir("bbq")) / "templates"
                files += [tdir / f"{category}.csv", tdir / "vocabulary.csv", tdir / "vocabulary_proper_names.csv"]
        return [f for f in dict.fromkeys(files) if f.is_file()]

    # -- helpers --------------------------------------------------------------
    def _cot_summary(self, config: ImplicitBBQConfig, records: Any) -> dict[str, Any]:
        """The CoT chains' settings, counts (n_chains, n_chains_no_cue, ...) and spread (:mod:`.chains`)."""
        if "cot" not in config.strategies:
            return {}
        per_chain, _ = results.metric_records(records, per_chain=True)  # non-finite ones: summary n_nonfinite
        cot = [r for r in per_chain if r["strategy"] == "cot"]
        settings = {"chains": config.cot_chains, "decoding": "sampled" if config.cot_chains else "greedy",
                    "max_new_tokens": config.cot_max_new_tokens, "seed": config.seed,
                    **({"temperature": config.cot_temperature, "top_p": config.cot_top_p} if config.cot_chains
                       else {}),
                    "estimator": "mean over an item's valid chains of the exactly scored final-answer "
                                 "probabilities (Rao-Blackwellised)"}
        stats = chain_summary(cot, require_cue=config.cot_require_cue)
        totals = {t: sum(v[t] for v in stats.values()) for t in ("n_chains", "n_chains_no_cue", "n_items",
                                                                      "n_items_no_valid_chain")}
        return {"settings": settings, **totals, "require_cue": config.cot_require_cue, "by_strategy": stats}

    def _demo_sets(self, config: ImplicitBBQConfig, pool: Sequence[Any]) -> Any:
        """The shipped few-shot demonstrations (:mod:`probe.tasks.implicitbbq.fewshot`), resolved on the pool; the
        explicit ones that the matched explicit set left out are taken from the full build (same ids)."""

        dims = sorted({it.category for it in pool})
        missing = demo_ids(dims) - {it.id for it in pool}
        if missing:

            full = build_implicitbbq(dims, config.bbq_dir, config.bharatbbq_dir, lexical=config.lexical,
                                     controls=False, explicit_set="full")
            pool = list(pool) + [it for it in full if it.id in missing]
        return DemoSets(pool, dims)

    def _selection(self, config: ImplicitBBQConfig, items: Sequence[BBQItem]) -> Selection:
        """``items`` as a :class:`Selection` (a plain item list is taken as the pool and sampled)."""
        return items if isinstance(items, Selection) else select(config, items)

    def _jobs(self, config: ImplicitBBQConfig, items: Sequence[BBQItem], only: str | None = None) -> list[tuple]:
        """(strategy, item, format) in scoring order: strategy by strategy (the runner times each chunk,
        so a chunk of one strategy times that strategy), each in its sample's stratified unit order (a
        run stopped anywhere holds a stratified prefix), an item's formats together (their prompts
        share everything up to the question)."""
        sel = self._selection(config, items)
        return [(strategy, it, fmt) for strategy in config.strategies if only in (None, strategy)
                for it in sel.samples[strategy] for fmt in config.answer_formats]


def _meta(item: Any, strategy: str, answer_format: str, owner: Sequence[int]) -> dict:
    """The item fields a record carries (``answers``: the item's options; ``owner``: option of each scored text)."""
    return {
        "kind": strategy, "item_id": item.id, "strategy": strategy,
        "answer_format": answer_format, "dimension": item.category, "category": item.category,
        "setting": item.setting, "context_kind": item.context_kind, "context_condition": item.context_condition,
        "question_polarity": item.question_polarity, "label": item.label, "target_index": item.target_index,
        "unknown_index": item.unknown_index, "template_id": item.template_id, "owner": list(owner),
        "answers": list(item.options), "cue1": item.metadata.get("cue1"), "cue2": item.metadata.get("cue2"),
        "target_group": item.metadata.get("target_group"),
    }


def _paper_equivalent(config: ImplicitBBQConfig, records: Any, spec: Mapping[str, Any], pool: Sequence[Any]) -> dict:
    """The metrics as expected counts under the paper's answer sampling (``spec``), from the records' specs."""

    paper_recs, paper_skipped = results.metric_records(records, sampling=spec, require_cue=config.cot_require_cue)
    results.add_clusters(paper_recs, pool)
    return {"settings": {**spec, "estimator": "expected counts under the paper's sampling, conditional on "
                                              "the sample being one of the scored answers"},
            "by_strategy": summarize(paper_recs, n_boot=config.n_boot, seed=config.seed, cluster_key="cluster"),
            "n_nonfinite": paper_skipped}


def _paper_parsed(config: ImplicitBBQConfig, records: Any, spec: Mapping[str, Any], pool: Sequence[Any]) -> dict:
    """The metrics over the paper's sampling + parsing, enumerated (the records' ``parsed``), with the
    certified intervals."""

    parsed_recs, cert_recs, parse_stats = results.parsed_metric_records(
        records, answer_target(config.parse_answer_residual))
    results.add_clusters(parsed_recs, pool)
    by_strategy = summarize(parsed_recs, n_boot=config.n_boot, seed=config.seed, cluster_key="cluster")
    hybrid = config.parse_tail == "hybrid"
    if hybrid:  # the tail's own uncertainty beside the items' (where any prompt drew a tail)
        results.with_tail_uncertainty(by_strategy, parsed_recs, config.seed)
    return {"settings": {**spec, "max_new_tokens": config.parse_max_new_tokens,
                         "parser": "one-word answer, uncertainty normalised to Unknown (probe.tasks.implicitbbq.parse)",
                         "estimator": ("hybrid: exact head + each prompt's own tail draws (ceil(K x residual), "
                                       f"K = {config.parse_k}); " if hybrid else "renormalising rule (no tail "
                                       "draws): ") + "expected counts over the parsed answers (unparsed "
                                      "generations excluded; a prompt with nothing parsed left out and counted)",
                         "residual_policy": RESIDUAL_POLICY},
            **parse_stats,
            "by_strategy": by_strategy,
            "certified": certified_summary(cert_recs, KINDS)}


def _tables(summary: Mapping[str, Any], model: str, spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """The run's tables: the paper's sampled and parsed layouts first (when scored), then the exact ones,
    option mass and CoT chains."""
    tables = results.tables(summary["by_strategy"], model)
    paper, parsed = summary["paper_equivalent"], summary["paper_parsed"]
    if paper:
        tables = {**results.paper_tables(paper["by_strategy"], model, spec), **tables}
    if parsed:
        tables = {**results.parsed_tables(parsed["by_strategy"], model, spec, parsed["certified"]), **tables}
    if summary["option_mass"]:
        tables["option_mass"] = results.option_mass_table(summary["option_mass"])
    if summary["cot"].get("by_strategy"):
        tables["cot_chains"] = results.chains_table(summary["cot"])
    return tables
