"""Run ImplicitBBQ (seed 000): 12 settings x 4 prompting strategies, scored exactly.

    python -m experiments.implicitbbq --config configs/implicitbbq.yaml [--output-dir DIR] [--report-only]

Steps: build all items of the configured dimensions (:mod:`probe.data.implicitbbq`),
draw a stratified sample (``per_cell`` items per dimension x setting, per strategy;
smaller samples are prefixes of larger ones, so strategies are compared on shared
items), render each strategy's prompt (:mod:`probe.prompts.bbq`), score, and append
one record per (item, strategy, answer format) to ``records.jsonl`` as each chunk
finishes: an interrupted run resumes where it stopped (same command).

Outputs in ``output_dir``: ``records.jsonl``, ``summary.json`` (every metric, argmax
and expected, with bootstrap CIs and counts), ``tables/`` (Table 2 and Tables 5-7
layouts, .md and .csv), ``figure3.png``, ``timing.json`` (seconds per item per
strategy, and the projected time of the full grid), ``counts.json`` (builder counts)
and ``provenance.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from probe.errors import InputError, ProbeError

STRATEGIES = ("zero_shot", "safety", "few_shot", "cot")


@dataclass(frozen=True)
class ImplicitBBQConfig:
    """Experiment settings (YAML keys; unknown keys are rejected)."""

    model: str = "smollm2"
    device: str = "cpu"
    dtype: str = "float32"
    threads: int | None = 1  # torch threads (the CPU is shared); None = torch default
    batch_size: int = 16
    output_dir: str = "runs/implicitbbq"
    dimensions: tuple[str, ...] = ("age", "gender", "region", "religion", "ses", "caste")
    strategies: tuple[str, ...] = ("zero_shot", "safety", "few_shot", "cot")
    answer_formats: tuple[str, ...] = ("oneword",)  # "oneword" (seed) and/or "labels"
    # items per dimension x setting, per strategy (None = every item)
    per_cell: dict[str, int | None] = field(default_factory=lambda: {
        "zero_shot": 34, "safety": 34, "few_shot": 8, "cot": 3})
    # the seed applies mitigations to explicit/implicit contexts only, not to the controls
    control_strategies: tuple[str, ...] = ("zero_shot",)
    seed: int = 0
    lexical: str = "first"
    n_shots: int = 5
    cot_max_new_tokens: int = 256
    chat_template: bool = True
    chunk_size: int = 48  # items per recorded chunk (resume granularity)
    n_boot: int = 1000
    bbq_dir: str | None = None
    bharatbbq_dir: str | None = None

    def __post_init__(self) -> None:
        for k in ("dimensions", "strategies", "answer_formats", "control_strategies"):
            object.__setattr__(self, k, tuple(getattr(self, k)))
        bad = set(self.strategies) - set(STRATEGIES)
        if bad:
            raise ValueError(f"unknown strategies {sorted(bad)}; choose from {', '.join(STRATEGIES)}")
        bad = set(self.answer_formats) - {"oneword", "labels"}
        if bad:
            raise ValueError(f"unknown answer_formats {sorted(bad)}; choose from oneword, labels")
        missing = [s for s in self.strategies if s not in self.per_cell]
        if missing:
            raise ValueError(f"per_cell has no entry for strategies {missing}")


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> ImplicitBBQConfig:
    """YAML (``yaml.safe_load``) -> :class:`ImplicitBBQConfig`; unknown keys are an error naming the file."""
    from probe.config import load_config as load

    return load(path, ImplicitBBQConfig, overrides)


def unit_key(item) -> str:
    """The (context, background) an item belongs to: its 4 condition x polarity variants share it."""
    return item.id.rsplit("-", 2)[0]


def stratified_sample(items: list, per_cell: int | None, seed: int, settings: set[str] | None = None) -> list:
    """At least ``per_cell`` items per (dimension, setting), drawn as whole context units.

    A unit is one context with one background (or none): its ambiguous/disambiguated x
    negative/non-negative items, so the four explicit (or implicit) settings are scored on
    the same contexts (paired).
    Control settings hold both conditions, so they need half as many units. Units are
    ranked by a seeded hash (smaller samples are prefixes of larger ones) and returned
    round-robin over (dimension, kind): any prefix of the list stays stratified.
    """
    from probe.data.bbq import stable_hash

    units: dict[tuple[str, str], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for it in items:
        if settings is None or it.setting in settings:
            units[(it.category, it.context_kind)][unit_key(it)].append(it)
    ranked: dict[tuple[str, str], list[list]] = {}
    for key in sorted(units):
        order = sorted(units[key], key=lambda u: stable_hash(u, seed))
        need = None
        if per_cell is not None:
            need = per_cell if key[1] in ("explicit", "implicit") else -(-per_cell // 2)
        ranked[key] = [sorted(units[key][u], key=lambda it: it.id) for u in order[:need]]
    out = []
    depth = max((len(v) for v in ranked.values()), default=0)
    for i in range(depth):
        for v in ranked.values():
            if i < len(v):
                out.extend(v[i])
    return out


def _record(item, strategy: str, fmt: str, prep, scored: dict, extra: dict | None = None) -> dict:
    probs = scored["probs"]
    rec = {
        "id": f"{item.id}|{strategy}|{fmt}", "item_id": item.id, "strategy": strategy, "answer_format": fmt,
        "dimension": item.category, "category": item.category, "setting": item.setting,
        "context_kind": item.context_kind, "context_condition": item.context_condition,
        "question_polarity": item.question_polarity, "label": item.label, "target_index": item.target_index,
        "unknown_index": item.unknown_index, "template_id": item.template_id, "probs": probs,
        "pred_index": max(range(3), key=lambda i: (probs[i], -i)), "mass": scored["mass"],
        "logprobs": scored["logprobs"], "texts": list(prep.texts), "owner": list(prep.owner),
        "options": list(item.options), "cue1": item.metadata.get("cue1"), "cue2": item.metadata.get("cue2"),
        "target_group": item.metadata.get("target_group"),
    }
    rec.update(extra or {})
    return rec


def run(cfg: ImplicitBBQConfig, report_only: bool = False, lm: Any = None) -> Path:
    """Score what is missing, then write summary, tables and plots. ``lm``: a preloaded model (tests)."""
    from probe.data.implicitbbq import build_implicitbbq, count_table
    from probe.runs.records import RecordWriter
    from probe.io import write_json_atomic

    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    items = build_implicitbbq(cfg.dimensions, cfg.bbq_dir, cfg.bharatbbq_dir, lexical=cfg.lexical)
    write_json_atomic(out / "counts.json", count_table(items))
    print(f"built {len(items)} items in {time.time() - t0:.1f}s", file=sys.stderr)
    timing_path = out / "timing.json"
    timing: dict[str, Any] = {}
    if timing_path.exists():
        import json

        timing = json.loads(timing_path.read_text())
    with RecordWriter(out / "records.jsonl") as writer:
        if not report_only:
            lm = lm if lm is not None else _load(cfg)
            from probe.runs.provenance import provenance

            write_json_atomic(out / "provenance.json", provenance(lm=lm, config=dataclasses.asdict(cfg)))
            _run_interleaved(lm, cfg, items, writer, timing, timing_path)
        # summarise this config's sample only (a records file may hold more, e.g. copied in)
        wanted = {f"{it.id}|{s}|{f}" for s, sample in strategy_samples(cfg, items).items()
                  for it in sample for f in cfg.answer_formats}
        records = [r for r in writer.records if r["id"] in wanted]
    timing["full_grid"] = _projection(items, timing, cfg)
    write_json_atomic(timing_path, timing)
    from probe.reports.bbq_tables import write_reports

    write_reports(records, out, n_boot=cfg.n_boot, seed=cfg.seed, model=cfg.model)
    print(f"wrote {out}", file=sys.stderr)
    return out


def strategy_samples(cfg: ImplicitBBQConfig, items: list) -> dict[str, list]:
    """Each strategy's stratified sample (controls only for ``control_strategies``)."""
    samples = {}
    for strategy in cfg.strategies:
        settings = None if strategy in cfg.control_strategies else {
            s for s in {it.setting for it in items} if not s.startswith(("neutral", "nochar"))}
        samples[strategy] = stratified_sample(items, cfg.per_cell[strategy], cfg.seed, settings)
    return samples


