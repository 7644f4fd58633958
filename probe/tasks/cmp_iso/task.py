"""``cmp_iso``: isolated vs comparative prompts ("To Compare, or Not to Compare") with exact probabilities.

Flow: each benchmark's released context pairs (:mod:`probe.tasks.cmp_iso.data`) ->
a seeded random sample of ``max_pairs`` per benchmark -> the four prompts of a
pair (iso about t and t', cmp in both option orders) under every setting
(direct / CoT, neutral option, "answer randomly", the 54 variations;
:mod:`probe.tasks.cmp_iso.prompts`) -> for CoT, ``cot_chains`` reasoning chains per
prompt sampled first at the authors' T = 0.7, top-p = 0.9 (the runner's
generation stage; 0 = one greedy chain), then the label scored where the
authors' parser finds each chain's last boxed answer, the prompt's counts the
mean over its valid chains (none: the prompt is kept with no valid answer)
(:mod:`.chains`) ->
next-token label probabilities (direct: the authors' probability mode, each
label summed over its one-token surface forms) -> Parity Gap per setting x
benchmark x mode (expected counts, argmax, and ``paper``: expected counts
under the authors' sampling, T = 0.7 and top-p = 0.9) with bootstrap CIs and the cmp-vs-iso randomization
test, comparisons between settings, the spread over variants
(:mod:`.summary`) -> the paper's Tables 2-7 layouts and the PG plot
(:mod:`probe.tasks.cmp_iso.tables`).

    probe run configs/cmp_iso_quick.yaml
    probe run cmp_iso --model smollm2 --limit 4 --output runs/x

An item is one sampled context pair; ``--limit N`` keeps the first N pairs, whole
(their four prompts in every setting). Items alternate between benchmarks, each
benchmark's pairs in a seeded shuffled order, so any prefix is a random sample
of every benchmark. Requests run in rounds of ``round_size`` pairs per
benchmark over all settings (an interrupted run covers every setting on a
smaller sample); one record per (setting, benchmark, pair, prompt), its ``meta``
holding ``kind`` (``iso``, ``cmp``, ``cot``), the setting fields and the pair
fields (sampled CoT: one record per chain, id ``...|chain{k}``, ``meta.chain`` =
k). Results of several models are combined by
:func:`probe.tasks.cmp_iso.model_tables.combine_runs`.

>>> from probe.tasks import get
>>> cfg = get("cmp_iso").make_config({"settings": [{"reasoning": "direct", "variants": "all"}]})
>>> len(cfg.expanded_settings()), cfg.expanded_settings()[5].name
(54, 'direct+v5')
"""

from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import Any, Mapping, Sequence

from probe.data.paths import dataset_dir
from probe.errors import ProbeError
from probe.metrics.certified import uncertified_warning
from probe.prompts.chat import render_prompt
from probe.scoring.generate import GenerationRequest
from probe.scoring.parse.exact import ParseRequest
from probe.scoring.requests import LabelRequest
from probe.tasks.cmp_iso.prompts import CmpIsoSetting, build_prompt, cot_answer_prompt, prompt_elements, render_built
from probe.tasks.cmp_iso.parse import authors_label  # noqa: F401 - re-exported: the task's parser
from probe.tasks.base import Aggregate, CheckCase, Paper, Reporting, Selection, Task, result_row, write_tables
from probe.tasks.cmp_iso.chains import chain_id
from probe.tasks.cmp_iso.config import CmpIsoConfig, SampledPair, SettingSpec
from probe.tasks.cmp_iso.data import benchmark_file, load_benchmark, sample_pairs
from probe.tasks.cmp_iso.extra_tables import answering_table, chains_table
from probe.tasks.cmp_iso.model_tables import combine_summaries
from probe.tasks.cmp_iso.parsed import head_budget
from probe.tasks.cmp_iso.summary import paper_spec, run_summary
from probe.tasks.cmp_iso.tables import build_tables, table_modes, write_report
from probe.tasks.cmp_iso.terms import TERMS

