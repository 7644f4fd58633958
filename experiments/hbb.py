"""Run the Hidden Bias Benchmark (MCQ by exact label probabilities, HBB-SG by perplexity).

    python -m experiments.hbb --config configs/hbb.yaml [--limit N] [--output-dir DIR]

One forward pass per distinct question (and per option order) replaces the
paper's ten sampled generations per question; HBB-SG needs one per option
sentence. Every scored request is appended to ``records.jsonl`` as it finishes,
so an interrupted run resumes where it stopped (same command). Outputs in
``output_dir``: ``records.jsonl`` (per request), ``instances.jsonl`` (per test
instance: P1(A), P2(A), S, direction per variant), ``summary.json``,
``tables/`` (paper Tables 1, 2, 8, 9 as .md/.csv), ``hbb_hist.png``,
``timing.json`` (seconds per request kind and the projection to the full
103,649 instances) and ``provenance.json``. CrowS-Pairs (``crows_pairs: true``)
is run by :mod:`experiments.crows_pairs` into the same directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from probe import config as probe_config
from probe.errors import InputError, ProbeError

VARIANTS = ("hbb", "hbb_swapavg", "hbb_sg")  # a)=s1 order; mean over both orders; semi-generation


@dataclass(frozen=True)
class HBBConfig:
    """Experiment settings (YAML keys; unknown keys are rejected)."""

    model: str = "smollm2"
    device: str = "cpu"
    dtype: str = "float32"
    batch_size: int = 16
    threads: int | None = 1  # torch threads (the CPU is shared); None = torch default
    output_dir: str = "runs/hbb"
    data_dir: str | None = None  # default: probe.data.paths.dataset_dir("hbb")
    name_seed: int = 0  # names drawn for Age 1-2, SES and Religions descriptors
    sample_concepts: int | None = None  # stratified concept pairs, all their instances
    per_cell: int | None = None  # or: instances per category x descriptor type
    sample_seed: int = 0
    limit: int | None = None  # first N instances after sampling (quick runs)
    categories: tuple[str, ...] | None = None
    hbb: bool = True
    swap_order: bool = True
    hbb_sg: bool = True
    sg_variations: str | None = None  # JSONL of option variations (see probe.data.hbb.load_sg_variations)
    sg_sample_concepts: int | None = None  # HBB-SG on a stratified subset of the selected concept pairs only
    crows_pairs: bool = False
    crows_limit: int | None = None
    threshold: float = 20.0
    extra_thresholds: tuple[float, ...] = (5.0, 10.0)  # also tabulated (the paper's 20 is adjustable)
    chat_template: bool = True
    system_prompt: str | None = None
    n_boot: int = 1000
    chunk_size: int = 128  # requests per recorded chunk (resume granularity)

    def __post_init__(self) -> None:
        if self.sample_concepts is not None and self.per_cell is not None:
            raise ValueError("set at most one of sample_concepts and per_cell")
        if self.categories is not None:
            object.__setattr__(self, "categories", tuple(self.categories))
        object.__setattr__(self, "extra_thresholds", tuple(float(t) for t in self.extra_thresholds))


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None, cls: type = HBBConfig):
    """YAML (``yaml.safe_load``) -> frozen config; unknown keys are an error naming the file."""
    return probe_config.load_config(path, cls, overrides)


def select_instances(cfg: HBBConfig) -> list:
    """Build, sample and limit the test instances the config asks for."""
    from probe.data.hbb import CATEGORIES, build_instances, load_default, sample_concepts, sample_per_cell

    concepts, descriptors = load_default(cfg.data_dir)
    if cfg.sample_concepts is not None:
        concepts = sample_concepts(concepts, cfg.sample_concepts, cfg.sample_seed)
    instances = list(build_instances(concepts, descriptors, cfg.name_seed, cfg.categories or CATEGORIES))
    if cfg.per_cell is not None:
        instances = sample_per_cell(instances, cfg.per_cell, cfg.sample_seed)
    return instances[: cfg.limit] if cfg.limit is not None else instances


def sg_concept_ids(cfg: HBBConfig, instances: Sequence) -> set[int] | None:
    """The concept pairs HBB-SG is scored on (None = all): a stratified subset of those selected."""
    if cfg.sg_sample_concepts is None:
        return None
    from probe.data.hbb import load_default, sample_concepts

    used = {i.concept_id for i in instances}
    concepts = [c for c in load_default(cfg.data_dir)[0] if c.concept_id in used]
    return {c.concept_id for c in sample_concepts(concepts, cfg.sg_sample_concepts, cfg.sample_seed)}


def build_requests(cfg: HBBConfig, questions: Sequence, tokenizer: Any, sg_ids: set[int] | None = None) -> list:
    from probe.prompts.hbb import mcq_requests, sg_requests

    reqs: list = []
    if cfg.hbb:
        reqs += mcq_requests(questions, tokenizer, chat_template=cfg.chat_template, system=cfg.system_prompt)
        if cfg.swap_order:
            reqs += mcq_requests(
                questions, tokenizer, swapped=True, chat_template=cfg.chat_template, system=cfg.system_prompt
            )
    if cfg.hbb_sg:
        variations = None
        if cfg.sg_variations:
            from probe.data.hbb import load_sg_variations

            variations = load_sg_variations(cfg.sg_variations)
        reqs += sg_requests([q for q in questions if sg_ids is None or q.concept_id in sg_ids], variations)
    return reqs


def record_of(result: Any) -> dict:
    """One JSONL record per scored request (no timestamps: records are reproducible)."""
    qid, kind, *rest = result.id.split("|")
    if kind == "sg":
        return {"id": result.id, "question_id": qid, "kind": kind, "option": int(rest[0]), "variation": int(rest[1]),
                "ppl": result.ppl, "nll": result.nll, "n_tokens": result.n_tokens, "finite": result.finite}
    return {"id": result.id, "question_id": qid, "kind": kind, "labels": list(result.labels),
            "logprobs": list(result.logprobs), "probs": list(result.probs), "label_mass": result.label_mass,
            "n_prompt_tokens": result.n_prompt_tokens, "finite": result.finite}


def score_resumable(
    scorer: Any,
    requests: Sequence,
    out_dir: Path,
    chunk_size: int,
    name: str = "records",
    to_record: Callable[[Any], dict] = record_of,
    kind_of: Callable[[Any], str] = lambda r: r.id.split("|")[1],
) -> tuple[list[dict], dict]:
    """Score the requests not yet in ``{name}.jsonl``; return all records and this call's timing
    (seconds per request kind, ``kind_of(request)``; a chunk's time is split evenly)."""
    from probe.runs.records import RecordWriter

    timing: dict[str, dict[str, float]] = {}
    with RecordWriter(out_dir / f"{name}.jsonl") as writer:
        todo = [r for r in requests if r.id not in writer.done]
        print(f"[{name}] {len(requests)} requests, {len(requests) - len(todo)} already recorded, {len(todo)} to score",
              file=sys.stderr)
        # Chunks follow request order, so one concept's questions stay together and share prefixes.
        for start in range(0, len(todo), chunk_size):
            chunk = todo[start : start + chunk_size]
            t0 = time.perf_counter()
            results = scorer.score(chunk)
            dt = time.perf_counter() - t0
            writer.write_many([to_record(r) for r in results])
            chunk_timing: dict[str, dict[str, float]] = {}
            for r in chunk:
                for tab in (timing, chunk_timing):
                    t = tab.setdefault(kind_of(r), {"n": 0, "seconds": 0.0})
                    t["n"] += 1
                    t["seconds"] += dt / len(chunk)
            with open(out_dir / "timing_log.jsonl", "a", encoding="utf-8") as log:  # survives resumes
                log.writelines(json.dumps({"kind": k, **v}) + "\n" for k, v in sorted(chunk_timing.items()))
            done = min(start + chunk_size, len(todo))
            print(f"[{name}] {done}/{len(todo)} scored ({dt:.1f} s for {len(chunk)})", file=sys.stderr, flush=True)
        return list(writer.records), timing


def question_probs(records: Sequence[dict]) -> pd.DataFrame:
    """Per question: P(s1) in the a)=s1 order, in the swapped order, and from HBB-SG."""
    from probe.metrics.hbb import sg_prob_a

    rows: dict[str, dict] = {}
    sg: dict[str, tuple[list, list]] = {}
    for r in records:
        q = rows.setdefault(r["question_id"], {"question_id": r["question_id"]})
        if r["kind"] == "mcq":
            q["p_s1_mcq"], q["label_mass"] = _prob(r["probs"][0]), r["label_mass"]
        elif r["kind"] == "mcq_swap":
            q["p_s1_swap"], q["label_mass_swap"] = _prob(r["probs"][1]), r["label_mass"]  # s1 is option b)
        elif r["kind"] == "sg":
            sg.setdefault(r["question_id"], ([], []))[r["option"] - 1].append(_prob(r["ppl"]))
    for qid, (a, b) in sg.items():
        rows[qid]["p_s1_sg"] = sg_prob_a(a, b) if a and b else np.nan
    return pd.DataFrame(list(rows.values())).set_index("question_id")


def _prob(x: Any) -> float:
    return float("nan") if x is None else float(x)


def instance_frame(instances: Sequence, qp: pd.DataFrame) -> pd.DataFrame:
    """Join question probabilities into instances: P1(A), P2(A), S and direction per variant."""
    from probe.metrics.hbb import bias_scores, direction, swap_average

    base = pd.DataFrame([{
        "id": i.id, "concept_id": i.concept_id, "category": i.category, "descriptor_type": i.descriptor_type,
        "identity_1": i.identity_1, "identity_2": i.identity_2, "q1": i.question_1.id, "q2": i.question_2.id,
    } for i in instances])
    cols = {"hbb": "p_s1_mcq", "hbb_sg": "p_s1_sg"}
    for variant, col in cols.items():
        if col in qp:
            base[f"{variant}_p1"] = qp[col].reindex(base.q1).to_numpy()
            base[f"{variant}_p2"] = qp[col].reindex(base.q2).to_numpy()
    if "p_s1_mcq" in qp and "p_s1_swap" in qp:
        avg = pd.Series(swap_average(qp.p_s1_mcq, qp.p_s1_swap), index=qp.index)
        base["hbb_swapavg_p1"] = avg.reindex(base.q1).to_numpy()
        base["hbb_swapavg_p2"] = avg.reindex(base.q2).to_numpy()
    for variant in VARIANTS:
        if f"{variant}_p1" in base:
            base[f"{variant}_S"] = bias_scores(base[f"{variant}_p1"], base[f"{variant}_p2"])
            base[f"{variant}_direction"] = direction(base[f"{variant}_p1"], base[f"{variant}_p2"])
    return base


def variant_frame(inst: pd.DataFrame, variant: str) -> pd.DataFrame:
    """The per-instance columns the metrics and tables expect (``S``, ``direction``)."""
    return inst.rename(columns={f"{variant}_S": "S", f"{variant}_direction": "direction"})


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.hbb", description=__doc__.splitlines()[0])
    ap.add_argument("--config", help="YAML config (configs/hbb.yaml)")
    ap.add_argument("--output-dir")
    ap.add_argument("--model")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--sample-concepts", type=int)
    ap.add_argument("--per-cell", type=int)
    ap.add_argument("--no-swap", dest="swap_order", action="store_false", default=None)
    ap.add_argument("--no-sg", dest="hbb_sg", action="store_false", default=None)
    ap.add_argument("--crows", dest="crows_pairs", action="store_true", default=None)
    ap.add_argument("--no-crows", dest="crows_pairs", action="store_false", default=None)
    ap.add_argument("--threshold", type=float)
    args = ap.parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k != "config"}
    try:
        cfg = load_config(args.config, overrides)
        run(cfg)
    except ProbeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def run(cfg: HBBConfig, lm: Any = None) -> dict:
    """Score, join, summarize and write every output; returns the summary.

    ``lm``: an already loaded model (tests pass a tiny one); default loads ``cfg.model``."""
    import torch

    from experiments.hbb_report import write_outputs
    from probe.data.hbb import unique_questions
    from probe.models import load_model
    from probe.runs.provenance import provenance
    from probe.io import write_json_atomic
    from probe.scoring import Scorer

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    instances = select_instances(cfg)
    if not instances:
        raise ProbeError("no HBB instances selected (check limit / sample / categories)")
    questions = unique_questions(instances)
    lm = lm if lm is not None else load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
    scorer = Scorer(lm, batch_size=cfg.batch_size)
    sg_ids = sg_concept_ids(cfg, instances) if cfg.hbb_sg else None
    requests = build_requests(cfg, questions, lm.tokenizer, sg_ids)
    records, timing = score_resumable(scorer, requests, out, cfg.chunk_size)
    wanted = {r.id for r in requests}
    records = [r for r in records if r["id"] in wanted]  # a resumed dir may hold other settings' records
    inst = instance_frame(instances, question_probs(records))
    if cfg.hbb_sg:  # instances outside the HBB-SG subset are not scored there (not "invalid")
        inst["in_sg"] = inst.concept_id.isin(sg_ids) if sg_ids is not None else True
    crows = None
    if cfg.crows_pairs:
        from experiments.crows_pairs import run_crows

        crows, crows_timing = run_crows(scorer, out, cfg.crows_limit, cfg.chunk_size)
        timing.update(crows_timing)
    cfg_dict = dataclasses.asdict(cfg)
    summary = write_outputs(out, cfg_dict, lm.name, instances, questions, requests, inst, crows, records)
    timing_doc = _timing(out, timing, time.perf_counter() - t_start)
    write_json_atomic(out / "timing.json", timing_doc)
    write_json_atomic(out / "provenance.json", provenance(lm, cfg_dict, data_files=_data_files(cfg)))
    print((out / "tables" / "summary.md").read_text(encoding="utf-8"))
    return summary


