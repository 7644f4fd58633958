"""iso vs cmp with exact probabilities (seed 003): config in; records, summary, tables, plot out.

    python -m experiments.cmp_iso --config configs/cmp_iso.yaml
    python -m experiments.cmp_iso --config configs/cmp_iso.yaml --models gemma3-270m --no-report
    python -m experiments.cmp_iso --config configs/cmp_iso.yaml --report-only

Outputs under ``out_dir``: ``records/<model>.jsonl`` (one line per scored
prompt; resumable, one file per model so models can run in separate
processes), ``summary.json``, ``tables/*.md|csv``, ``pg_iso_vs_cmp.png``,
``provenance-<model>.json``. Re-running the same command resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from probe.data.cmp_iso import BENCHMARK_FILES, load_benchmark, sample_pairs
from probe.data.paths import dataset_dir
from probe.errors import InputError
from probe.prompts.cmp_iso import N_VARIANTS, CmpIsoSetting, build_prompt, cot_answer_prompt
from probe.runs.provenance import provenance
from probe.runs.records import RecordWriter
from probe.io import read_records, write_json_atomic


@dataclass(frozen=True)
class SettingSpec:
    """One entry of ``settings:``; ``variants: all`` expands to the 54 variations."""

    reasoning: str = "direct"
    neutral: bool = False
    randomly: bool = False
    variants: tuple[int, ...] = (0,)


@dataclass(frozen=True)
class CmpIsoConfig:
    """The experiment config (``configs/cmp_iso.yaml``; see docs/cmp_iso.md)."""

    models: tuple[str, ...] = ("smollm2",)
    benchmarks: tuple[str, ...] = tuple(BENCHMARK_FILES)
    max_pairs: int | None = 200  # random sample per benchmark (all pairs when fewer)
    round_size: int | None = 25  # pairs per benchmark per round (None: whole sample at once)
    seed: int = 0
    settings: tuple[SettingSpec, ...] = (SettingSpec(), SettingSpec(neutral=True))
    direct_cue: str = "prefill"
    device: str = "cpu"
    dtype: str = "float32"
    batch_size: int = 16
    token_budget: int = 8192
    max_new_tokens: int = 256  # CoT generation
    out_dir: str = "runs/cmp_iso"
    n_iter: int = 10000  # randomization test iterations
    n_boot: int = 2000  # bootstrap resamples
    alpha: float = 0.05
    # pairs of setting names compared by randomization tests, e.g. ["direct", "direct+neutral"]
    comparisons: tuple[tuple[str, str], ...] = ()
    # parameter counts (billions) for the PG-vs-size Pearson correlation; models without one are left out
    params_b: dict[str, float] = field(default_factory=dict)

    def expanded_settings(self) -> list[CmpIsoSetting]:
        out = []
        for s in self.settings:
            for v in s.variants:
                out.append(CmpIsoSetting(s.reasoning, s.neutral, s.randomly, v, self.direct_cue))  # type: ignore[arg-type]
        return out


def load_config(path: str | Path) -> CmpIsoConfig:
    """YAML -> :class:`CmpIsoConfig`; unknown keys are an error naming the file and key."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(path, None, None, f"cannot read YAML config ({exc})") from None
    if not isinstance(raw, dict):
        raise InputError(path, None, None, "expected a mapping of config keys")
    return _from_dict(CmpIsoConfig, raw, path, "")


