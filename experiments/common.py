"""Shared driver of the studies under experiments/ (never imported by the package).

A study directory holds ``configs/study.yaml``::

    name: ImplicitBBQ
    runs:                                  # one `probe run` per entry and model
      - name: implicitbbq
        config: implicitbbq.yaml           # the paper-scale config (relative to configs/)
        quick: {config: ../../../configs/implicitbbq_quick.yaml, set: {strategies: [zero_shot]}, limit: null}
    models:                                # the paper's open-weight models
      - {name: Llama-3.1-8B-Instruct, hub_id: meta-llama/Llama-3.1-8B-Instruct, params_b: 8.0}
    quick_models: [smollm2, gemma3-270m]

``python experiments/<study>/run.py`` runs every run for every paper model (on a GPU:
add ``--device cuda``), then ``probe report`` over all of them; ``--quick`` runs the
quick configs on the small built-in models on this CPU. Each run resumes when re-run.
After the runs, ``gpu_estimate.json`` projects the full study's GPU time from the
measured work per item (see :func:`gpu_estimate`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

#: sustained dense bf16 throughput assumed for one H100 in a forward pass (40 % of its 989 TFLOP/s peak)
H100_FLOPS = 0.4 * 989e12


def load_study(study_dir: Path) -> dict:
    with open(study_dir / "configs" / "study.yaml", encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _set_args(values: dict | None) -> list[str]:
    out = []
    for k, v in (values or {}).items():
        out += ["--set", f"{k}={json.dumps(v) if not isinstance(v, str) else v}"]
    return out


def commands(study_dir: Path, quick: bool, models: list[str], output: Path, extra: list[str]) -> list[list[str]]:
    """The ``probe run`` command lines of the study (one per run x model)."""
    study = load_study(study_dir)
    cmds = []
    for run in study["runs"]:
        spec = run.get("quick", {}) if quick else {}
        config = (study_dir / "configs" / (spec.get("config") or run["config"])).resolve()
        for m in models:
            label = Path(m).name.replace("/", "_")
            cmd = ["probe", "run", str(config), "--model", m, "--output", str(output / f"{run['name']}_{label}")]
            cmd += _set_args(run.get("set")) + _set_args(spec.get("set"))
            if spec.get("limit"):
                cmd += ["--limit", str(spec["limit"])]
            cmds.append(cmd + extra)
    return cmds


def run_study(study_dir: Path, argv: list[str] | None = None) -> int:
    study = load_study(study_dir)
    p = argparse.ArgumentParser(description=f"Run the {study['name']} study: probe run per model, then probe report.")
    p.add_argument("--quick", action="store_true", help="the quick configs on smollm2 and gemma3-270m (this CPU)")
    p.add_argument("--models", nargs="+", default=None,
                   help="models (default: the paper's hub ids, or the quick models with --quick)")
    p.add_argument("--output", type=Path, default=None, help="runs directory (default: runs/<study>[_quick])")
    p.add_argument("--dry-run", action="store_true", help="print the commands only")
    p.add_argument("--shards", type=int, default=1, metavar="N",
                   help="split every (run, model) into N `--shard I/N` jobs (with --jobs or --dry-run)")
    p.add_argument("--jobs", type=Path, default=None, metavar="DIR",
                   help="write the study as jobs for an external scheduler instead of running it: DIR/jobs.jsonl "
                        "(one JSON line per job: phase, run, model, shard, output, argv, cmd), DIR/array.txt (the "
                        "phase-1 commands, one line per job: a Slurm array's or Ray's task list) and "
                        "DIR/finalize.txt (after the array: fold each run's shards and write its summary, then "
                        "probe report over all run directories); see docs/parallel.md")
    p.add_argument("--no-report", action="store_true", help="skip probe report")
    p.add_argument("extra", nargs=argparse.REMAINDER,
                   help="after --: options for every probe run (e.g. -- --device cuda --dtype bfloat16)")
    args = p.parse_args(argv)
    extra = [a for a in args.extra if a != "--"]
    if args.quick:
        models = args.models or study["quick_models"]
        extra = extra or ["--threads", "1", "--no-progress"]
    else:
        models = args.models or [m["hub_id"] for m in study["models"]]
    output = args.output or Path("runs") / (study_dir.name + ("_quick" if args.quick else ""))
    if args.shards < 1:
        p.error("--shards must be >= 1")
    cmds = commands(study_dir, args.quick, models, output, extra)
    report = ["probe", "report", *sorted({c[c.index("--output") + 1] for c in cmds}), "--output", str(output / "report")]
    if args.jobs is not None or (args.dry_run and args.shards > 1):
        jobs = job_list(cmds, report, args.shards)
        if args.jobs is not None:
            write_jobs(args.jobs, jobs)
            n1 = sum(j["phase"] == 1 for j in jobs)
            print(f"{args.jobs}/jobs.jsonl: {n1} array job(s) ({len(cmds)} run x model, {args.shards} shard(s) each), "
                  f"then {len(jobs) - n1} finalize command(s) in {args.jobs}/finalize.txt", file=sys.stderr)
        else:
            for j in jobs:
                print(j["cmd"])
        return 0
    if args.dry_run:
        for c in cmds + [report]:
            print(shlex.join(c))
        return 0
    # a source checkout reads the benchmark data beside it, as the tests and benchmarks do; PROBE_DATA wins.
    # Set here, not only for the subprocesses: the GPU-time estimate below builds the items in this process.
    shared = (study_dir.resolve().parents[1].parent / "shared" / "data")
    if "PROBE_DATA" not in os.environ and shared.is_dir():
        os.environ["PROBE_DATA"] = str(shared)
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    walls = {}
    for c in cmds + ([] if args.no_report else [report]):
        print("+", shlex.join(c), flush=True)
        t = time.perf_counter()
        rc = subprocess.run(c, env=env).returncode
        if rc:  # probe has said why; a traceback from here would only hide it
            print(f"{study['name']}: stopped, `{shlex.join(c[:3])} ...` exited with {rc} "
                  "(re-running this command resumes the finished runs)", file=sys.stderr)
            return rc
        if c is not report:
            walls[c[c.index("--output") + 1]] = round(time.perf_counter() - t, 1)
    output.mkdir(parents=True, exist_ok=True)
    (output / "wall_seconds.json").write_text(json.dumps(walls, indent=1) + "\n")
    if args.quick:
        est = gpu_estimate(study_dir, output, models)
        (output / "gpu_estimate.json").write_text(json.dumps(est, indent=1) + "\n")
        print(json.dumps(est["total"], indent=1))
    return 0


def job_list(cmds: list[list[str]], report: list[str], shards: int) -> list[dict]:
    """The study as independent jobs: phase 1, one per (run, model, shard) (any order, any machine that sees
    the output directory); phase 2, per (run, model), the same command without ``--shard`` (folds the complete
    shard set and writes the summary; scores nothing); phase 3, ``probe report`` over every run directory."""
    jobs: list[dict] = []
    for cmd in cmds:
        out = cmd[cmd.index("--output") + 1]
        model = cmd[cmd.index("--model") + 1]
        run = Path(out).name
        for i in range(shards):
            argv = cmd + (["--shard", f"{i}/{shards}"] if shards > 1 else [])
            jobs.append({"job": len(jobs), "phase": 1, "run": run, "model": model,
                         "shard": f"{i}/{shards}" if shards > 1 else None, "output": out, "argv": argv,
                         "cmd": shlex.join(argv)})
    if shards > 1:
        for cmd in cmds:
            out = cmd[cmd.index("--output") + 1]
            jobs.append({"job": len(jobs), "phase": 2, "run": Path(out).name, "model": cmd[cmd.index("--model") + 1],
                         "shard": None, "output": out, "argv": cmd, "cmd": shlex.join(cmd)})
    jobs.append({"job": len(jobs), "phase": 3, "run": None, "model": None, "shard": None,
                 "output": report[-1], "argv": report, "cmd": shlex.join(report)})
    return jobs


def write_jobs(directory: Path, jobs: list[dict]) -> None:
    """``jobs.jsonl``, ``array.txt`` (phase 1, line k = array task k, 0-based: ``sed -n "$((K+1))p"``) and
    ``finalize.txt`` (phases 2 and 3, in order)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "jobs.jsonl").write_text("".join(json.dumps(j) + "\n" for j in jobs), encoding="utf-8")
    (directory / "array.txt").write_text("".join(j["cmd"] + "\n" for j in jobs if j["phase"] == 1), encoding="utf-8")
    (directory / "finalize.txt").write_text("".join(j["cmd"] + "\n" for j in jobs if j["phase"] > 1),
                                            encoding="utf-8")


