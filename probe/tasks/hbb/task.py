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
    hbb_sg: bool = True  # HBB-SG (perplexity of each option sentence)
    sg_variations: str | None = None  # JSONL of option variations (see probe.data.hbb.load_sg_variations)
    sg_sample_concepts: int | None = None  # HBB-SG on a stratified subset of the selected concept pairs only
    crows_pairs: bool = False  # CrowS-Pairs in the same run, for Table 1's CS column
    crows_limit: int | None = None  # first N CrowS-Pairs pairs
    threshold: float = 20.0
    extra_thresholds: tuple[float, ...] = (5.0, 10.0)  # also tabulated (the paper's 20 is adjustable)
    chat_template: bool = True
    system_prompt: str | None = None
    n_boot: int = 1000

    def __post_init__(self) -> None:
        if self.sample_concepts is not None and self.per_cell is not None:
            raise ValueError("set at most one of sample_concepts and per_cell")
        if self.categories is not None:
            object.__setattr__(self, "categories", tuple(self.categories))
        object.__setattr__(self, "extra_thresholds", tuple(float(t) for t in self.extra_thresholds))


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
            variations = None
            if config.sg_variations:
                from probe.data.hbb import load_sg_variations

                variations = load_sg_variations(config.sg_variations)
            sg_ids = sg_concept_ids(config, items)
            reqs += sg_requests([q for q in questions if sg_ids is None or q.concept_id in sg_ids], variations)
        if config.crows_pairs:
            from probe.data.crows_pairs import load_crows_pairs
            from probe.tasks.crows_pairs import crows_requests

            pairs = load_crows_pairs()
            reqs += crows_requests(pairs[: config.crows_limit] if config.crows_limit is not None else pairs)
        return reqs

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
            from probe.tasks.crows_pairs import crows_summary

            crows, tables["crows"] = crows_summary(records[(kinds == "crows").to_numpy()])
        summary, hbb_tables = hbb_summary(config, items, hbb_records, inst, crows)
        inst.attrs["title"] = "per test instance: P1(A), P2(A), S and direction per variant (instances.jsonl)"
        return Aggregate(summary, {**hbb_tables, **tables, "instances": inst})

    def report(self, config: HBBConfig, result: Aggregate, output: Path) -> None:
        """``instances.jsonl``, ``tables/*.md|csv`` (labelled with the model), ``report.md``,
        ``hbb_hist.png`` and ``timing_projection.json``."""
        from probe.io import dumps, write_atomic
        from probe.reports.hbb_tables import histogram_png, report_markdown, with_model, write_table
        from probe.tasks.hbb.summary import write_projection

        model = str(result.summary.get("model", ""))
        tables = dict(result.tables)
        inst = tables.pop("instances")
        write_atomic(output / "instances.jsonl", "".join(dumps(r) + "\n" for r in inst.to_dict("records")))
        tables = {name: with_model(df, model, list(LABELS.values())) for name, df in tables.items()}
        for name, df in tables.items():
            write_table(df, output / "tables" / name, df.attrs.get("title", ""))
        write_atomic(output / "report.md", report_markdown(model, tables))
        frames = variant_frames(inst)
        if frames:
            histogram_png({f"{model} {LABELS[v]}": f["S"].to_numpy() for v, f in frames.items()},
                          output / "hbb_hist.png", config.threshold,
                          title="Hidden bias score distributions (Figure 4 layout)")
        write_projection(output)

    def data_files(self, config: HBBConfig) -> list[Path]:
        """Input files whose hashes go into provenance.json (data, and the packaged prompt texts)."""
        from importlib import resources

        from probe.data.paths import dataset_dir

        hbb = Path(config.data_dir) if config.data_dir else dataset_dir("hbb")
        files = [hbb / "questions.csv", hbb / "descriptors.json"]
        files.append(Path(str(resources.files("probe.prompts").joinpath("resources/hbb_prompts.yaml"))))
        if config.sg_variations:
            files.append(Path(config.sg_variations))
        if config.crows_pairs:
            from probe.tasks.crows_pairs import crows_file

            files.append(crows_file(None))
        return files