def _from_dict(cls: Any, raw: dict, path: Path, where: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise InputError(path, None, where + unknown[0], f"unknown key; allowed: {sorted(names)}")
    kw: dict[str, Any] = {}
    for k, v in raw.items():
        if cls is CmpIsoConfig and k == "settings":
            if not isinstance(v, list) or not v:
                raise InputError(path, None, "settings", "expected a non-empty list")
            kw[k] = tuple(_from_dict(SettingSpec, s, path, f"settings[{i}].") for i, s in enumerate(v))
        elif cls is SettingSpec and k == "variants":
            kw[k] = tuple(range(N_VARIANTS)) if v == "all" else tuple(int(x) for x in v)
        elif k in ("models", "benchmarks"):
            kw[k] = tuple(v)
        elif k == "comparisons":
            kw[k] = tuple(tuple(x) for x in v)
        else:
            kw[k] = v
    for b in kw.get("benchmarks", ()):
        if b not in BENCHMARK_FILES:
            raise InputError(path, None, "benchmarks", f"unknown benchmark {b!r}; choose from {sorted(BENCHMARK_FILES)}")
    try:
        return cls(**kw)
    except (TypeError, ValueError) as exc:
        raise InputError(path, None, where.rstrip(".") or None, str(exc)) from None


def record_id(model: str, setting: str, benchmark: str, cp: Any, task: str, slot: str) -> str:
    return f"{model}|{setting}|{benchmark}|{cp}|{task}|{slot}"


def run_model(cfg: CmpIsoConfig, model_name: str, out: Path, progress: bool = True, lm: Any = None) -> dict:
    """Score every (setting, benchmark, pair, prompt) not yet recorded for one model.

    ``lm``: an already loaded model to use under ``model_name`` (tests); default: ``load_model``.
    """
    import torch

    from probe.models import load_model
    from probe.prompts.chat import render_prompt
    from probe.scoring import LabelRequest, Scorer

    torch.manual_seed(cfg.seed)
    if lm is None:
        lm = load_model(model_name, device=cfg.device, dtype=cfg.dtype)
    scorer = Scorer(lm, batch_size=cfg.batch_size, token_budget=cfg.token_budget)
    safe = model_name.replace("/", "_")
    files = [dataset_dir("cmp_iso") / BENCHMARK_FILES[b] for b in cfg.benchmarks]
    write_json_atomic(out / f"provenance-{safe}.json", provenance(lm=lm, config=dataclasses.asdict(cfg), data_files=files))
    samples = {}
    for bench in cfg.benchmarks:
        pairs = sample_pairs(load_benchmark(bench), cfg.max_pairs, cfg.seed)
        random.Random(cfg.seed).shuffle(pairs)  # any prefix of the work is a random sample
        samples[bench] = pairs
    longest = max(len(p) for p in samples.values())
    rs = cfg.round_size or longest
    # rounds of `round_size` pairs per benchmark over all settings: an interrupted run
    # still has every setting and benchmark on a (smaller) random sample
    work = [(setting, bench, samples[bench][r : r + rs]) for r in range(0, longest, rs)
            for setting in cfg.expanded_settings() for bench in cfg.benchmarks]
    with RecordWriter(out / "records" / f"{safe}.jsonl") as writer:
        for setting, bench, pairs in work:
            todo = []  # (record stub, user, prefill, labels, group)
            for pair in pairs:
                for p in pair.prompts():
                    slot = p.target if p.task_type == "iso" else p.order
                    rid = record_id(model_name, setting.name, bench, pair.context_pair_id, p.task_type, slot)
                    if rid in writer.done:
                        continue
                    built = build_prompt(p, setting)
                    stub = {"id": rid, "model": model_name, "setting": setting.name, "benchmark": bench,
                            "context_pair_id": pair.context_pair_id, "task_type": p.task_type,
                            "target": p.target, "order": p.order, "variant": setting.variant,
                            "reasoning": setting.reasoning, "neutral": setting.neutral, "randomly": setting.randomly}
                    text = render_prompt(lm.tokenizer, built.user, prefill=built.prefill)
                    # iso t/t' (and the two cmp orders) share all tokens up to the target
                    todo.append((stub, text, built.labels, f"{bench}|{pair.context_pair_id}|{p.task_type}"))
            if not todo:
                continue
            t0 = time.time()
            for start in range(0, len(todo), 64):
                chunk = todo[start : start + 64]
                extra: list[dict] = [{} for _ in chunk]
                prompts = [c[1] for c in chunk]
                space = "auto"
                if setting.reasoning == "cot":
                    from probe.scoring.generate import greedy_generate

                    gens = greedy_generate(lm, prompts, max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size)
                    new_prompts = []
                    for i, (g, c) in enumerate(zip(gens, chunk)):
                        ptxt, found = cot_answer_prompt(c[1], g, c[2])
                        new_prompts.append(ptxt)
                        extra[i] = {"generation": g, "boxed_found": found}
                    prompts, space = new_prompts, "none"
                reqs = [LabelRequest(id=c[0]["id"], prompt=pt, labels=c[2], group=c[3], space=space)
                        for c, pt in zip(chunk, prompts)]
                results = scorer.score(reqs)
                recs = []
                for c, r, ex in zip(chunk, results, extra):
                    recs.append({**c[0], **ex, "labels": list(r.labels),
                                 "probs": dict(zip(r.labels, r.probs)), "logprobs": dict(zip(r.labels, r.logprobs)),
                                 "label_mass": r.label_mass, "argmax": r.labels[r.argmax],
                                 "n_prompt_tokens": r.n_prompt_tokens, "finite": r.finite})
                writer.write_many(recs)
            if progress:
                print(f"[cmp_iso] {model_name} {setting.name} {bench}: {len(todo)} prompts in "
                      f"{time.time() - t0:.0f}s", file=sys.stderr, flush=True)
    return lm.info()


MODES = ("expected", "argmax")


def _base_setting(name: str) -> tuple[str, int]:
    """``"direct+neutral+v17"`` -> ``("direct+neutral", 17)``."""
    parts = name.split("+")
    if parts[-1].startswith("v") and parts[-1][1:].isdigit():
        return "+".join(parts[:-1]), int(parts[-1][1:])
    return name, 0


def build_summary(records: list[dict], cfg: CmpIsoConfig) -> dict:
    """Everything the tables and the plot need, from the per-prompt records (JSON-ready)."""
    import numpy as np

    from probe.metrics.cmp_iso import analyze, observation_from_dict, summarize
    from probe.metrics.significance import kendall_tau, pearson, randomization_test

    groups: dict[tuple, list[dict]] = {}
    nonfinite = [r["id"] for r in records if not r.get("finite", True)]
    for r in records:
        if not r.get("finite", True):  # NaN/inf logits: never averaged, listed in the summary
            continue
        groups.setdefault((r["model"], r["setting"], r["benchmark"]), []).append(r)
    results, gaps_by = [], {}
    for (model, setting, bench), recs in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        base, variant = _base_setting(setting)
        mass = {tt: float(np.mean([r["label_mass"] for r in recs if r["task_type"] == tt] or [np.nan]))
                for tt in ("iso", "cmp")}
        for mode in MODES:
            obs = [observation_from_dict(r, mode) for r in recs]
            res = analyze(obs, n_boot=cfg.n_boot, n_iter=cfg.n_iter, seed=cfg.seed, alpha=cfg.alpha,
                          allow_incomplete=True)  # an interrupted run: finished pairs only
            results.append({"model": model, "setting": setting, "base_setting": base, "variant": variant,
                            "benchmark": bench, "mode": mode, "label_mass": mass, **res})
            s = summarize(obs, allow_incomplete=True)
            for par in (s.iso, s.cmp):
                gaps_by[(model, base, variant, bench, mode, par.paradigm)] = dict(zip(par.pair_ids, par.gaps))
    comparisons = []
    for a, b in cfg.comparisons:
        for (model, base, variant, bench, mode, par), ga in sorted(gaps_by.items(), key=lambda kv: tuple(map(str, kv[0]))):
            if base != a or variant != 0:
                continue
            # all variants of both settings; a pair's variants form one block (seed 003, appendix D)
            xs, ys, blocks = [], [], []
            for (m2, b2, v2, be2, mo2, pa2), gb in gaps_by.items():
                if (m2, b2, be2, mo2, pa2) != (model, a, bench, mode, par):
                    continue
                other = gaps_by.get((model, b, v2, bench, mode, par), {})
                for cp, g in gb.items():
                    if cp in other:
                        xs.append(g), ys.append(other[cp]), blocks.append(str(cp))
            if not xs:
                continue
            t = randomization_test(xs, ys, n_iter=cfg.n_iter, seed=cfg.seed, blocks=blocks)
            comparisons.append({"model": model, "benchmark": bench, "mode": mode, "paradigm": par, "a": a, "b": b,
                                "pg_a": float(np.mean(xs)), "pg_b": float(np.mean(ys)), "observed": t.observed,
                                "p_value": t.p_value, "significant": t.p_value < cfg.alpha,
                                "n_units": t.n_units, "n_blocks": t.n_blocks})
    variants = []
    by_base: dict[tuple, dict[int, float]] = {}
    for r in results:
        for par in ("iso", "cmp"):
            by_base.setdefault((r["model"], r["base_setting"], r["benchmark"], r["mode"], par), {})[r["variant"]] = r[par]["pg"]
    for (model, base, bench, mode, par), pv in sorted(by_base.items(), key=lambda kv: tuple(map(str, kv[0]))):
        if len(pv) < 2:
            continue
        vals = np.array([pv[k] for k in sorted(pv)], dtype=float)
        q1, q3 = np.nanpercentile(vals, [25, 75])
        variants.append({"model": model, "setting": base, "benchmark": bench, "mode": mode, "paradigm": par,
                         "per_variant": {str(k): pv[k] for k in sorted(pv)}, "mean": float(np.nanmean(vals)),
                         "std": float(np.nanstd(vals, ddof=1)), "iqr": float(q3 - q1),
                         "min": float(np.nanmin(vals)), "max": float(np.nanmax(vals))})
    models = sorted({r["model"] for r in results})
    correlations = []
    for setting in sorted({r["setting"] for r in results}):
        for bench in cfg.benchmarks:
            for par in ("iso", "cmp"):
                rows = {r["model"]: r[par] for r in results if r["setting"] == setting and r["benchmark"] == bench
                        and r["mode"] == "expected" and r[par]["n_pairs"]}
                ms = [m for m in models if m in rows]
                entry = {"setting": setting, "benchmark": bench, "paradigm": par, "n_models": len(ms)}
                pg = [rows[m]["pg"] for m in ms]
                sizes = [cfg.params_b.get(m, np.nan) for m in ms]
                ok = [i for i, x in enumerate(sizes) if np.isfinite(x)]
                entry["pearson_pg_params"] = pearson([pg[i] for i in ok], [sizes[i] for i in ok])
                ns = [rows[m]["neutral_share"] for m in ms]
                if all(np.isfinite(ns)) and ns:
                    # seed 003 Table E.1: does ranking by neutral share agree with ranking by (low) |PG|?
                    entry["kendall_neutral_vs_abs_pg"] = kendall_tau(ns, [-abs(x) for x in pg])
                correlations.append(entry)
    return {"models": models, "benchmarks": list(cfg.benchmarks), "settings": sorted({r["setting"] for r in results}),
            "max_pairs": cfg.max_pairs, "seed": cfg.seed, "alpha": cfg.alpha, "n_iter": cfg.n_iter,
            "n_boot": cfg.n_boot, "n_records": len(records), "nonfinite_records": nonfinite,
            "results": results, "comparisons": comparisons,
            "variants": variants, "correlations": correlations}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--models", nargs="*", help="run only these models of the config (e.g. one per process)")
    ap.add_argument("--no-report", action="store_true", help="score only; write no summary/tables")
    ap.add_argument("--report-only", action="store_true", help="summarize the records already written")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    infos: dict[str, dict] = {}
    if not args.report_only:
        for m in args.models or cfg.models:
            infos[m] = run_model(cfg, m, out)
    if args.no_report:
        return 0
    records: list[dict] = []
    for f in sorted((out / "records").glob("*.jsonl")):
        records.extend(read_records(f)[0])
    summary = build_summary(records, cfg)
    write_json_atomic(out / "summary.json", summary)
    from probe.reports.cmp_iso_tables import write_report

    write_report(summary, out)
    print(f"[cmp_iso] wrote {out}/summary.json, tables/ and pg_iso_vs_cmp.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