def _run_work(run_dir: Path) -> dict:
    """Measured work of one finished run: records, items, prompt (+ scored) tokens, seconds."""
    recs = [json.loads(line) for line in open(run_dir / "records.jsonl", encoding="utf-8") if line.strip()]
    tokens = 0
    for r in recs:
        tokens += int(r.get("n_prompt_tokens") or 0) + int(sum(r.get("token_counts") or []))
    timing = json.loads((run_dir / "timing.json").read_text()) if (run_dir / "timing.json").exists() else {}
    gens = run_dir / "generations.jsonl"
    n_gen = sum(1 for line in open(gens, encoding="utf-8") if line.strip()) if gens.exists() else 0
    return {"records": len(recs), "tokens": tokens, "generations": n_gen, "timing": timing}


def full_records(study_dir: Path, run: dict) -> int | None:
    """Records the paper-scale config makes, counted without a model (items x requests per item is
    taken from the quick run, so this counts items only)."""
    from probe.runs.config import read_config
    from probe.api import split_options
    from probe.tasks import get

    values = read_config(study_dir / "configs" / run["config"])
    task = get(values.pop("task"))
    for key in ("model", "models", "output"):
        values.pop(key, None)
    _, task_values = split_options(values)
    cfg = task.make_config(task_values)
    return len(task.selection.select(cfg, task.items(cfg), None))