def _data_files(cfg: HBBConfig) -> list[Path]:
    """Input files whose hashes go into provenance.json (data, and the packaged prompt texts)."""
    from importlib import resources

    from probe.data.paths import dataset_dir

    hbb = Path(cfg.data_dir) if cfg.data_dir else dataset_dir("hbb")
    files = [hbb / "questions.csv", hbb / "descriptors.json"]
    files.append(Path(str(resources.files("probe.prompts").joinpath("resources/hbb_prompts.yaml"))))
    if cfg.sg_variations:
        files.append(Path(cfg.sg_variations))
    if cfg.crows_pairs:
        from probe.data.crows_pairs import DEFAULT_FILE

        files.append(dataset_dir("crows_pairs") / DEFAULT_FILE)
    return files


def _timing(out: Path, timing: dict, wall: float) -> dict:
    """Seconds per request kind (this invocation, and summed over every invocation of the run from
    ``timing_log.jsonl``) and the projection to the full benchmark on the same machine."""
    from probe.data.hbb import IDENTITIES, TYPE_INDEX, expected_counts

    total: dict[str, dict[str, float]] = {}
    log = out / "timing_log.jsonl"
    if log.exists():
        for line in log.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                t = total.setdefault(rec["kind"], {"n": 0, "seconds": 0.0})
                t["n"] += rec["n"]
                t["seconds"] += rec["seconds"]
    per_concept = sum(len(TYPE_INDEX[c]) * len(IDENTITIES[c]) for c in TYPE_INDEX)  # 50 distinct questions
    full_questions = 1547 * per_concept
    full_requests = {"mcq": full_questions, "mcq_swap": full_questions, "sg": 2 * full_questions}
    per = {k: v["seconds"] / v["n"] for k, v in total.items() if v["n"]}
    projection = {k: per[k] * n for k, n in full_requests.items() if k in per}
    return {
        "wall_seconds_this_invocation": wall,
        "scored_this_invocation": timing,
        "scored_all_invocations": total,
        "seconds_per_request": per,
        "full_benchmark": {"instances": expected_counts()["total"], "distinct_questions": full_questions,
                           "requests": full_requests, "projected_seconds": projection,
                           "projected_hours_total": sum(projection.values()) / 3600 if projection else None},
    }


if __name__ == "__main__":
    sys.exit(main())