__all__ = ["CmpIsoConfig", "CmpIsoTask", "SampledPair", "SettingSpec", "request_id"]


def request_id(setting: CmpIsoSetting, benchmark: str, context_pair_id: Any, task_type: str, slot: str) -> str:
    """The id of one (setting, benchmark, pair, prompt) request, record and generation."""
    return f"{setting.name}|{benchmark}|{context_pair_id}|{task_type}|{slot}"


class CmpIsoSelection(Selection):
    """``--limit N``: the first N context pairs (items alternate between benchmarks), whole."""

    names = ("benchmark",)
    unit_name = "context pair (iso t, t' and both cmp orders)"


class CmpIsoPaper(Paper):
    """The authors' CoT chains, their sampling (T = 0.7, top-p = 0.9) and their parsed answers, enumerated."""

    def generation_requests(self, config: CmpIsoConfig, items: Sequence[SampledPair], tokenizer: Any) -> list:
        """CoT settings: ``cot_chains`` reasoning chains per prompt, sampled at ``cot_temperature`` /
        ``cot_top_p`` from streams seeded by (``seed``, chain id), adjacent (they share the prompt);
        with ``cot_chains`` 0 one greedy chain."""

        out = []
        for rid, text, labels, group, meta in _prompts(config, items, tokenizer, "cot"):
            meta = {**meta, "kind": "cot_generate"}
            if not config.cot_chains:
                out.append(GenerationRequest(rid, text, config.max_new_tokens, group=group, meta=meta))
            out += [GenerationRequest(chain_id(rid, k), text, config.max_new_tokens, group=group,
                                      meta={**meta, "chain": k}, temperature=float(config.cot_temperature),
                                      top_p=float(config.cot_top_p), seed=config.seed)
                    for k in range(config.cot_chains)]
        return out

    def generation_note(self, config: CmpIsoConfig) -> str:
        return ("chain-of-thought reasoning for the settings with reasoning: cot (cot_chains sampled chains per "
                "prompt); skip by leaving those settings out of `settings`, or --set cot_chains=0 for one greedy chain")

    def parse_requests(self, config: CmpIsoConfig, items: Sequence[SampledPair], tokenizer: Any) -> list:
        """The authors' sampled procedure, enumerated: every direct prompt in their generation mode, sampled
        at their T / top-p and read by their extractor (:func:`authors_label`); same ids as the records."""

        spec = paper_spec(config)
        if not config.parse_exact or spec is None:
            return []
        by_id = {(it.benchmark, str(it.pair.context_pair_id)): it for it in items}
        max_nodes, tail = head_budget(config)
        out = []
        for rid, _text, labels, _group, meta in _prompts(config, items, tokenizer, reasoning="direct"):
            it = by_id[(meta["benchmark"], str(meta["context_pair_id"]))]
            p = next(x for x in it.pair.prompts() if x.task_type == meta["task_type"]
                     and (x.target if x.task_type == "iso" else x.order) == (meta["target"] if meta["task_type"] == "iso"
                                                                               else meta["order"]))
            el = prompt_elements(p, "gen", meta["neutral"], meta["randomly"], meta["variant"])
            msgs = el.messages("gen")
            prompt = render_prompt(tokenizer, msgs[1]["content"], system=msgs[0]["content"])
            out.append(ParseRequest(
                id=rid, prompt=prompt, max_new_tokens=config.parse_max_new_tokens,
                temperature=float(spec["temperature"]), top_p=float(spec["top_p"]),
                parser_name=f"cmp_iso-last-boxed/1:{meta['task_type']}:{','.join(labels)}",
                parser=functools.partial(authors_label, task_type=meta["task_type"], labels=tuple(labels)),
                residual=float(config.parse_residual), max_nodes=max_nodes,
                answer_residual=config.parse_answer_residual, tail=tail,
                meta={"kind": f"{meta['task_type']}/parse", "setting": meta["setting"]}))
        return out

    def sampling(self, config: CmpIsoConfig) -> tuple[dict, ...]:
        """The authors' sampling (T = 0.7, top-p = 0.9), scored beside the exact probabilities."""

        spec = paper_spec(config)
        return (spec,) if spec else ()