def gpu_estimate(study_dir: Path, output: Path, quick_models: list[str]) -> dict:
    """GPU hours of the full study, projected from the quick runs' measured work.

    Per run: tokens per item measured on the quick run (smollm2's tokenizer; other
    tokenizers differ by some 10-30 %) x items of the paper-scale config x the
    measured computed-token ratio (``timing.json`` ``engine_all_invocations``:
    tokens the engine ran with prefix sharing / raw tokens) x 2 x the model's
    parameters = forward FLOPs, at :data:`H100_FLOPS`. Prefill-bound scoring
    only: generation (CoT chains, HBB-SG variations) is memory-bound and not in it.
    """
    from probe.tasks import get

    study = load_study(study_dir)
    out: dict[str, Any] = {"assumption": f"{H100_FLOPS / 1e12:.0f} TFLOP/s sustained on one H100 (40 % of bf16 dense "
                           "peak); forward FLOPs = 2 x params x tokens computed (raw tokens x the measured computed_ratio of prefix "
                           "sharing); prefill only (generation not included)",
                           "runs": {}, "total": {}}
    ref = quick_models[0]
    for run in study["runs"]:
        qdir = output / f"{run['name']}_{Path(ref).name}"
        if not (qdir / "records.jsonl").exists():
            continue
        work = _run_work(qdir)
        spec = run.get("quick", {})
        from probe.api import split_options
        from probe.runs.config import read_config

        qv = read_config((study_dir / "configs" / (spec.get("config") or run["config"])).resolve())
        task = get(qv.pop("task"))
        for key in ("model", "models", "output"):
            qv.pop(key, None)
        qv.update(spec.get("set") or {})
        qv.update(run.get("set") or {})
        _, qcfg_values = split_options(qv)
        qitems = task.selection.select(task.make_config(qcfg_values), task.items(task.make_config(qcfg_values)),
                                       spec.get("limit"))
        n_full = full_records(study_dir, run)
        tokens_per_item = work["tokens"] / max(len(qitems), 1)
        full_tokens = tokens_per_item * (n_full or 0)
        scored = work["timing"].get("scored_all_invocations", {})
        cpu_s = round(sum(float(v.get("seconds", 0)) for v in scored.values() if isinstance(v, dict)), 1) or None
        # the engine computes shared prompt prefixes once: only this fraction of the raw tokens runs
        ratio = (work["timing"].get("engine_all_invocations") or {}).get("computed_ratio") or 1.0
        entry = {"quick_items": len(qitems), "quick_records": work["records"], "quick_tokens": work["tokens"],
                 "quick_cpu_seconds": cpu_s, "full_items": n_full, "tokens_per_item": round(tokens_per_item, 1),
                 "full_tokens": int(full_tokens), "computed_ratio": ratio,
                 "full_tokens_computed": int(full_tokens * ratio), "gpu_hours": {}}
        for m in study["models"]:
            entry["gpu_hours"][m["name"]] = round(2 * m["params_b"] * 1e9 * full_tokens * ratio / H100_FLOPS / 3600, 2)
        out["runs"][run["name"]] = entry
    for m in study["models"]:
        out["total"][m["name"]] = round(sum(r["gpu_hours"][m["name"]] for r in out["runs"].values()), 2)
    out["total"]["all models"] = round(sum(v for k, v in out["total"].items()), 2)
    return out


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_study(Path(sys.argv[1]), sys.argv[2:]))
