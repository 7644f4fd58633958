"""The ``hbb`` task: config, stages and outputs (see :mod:`probe.tasks.hbb`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from probe.tasks.base import Aggregate, Task, TaskConfig
from probe.tasks.hbb.join import (
    HBB_KINDS,
    LABELS,
    instance_frame,
    mcq_diagnostics,
    question_probs,
    request_kinds,
    variant_frames,
)


@dataclass(frozen=True)
class HBBConfig(TaskConfig):
    """HBB settings (YAML keys); the model, device, batch size and chunking belong to the run."""

    data_dir: str | None = None  # default: probe.data.paths.dataset_dir("hbb")
    name_seed: int = 0  # names drawn for Age 1-2, SES and Religions descriptors
    sample_concepts: int | None = None  # stratified concept pairs, all their instances
    per_cell: int | None = None  # or: instances per category x descriptor type
    sample_seed: int = 0
    categories: tuple[str, ...] | None = None
    hbb: bool = True  # MCQ in the a)=s1 order
    swap_order: bool = True  # also a)=s2, for the order-averaged S
    hbb_sg: bool = True  # HBB-SG (perplexity of each option sentence variation)
    sg_n: int = 10  # variations per option: the original + n - 1 generated (the paper's n = 10); 1 = originals
    variations_file: str | None = None  # JSONL of variations instead of generating (probe.tasks.hbb.variations)
    sg_max_new_tokens: int = 512  # budget of one variation generation (9 sentences)
    sg_system_prompt: str | None = "You are a useful assistant."  # the authors' system message (HBB-SG)
    sg_sample_concepts: int | None = None  # HBB-SG on a stratified subset of the selected concept pairs only
    crows_pairs: bool = False  # CrowS-Pairs in the same run, for Table 1's CS column
    crows_limit: int | None = None  # first N CrowS-Pairs pairs
    # mcq: protocol (a), the HBB paper's two-choice question (its Table 1 CS column); loglik: (b), lm-evaluation-
    # harness's whole-sentence causal log-likelihood; both: each, CS from (a) (probe.tasks.crows_pairs)
    crows_protocol: str = "mcq"
    threshold: float = 20.0
    extra_thresholds: tuple[float, ...] = (5.0, 10.0)  # also tabulated (the paper's 20 is adjustable)
    chat_template: bool = True
    # the MCQ system message: the authors' (their open-weight wrapper LLM.getOutput sends it with every
    # prompt); null sends none, and a chat template may then put in its own default (SmolLM2 does)
    system_prompt: str | None = "You are a useful assistant."
    n_boot: int = 1000
    # the paper samples each question 10 times at T = 0.8 (top-p 1); its count is computed exactly from the
    # tempered label probabilities (probe.metrics.hbb_sampling); paper_temperature: null turns it off
    paper_temperature: float | None = 0.8
    paper_top_p: float = 1.0
    paper_samples: int = 10
    mass_floor: float = 0.1  # a question whose label mass is below this is "not answering" (Table 6 analogue)

    def __post_init__(self) -> None:
        if self.sample_concepts is not None and self.per_cell is not None:
            raise ValueError("set at most one of sample_concepts and per_cell")
        if self.categories is not None:
            object.__setattr__(self, "categories", tuple(self.categories))
        object.__setattr__(self, "extra_thresholds", tuple(float(t) for t in self.extra_thresholds))
        from probe.tasks.crows_pairs import protocols

        protocols(self.crows_protocol)
        if self.sg_n < 1:
            raise ValueError(f"sg_n must be >= 1, got {self.sg_n}")
        if self.hbb_sg and self.variations_file is None and self.sg_n > 10:
            # the authors' prompt asks for 9 sentences; more need a variations_file
            raise ValueError(f"sg_n = {self.sg_n}: generated variations give at most 10 (the original + 9 asked "
                             "for); use a variations_file for more")


def sg_concepts(config: HBBConfig, instances: Sequence[Any]) -> list:
    """The concept pairs (templates) HBB-SG scores for these instances, in data order."""
    from probe.data.hbb import load_default

    ids = sg_concept_ids(config, instances)
    used = {i.concept_id for i in instances}
    return [c for c in load_default(config.data_dir)[0] if c.concept_id in used and (ids is None or c.concept_id in ids)]


def sg_concept_ids(config: HBBConfig, instances: Sequence[Any]) -> set[int] | None:
    """The concept pairs HBB-SG is scored on (None = all): a stratified subset of those selected."""
    if config.sg_sample_concepts is None:
        return None
    from probe.data.hbb import load_default, sample_concepts

    used = {i.concept_id for i in instances}
    concepts = [c for c in load_default(config.data_dir)[0] if c.concept_id in used]
    return {c.concept_id for c in sample_concepts(concepts, config.sg_sample_concepts, config.sample_seed)}


class HBBTask(Task):
    name = "hbb"
    description = ("Hidden Bias Benchmark: paired questions differing only in an identity descriptor; MCQ (both "
                   "option orders), HBB-SG, optional CrowS-Pairs")
    Config = HBBConfig

    def items(self, config: HBBConfig) -> list:
        """The test instances the config selects (categories, then ``sample_concepts`` or ``per_cell``)."""
        from probe.data.hbb import CATEGORIES, build_instances, load_default, sample_concepts, sample_per_cell

        concepts, descriptors = load_default(config.data_dir)
        if config.sample_concepts is not None:
            concepts = sample_concepts(concepts, config.sample_concepts, config.sample_seed)
        instances = list(build_instances(concepts, descriptors, config.name_seed, config.categories or CATEGORIES))
        if config.per_cell is not None:
            instances = sample_per_cell(instances, config.per_cell, config.sample_seed)
        return instances

    def select(self, config: HBBConfig, items: Sequence[Any], limit: int | None) -> list:
        """``--limit N``: the first N test instances after sampling (their distinct questions are scored)."""
        return list(items) if limit is None else list(items)[:limit]

    def generation_requests(self, config: HBBConfig, items: Sequence[Any], tokenizer: Any) -> list:
        """HBB-SG variations by the evaluated model: one greedy generation per concept pair and option
        (none with ``variations_file``, ``sg_n: 1`` or ``hbb_sg: false``)."""
        if not _generates(config):
            return []
        from probe.tasks.hbb.variations import generation_requests

        return generation_requests(sg_concepts(config, items), tokenizer, max_new_tokens=config.sg_max_new_tokens,
                                   chat_template=config.chat_template, system=config.sg_system_prompt)

    def requests(self, config: HBBConfig, items: Sequence[Any], tokenizer: Any,
                 generations: Mapping[str, str] | None = None) -> list:
        """MCQ (a)=s1, then a)=s2) per distinct question, HBB-SG per option sentence, then CrowS-Pairs;
        each block ordered by concept pair, so what shares a prompt prefix is adjacent."""
        from probe.data.hbb import unique_questions
        from probe.prompts.hbb import mcq_requests, sg_requests

        questions = unique_questions(items)
        reqs: list = []
        if config.hbb:
            reqs += mcq_requests(questions, tokenizer, chat_template=config.chat_template, system=config.system_prompt)
            if config.swap_order:
                reqs += mcq_requests(questions, tokenizer, swapped=True, chat_template=config.chat_template,
                                     system=config.system_prompt)
        if config.hbb_sg:
            from probe.tasks.hbb import variations as var

            concepts = sg_concepts(config, items)
            if config.variations_file:
                variations = var.from_file(config.variations_file, concepts, config.sg_n)
            elif _generates(config):
                variations = var.from_generations(concepts, generations or {}, config.sg_n)
            else:
                variations = var.originals(concepts)
            reqs += sg_requests([q for q in questions if q.concept_id in variations], tokenizer, variations,
                                chat_template=config.chat_template, system=config.sg_system_prompt)
        if config.crows_pairs:
            from probe.data.crows_pairs import load_crows_pairs
            from probe.tasks.crows_pairs import crows_requests

            pairs = load_crows_pairs()
            reqs += crows_requests(pairs[: config.crows_limit] if config.crows_limit is not None else pairs,
                                   config.crows_protocol, tokenizer, swap_order=config.swap_order,
                                   chat_template=config.chat_template, system=config.system_prompt)
        return reqs

    def sampling(self, config: HBBConfig) -> tuple[dict, ...]:
        """The paper's answer sampling (T = 0.8), scored beside the exact label probabilities (HBB MCQ and
        CrowS-Pairs protocol (a))."""
        crows_mcq = config.crows_pairs and config.crows_protocol in ("mcq", "both")
        if config.paper_temperature is None or not (config.hbb or crows_mcq):
            return ()
        return ({"temperature": float(config.paper_temperature), "top_p": float(config.paper_top_p)},)

    def aggregate(self, config: HBBConfig, records: Any, items: Sequence[Any]) -> Aggregate:
        from probe.tasks.hbb.summary import hbb_summary

        kinds = request_kinds(records)
        hbb_records = records[kinds.isin(HBB_KINDS).to_numpy()]
        inst = instance_frame(items, question_probs(hbb_records))
        if config.hbb_sg:  # instances outside the HBB-SG subset are not scored there (not "invalid")
            sg_ids = sg_concept_ids(config, items)
            inst["in_sg"] = inst.concept_id.isin(sg_ids) if sg_ids is not None else True
        crows = None
        tables: dict[str, Any] = {}
        if config.crows_pairs:
            from probe.tasks.crows_pairs import KINDS, protocol_summaries

            crows_kinds = [k for ks in KINDS.values() for k in ks]
            crows, crows_tables = protocol_summaries(
                records[kinds.isin(crows_kinds).to_numpy()], config.crows_protocol, mass_floor=config.mass_floor,
                n_boot=config.n_boot, system_prompt=config.system_prompt, chat_template=config.chat_template,
                swap_order=config.swap_order,
                paper=self.sampling(config)[0] if self.sampling(config) else None)
            # "crows": the table the CS column takes; every protocol's under its own name
            tables.update({"crows": crows_tables[f"crows_{crows['table1_protocol']}"], **crows_tables})
        summary, hbb_tables = hbb_summary(config, items, hbb_records, inst, crows)
        if config.hbb_sg:
            from probe.tasks.hbb.variations import scored_variations, variation_stats

            sg_recs = hbb_records[request_kinds(hbb_records).eq("sg").to_numpy()]
            scored = scored_variations(sg_recs)
            tables["sg_variations"] = scored
            summary["hbb_sg"] = {
                "variations": "file" if config.variations_file else "generated" if _generates(config) else "original",
                "variations_file": config.variations_file,
                "normalization": "1/PPL normalized within each variation pair, then averaged (appendix E.1)",
                "prompt": "evaluate_perplexity.txt + context as the user turn, the sentence as the assistant turn",
                "system_prompt": config.sg_system_prompt, "chat_template": config.chat_template,
                # greedy: deterministic, so no seed; the authors sampled (the runner cannot sample yet)
                "generation": {"by": "the evaluated model", "decoding": "greedy",
                               "max_new_tokens": config.sg_max_new_tokens} if _generates(config) else None,
                **variation_stats({r.concept_id: (r.s1, r.s2) for r in scored.itertuples()}, config.sg_n),
            }
        inst.attrs["title"] = "per test instance: P1(A), P2(A), S and direction per variant (instances.jsonl)"
        return Aggregate(summary, {**hbb_tables, **tables, "instances": inst})

    def report(self, config: HBBConfig, result: Aggregate, output: Path) -> None:
        """``instances.jsonl``, ``tables/*.md|csv`` (labelled with the model), ``report.md``,
        ``hbb_hist.png``, ``figures/hbb_figure{3,4,8,9}.png|svg|csv`` and ``timing_projection.json``."""
        from probe.io import dumps, write_atomic
        from probe.reports.hbb_tables import histogram_png, report_markdown, with_model, write_table
        from probe.tasks.hbb.summary import write_projection

        model = str(result.summary.get("model", ""))
        tables = dict(result.tables)
        inst = tables.pop("instances")
        write_atomic(output / "instances.jsonl", "".join(dumps(r) + "\n" for r in inst.to_dict("records")))
        variations = tables.pop("sg_variations", None)
        if variations is not None:  # the variations scored, in the variations_file format (reusable)
            write_atomic(output / "sg_variations.jsonl",
                         "".join(dumps(r) + "\n" for r in variations.to_dict("records")))
        tables = {name: with_model(df, model, list(LABELS.values())) for name, df in tables.items()}
        for name, df in tables.items():
            write_table(df, output / "tables" / name, df.attrs.get("title", ""))
        write_atomic(output / "report.md", report_markdown(model, tables))
        frames = variant_frames(inst)
        if frames:
            histogram_png({f"{model} {LABELS[v]}": f["S"].to_numpy() for v, f in frames.items()},
                          output / "hbb_hist.png", config.threshold,
                          title="Hidden bias score distributions (Figure 4 layout)")
            from probe.reports.hbb_figures import write_run_figures

            # Figures 3, 4 (MCQ) and 8, 9 (HBB-SG), the run's variants as the paper's model columns
            mcq = {f"{model} ({LABELS[v]})": f for v, f in frames.items() if v != "hbb_sg"}
            sg = {f"{model} ({LABELS[v]})": f for v, f in frames.items() if v == "hbb_sg"}
            write_run_figures(mcq, sg, output / "figures", config.threshold)
        write_projection(output, config.sg_n)

    # -- analyses: unit = concept pair (as the CIs); pairs = question 1 <-> question 2 of an instance -----
    def analysis_units(self, config: HBBConfig, records: Any, items: Sequence[Any]) -> list[str]:
        concept = records["concept_id"] if "concept_id" in records else [None] * len(records)
        return [f"concept:{int(c)}" if c == c and c is not None else str(i) for c, i in zip(concept, records["id"])]

    def patch_pairs(self, config: HBBConfig, records: Any, items: Sequence[Any]) -> list[tuple[str, str, str]]:
        """Per instance and request kind (``mcq``, ``mcq_swap``): its question 1's record <-> question 2's."""
        if "question_id" not in records:
            return []
        by_q: dict[tuple, str] = {}
        for rid, qid, kind in zip(records["id"], records["question_id"], request_kinds(records)):
            if kind in ("mcq", "mcq_swap"):
                by_q[(qid, kind)] = rid
        out = []
        for inst in items:
            for kind in ("mcq", "mcq_swap"):
                a, b = by_q.get((inst.question_1.id, kind)), by_q.get((inst.question_2.id, kind))
                if a is not None and b is not None:
                    out += [(a, b, "q1->q2"), (b, a, "q2->q1")]
        return out

    def bias_metrics(self, config: HBBConfig, summary: Mapping[str, Any]) -> dict[str, dict[str, float]]:
        """``{variant}.share`` (instances with S over the threshold), ``{variant}.mean_s`` (their mean S) and
        ``{variant}.mean_s_all`` (mean S of every instance: continuous, for dose-responses; no CI), overall."""
        out = {}
        for v, entry in summary["variants"].items():
            o = entry["overall"]
            for m in ("share", "mean_s"):
                out[f"{v}.{m}"] = {"value": o[m], "ci_low": o[f"{m}_ci_low"], "ci_high": o[f"{m}_ci_high"],
                                   "n": o["n"]}
            out[f"{v}.mean_s_all"] = {"value": o["mean_s_all"], "ci_low": float("nan"), "ci_high": float("nan"),
                                      "n": o["n"]}
        return out

    def data_files(self, config: HBBConfig) -> list[Path]:
        """Input files whose hashes go into provenance.json (data, and the packaged prompt texts)."""
        from importlib import resources

        from probe.data.paths import dataset_dir

        hbb = Path(config.data_dir) if config.data_dir else dataset_dir("hbb")
        files = [hbb / "questions.csv", hbb / "descriptors.json"]
        res = resources.files("probe.prompts").joinpath("resources")
        files += [Path(str(res.joinpath(name))) for name in
                  ("hbb_prompts.yaml", "hbb_evaluate_perplexity.txt", "hbb_qa_generate2_more_sentences.txt")]
        if config.variations_file:
            files.append(Path(config.variations_file))
        if config.crows_pairs:
            from probe.tasks.crows_pairs import crows_file

            files.append(crows_file(None))
        return files


def _generates(config: HBBConfig) -> bool:
    """Whether HBB-SG's variations are generated by the evaluated model in this run."""
    return config.hbb_sg and config.variations_file is None and config.sg_n > 1