class CmpIsoReporting(Reporting):
    #: the headline's direction, beside the metric's name (every ``pg_<task type>`` metric)
    metric_notes = {"pg": "0 = parity; the sign's meaning per benchmark is in the tables"}
    """Parity Gap of iso and cmp per benchmark, setting, variation and estimator; the paper's tables."""

    #: the report's words for paradigms, metrics, benchmarks, settings and variants
    terms = TERMS

    def results(self, config: CmpIsoConfig, summary: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Per benchmark, setting, variation and estimator: the Parity Gap of iso and of cmp prompts, with their
        CIs; headline: both on each benchmark's first setting, variation 0, expected."""

        rows = []
        first = {}
        for r in summary.get("results", []):
            first.setdefault(r.get("benchmark"), r.get("setting"))
        for r in summary.get("results", []):
            sub = f"{r.get('benchmark')} {r.get('setting')} v{r.get('variant')}"
            main = (r.get("variant") == 0 and r.get("mode") == "expected"
                    and first.get(r.get("benchmark")) == r.get("setting"))
            for prompt in ("iso", "cmp"):
                p = r.get(prompt) or {}
                ci = p.get("ci") or [None, None]
                rows.append(result_row(sub, f"pg_{prompt}", str(r.get("mode")), p.get("pg"), ci[0], ci[1],
                                       p.get("n_pairs"), main, p.get("n_pairs")))  # the unit: a context pair
        return rows + _parsed_rows(summary.get("paper_parsed") or {}, first)

    def warnings(self, summary: Mapping[str, Any]) -> list[str]:
        """Prompts whose parsed answer is not certified to the target (the authors' procedure, enumerated)."""

        parsed = summary.get("paper_parsed") or {}
        w = uncertified_warning(int(parsed.get("n_uncertified") or 0), int(parsed.get("n_prompts") or 0),
                                parsed.get("answer_residual_target"))
        return [w] if w else []

    def write(self, config: CmpIsoConfig, result: Aggregate, output: Path) -> None:
        """``tables/<name>[_argmax].md|csv`` (iso/cmp paper, Tables 2-7 layouts), ``tables/answering`` and
        ``tables/cot_chains`` (:mod:`.extra_tables`), ``tables/pg_paper_parsed`` (the authors' K-sample
        Parity Gap from their own procedure, enumerated) and ``pg_iso_vs_cmp*.png``."""

        write_report(combine_summaries([result.summary]), output)
        write_tables(_extra_tables(result.summary), output)
        if result.summary.get("paper_parsed"):  # the authors' procedure, enumerated: the headline PG
            from probe.tasks.cmp_iso.parsed import parsed_table

            write_tables({"pg_paper_parsed": parsed_table(result.summary["paper_parsed"],
                                                          str(result.summary.get("model") or "model"))}, output)


class CmpIsoTask(Task[CmpIsoConfig, SampledPair]):
    name = "cmp_iso"
    description = "iso vs cmp ('To Compare or Not to Compare'): Parity Gap of isolated vs comparative prompts, 8 gender benchmarks"
    Config = CmpIsoConfig
    selection = CmpIsoSelection()
    paper = CmpIsoPaper()
    reporting = CmpIsoReporting()

    def check_case(self) -> CheckCase:
        """A quick run for :func:`probe.testing.check_task`: 1 item(s) of a small config."""
        return CheckCase({"benchmarks": ["stereoset"], "settings": [{"reasoning": "direct"}], "n_iter": 10, "n_boot": 10}, 1)

    def items(self, config: CmpIsoConfig) -> list[SampledPair]:
        """Each benchmark's sample, shuffled (seeded), interleaved one pair per benchmark at a time.

        An item is a whole pair, so the default ``selection.select`` (the first ``limit``
        items) keeps every pair's iso t/t' and both cmp orders together.
        """

        samples = []
        for bench in config.benchmarks:
            pairs = sample_pairs(load_benchmark(bench, config.data_dir, category=config.category), config.max_pairs, config.seed)
            random.Random(config.seed).shuffle(pairs)  # any prefix of the work is a random sample
            samples.append(pairs)
        longest = max((len(p) for p in samples), default=0)
        return [SampledPair(p[i], i) for i in range(longest) for p in samples if i < len(p)]

    def requests(self, config: CmpIsoConfig, items: Sequence[SampledPair], tokenizer: Any,
                 generations: Mapping[str, str] | None = None) -> list:

        out = []
        for rid, text, labels, group, meta, forms in _prompts(config, items, tokenizer, with_forms=True):
            if meta["reasoning"] != "cot":
                out.append(LabelRequest(id=rid, prompt=text, labels=labels, group=group, meta=meta, forms=forms))
                continue
            # one scoring request per chain: the label where the authors' parser finds the chain's last boxed
            # answer (an unoffered last answer or none: boxed_found False), summed over cot_answer_forms
            chains = [(rid, None)] if not config.cot_chains else [(chain_id(rid, k), k)
                                                                   for k in range(config.cot_chains)]
            for cid, k in chains:
                if generations is None or cid not in generations:
                    raise ProbeError(f"cmp_iso: no CoT reasoning was generated for {cid!r}")
                final, found = cot_answer_prompt(text, generations[cid], labels)
                extra = {"generation": generations[cid], "boxed_found": found, **({} if k is None else {"chain": k})}
                # the forms (built.forms) are scored as one-token next tokens; space is unused with forms
                out.append(LabelRequest(id=cid, prompt=final, labels=labels, group=group, space="none",
                                        meta={**meta, **extra}, forms=forms))
        return out

    def aggregate(self, config: CmpIsoConfig, records: Any, items: Sequence[SampledPair]) -> Aggregate:
        summary = run_summary(records, config)
        if "parsed" in records.columns and records["parsed"].notna().any():
            from probe.tasks.cmp_iso.parsed import parsed_summary

            summary["paper_parsed"] = parsed_summary(records, config)
        summary["n_pairs"] = {b: sum(it.benchmark == b for it in items) for b in config.benchmarks}
        # the records name the model by fingerprint; report() redraws the tables with its name
        model = str(records["model"].iloc[0]) if len(records) else "model"
        tables = _tables(combine_summaries([{**summary, "model": model}]), build_tables)
        extra = {}
        if summary.get("paper_parsed"):
            from probe.tasks.cmp_iso.parsed import parsed_table

            extra["pg_paper_parsed"] = parsed_table(summary["paper_parsed"], model)
        return Aggregate(summary, {**extra, **tables, **_extra_tables(summary)})

    def data_files(self, config: CmpIsoConfig) -> list[Path]:
        root = Path(config.data_dir) if config.data_dir else dataset_dir("cmp_iso")
        return [root / benchmark_file(b, config.category) for b in config.benchmarks]


def _prompts(config: CmpIsoConfig, items: Sequence[SampledPair], tokenizer: Any,
             reasoning: str | None = None, with_forms: bool = False) -> list[tuple]:
    """(id, rendered prompt, labels, group, meta[, label forms]) of every prompt, in scoring order.

    Rounds of ``round_size`` pairs per benchmark; in a round, setting by
    setting and benchmark by benchmark; a pair's four prompts adjacent and
    in one group (iso t/t' and the cmp orders share their prefixes, and a
    chunk never holds half a pair).
    """

    settings = config.expanded_settings()
    if reasoning is not None:
        settings = [s for s in settings if s.reasoning == reasoning]
    longest = max((it.position + 1 for it in items), default=0)
    rs = config.round_size or longest or 1
    by_bench: dict[str, list[SampledPair]] = {b: [] for b in config.benchmarks}
    for it in items:
        by_bench[it.benchmark].append(it)
    out = []
    for start in range(0, longest, rs):
        for setting in settings:
            base = setting.base_name
            for bench in config.benchmarks:
                for it in by_bench[bench]:
                    if not start <= it.position < start + rs:
                        continue
                    pair = it.pair
                    group = f"{setting.name}|{bench}|{pair.context_pair_id}"
                    for p in pair.prompts():
                        slot = p.target if p.task_type == "iso" else p.order
                        built = build_prompt(p, setting)
                        text = render_built(tokenizer, built)
                        meta = {"kind": "cot" if setting.reasoning == "cot" else p.task_type,
                                "setting": setting.name, "base_setting": base, "variant": setting.variant,
                                "reasoning": setting.reasoning, "neutral": setting.neutral,
                                "randomly": setting.randomly, "benchmark": bench,
                                "context_pair_id": pair.context_pair_id, "task_type": p.task_type,
                                "target": p.target, "order": p.order, "t_name": pair.t_name,
                                "t_prime_name": pair.t_prime_name}
                        row = (request_id(setting, bench, pair.context_pair_id, p.task_type, slot), text,
                               built.labels, group, meta)
                        out.append(row + (built.forms,) if with_forms else row)
    return out


def _tables(summary: dict, build_tables: Any) -> dict:
    """Every table of both modes, by file name (``_argmax`` suffix as written by the report)."""

    out = {}
    for mode, suffix in table_modes(summary):
        for name, (title, df) in build_tables(summary, mode).items():
            if mode != "expected" and name.startswith("variants") or mode == "argmax" and name.startswith("label_mass"):
                continue
            df.attrs["title"] = title
            out[name + suffix] = df
    return out


def _extra_tables(summary: dict) -> dict:
    """``answering`` (PG with / without prompts below the mass floor) and, for CoT, ``cot_chains``."""

    out = {"answering": answering_table(summary)}
    if summary.get("cot"):
        out["cot_chains"] = chains_table(summary)
    return out


def _parsed_rows(parsed: Mapping[str, Any], first: Mapping[Any, Any]) -> list[dict[str, Any]]:
    """The authors' K-sample Parity Gap from their own procedure, as published (the hybrid: exact head plus
    each prompt's own tail draws, its 95 % interval in the CI columns, the certified interval in its own;
    headline: each benchmark's first setting), and the renormalising rule beside it as a sensitivity."""

    k = (parsed.get("settings") or {}).get("k")
    rows = []
    for c in parsed.get("by_cell") or []:
        group, head = f"{c['benchmark']} {c['setting']}", first.get(c["benchmark"]) == c["setting"]
        hybrid = c.get("estimator") == "hybrid"
        name = (f"sampled + parsed (K = {k}), hybrid: exact head + each prompt's tail draws" if hybrid
                else f"sampled + parsed (K = {k}), renormalising rule (no tail draws)")
        lo, hi = c.get("pg_ci") or (None, None)
        rows.append(result_row(group, f"pg_{c['task_type']}", name, c["pg"], lo, hi, c["n_pairs"], head,
                               c["n_pairs"], certified=c.get("pg_certified"), undefined=c.get("undefined")))
        if hybrid:  # the rule the hybrid replaced, named: how far the residual's answer moves the number
            rows.append(result_row(group, f"pg_{c['task_type']}", f"sampled + parsed (K = {k}), renormalising "
                                   "rule (sensitivity)", c["pg_rule"], None, None, c["n_pairs"]
                                   + c.get("n_pairs_undefined", 0), False, None, certified=c.get("pg_certified")))
    return rows