def _run_interleaved(lm, cfg: ImplicitBBQConfig, items: list, writer, timing: dict, timing_path: Path) -> None:
    """Score every strategy's sample chunk by chunk over one shared unit order.

    Strategies advance together (zero-shot, safety, few-shot and CoT on the same
    leading units), so a run stopped at any point holds a stratified sample that is
    the same for every strategy, up to each strategy's own size.
    """
    from probe.io import write_json_atomic

    samples = strategy_samples(cfg, items)
    order: list = []
    seen: set[str] = set()
    for strategy in cfg.strategies:  # the largest sample first defines the unit order
        for it in samples[strategy]:
            if it.id not in seen:
                seen.add(it.id)
                order.append(it)
    member = {s: {it.id for it in samples[s]} for s in cfg.strategies}
    for s in cfg.strategies:
        print(f"{s}: {len(samples[s])} sampled", file=sys.stderr)
    step = cfg.chunk_size
    for start in range(0, len(order), step):
        chunk = order[start:start + step]
        for strategy in cfg.strategies:
            for fmt in cfg.answer_formats:
                todo = [it for it in chunk if it.id in member[strategy]
                        and f"{it.id}|{strategy}|{fmt}" not in writer.done]
                if not todo:
                    continue
                t1 = time.time()
                _score_items(lm, cfg, items, todo, strategy, fmt, writer)
                key = f"{strategy}|{fmt}"
                prev = timing.get(key, {"seconds": 0.0, "items": 0})
                timing[key] = {"seconds": prev["seconds"] + time.time() - t1, "items": prev["items"] + len(todo)}
                timing[key]["seconds_per_item"] = timing[key]["seconds"] / max(timing[key]["items"], 1)
                write_json_atomic(timing_path, timing)
        print(f"units {min(start + step, len(order))}/{len(order)} items done; records {len(writer.done)}",
              file=sys.stderr)


def _projection(items: list, timing: dict, cfg: ImplicitBBQConfig) -> dict:
    """Projected seconds to score every built item with every strategy (at the measured rates)."""
    n_all = len(items)
    n_mitig = sum(1 for it in items if not it.setting.startswith(("neutral", "nochar")))
    proj = {}
    for key, t in timing.items():
        if not isinstance(t, dict) or "seconds_per_item" not in t:
            continue
        strategy = key.split("|")[0]
        n = n_all if strategy in cfg.control_strategies else n_mitig
        proj[key] = {"items": n, "hours": t["seconds_per_item"] * n / 3600}
    proj["total_hours"] = sum(v["hours"] for v in proj.values())
    return proj


def _load(cfg: ImplicitBBQConfig):
    import torch

    from probe.models import load_model

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    return load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)


def _score_items(lm, cfg: ImplicitBBQConfig, all_items: list, todo: list, strategy: str, fmt: str, writer) -> None:
    from tqdm.auto import tqdm

    from probe.prompts.bbq import DemoIndex, cot_final_prompt, prepare, to_probs
    from probe.scoring import Scorer

    scorer = Scorer(lm, batch_size=cfg.batch_size)
    demos = DemoIndex(all_items) if strategy == "few_shot" else None
    chunk = cfg.chunk_size if strategy != "cot" else max(4, cfg.chunk_size // 4)
    bar = tqdm(total=len(todo), desc=f"{strategy}/{fmt}", unit="item", disable=len(todo) < 2 * chunk)
    for start in range(0, len(todo), chunk):
        batch = todo[start:start + chunk]
        preps = [prepare(it, lm.tokenizer, strategy, fmt,
                         demos.select(it, cfg.n_shots, cfg.seed) if demos else (), cfg.chat_template)
                 for it in batch]
        extras: list[dict] = [{} for _ in batch]
        if strategy == "cot":
            from probe.scoring.generate import greedy_generate

            reasoning = greedy_generate(lm, [p.prompt for p in preps], max_new_tokens=cfg.cot_max_new_tokens,
                                        batch_size=cfg.batch_size)
            preps = [cot_final_prompt(p, r) for p, r in zip(preps, reasoning)]
            extras = [{"reasoning": r} for r in reasoning]
        # No cross-item group: the scorer then shares each item's whole prompt among its answer
        # texts (one prompt pass + short suffixes). Grouping the 4 items of a unit would share
        # only their common context and recompute each item's tail once per answer text.
        results = scorer.score([p.request(group=None) for p in preps])
        writer.write_many(_record(it, strategy, fmt, p, to_probs(p, r), x)
                          for it, p, r, x in zip(batch, preps, results, extras))
        bar.update(len(batch))
    bar.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/implicitbbq.yaml")
    ap.add_argument("--output-dir", default=None)
    ap.add_argument("--model", default=None)
    ap.add_argument("--report-only", action="store_true", help="only rebuild summary/tables from records")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config, {"output_dir": args.output_dir, "model": args.model})
        run(cfg, report_only=args.report_only)
    except ProbeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
