"""Pool several seeds of ImplicitBBQ's sampling check: is a metric that leans one way chance, or a shift?

    python experiments/implicitbbq/pool_seeds.py runs/validate_implicitbbq_s0 runs/validate_implicitbbq_s1 ...

Each folder is one ``probe validate sampling implicitbbq ... --output DIR`` run (its ``check.json``), all with the
same ``--n-prompts`` (recorded in ``check.json``; for older runs, default 100, else pass ``--n-prompts``). Prints, per metric, where each seed's sampled
value falls among the exact side's draws on that seed's prompts (as a z: 0 at their median), the seeds pooled
(Stouffer: the z's sum over the square root of their count) and its two-sided p, with Bonferroni's correction
over the metrics. Then, per context kind, the disambiguated prompts' parsed generations: answers correct,
Unknown and wrong against what the exact distributions give for the same generations, and the parsed
generations against the exact side's parse rate. These read the prompts one at a time, so a shift in the
aggregate with none here comes from which prompts the samples read, which the draws already hold.

The draws are those of the check's verdict (``probe.studies.sampling_check.check.predicted_draws``), redrawn
here with ``--draws`` per seed, so runs written before ``check.json`` held ``sampled_quantile`` pool too.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np


def load_checks(dirs: list[Path], n_prompts: int) -> list[tuple[dict, list]]:
    """Each folder's check.json and its prompts as the check's cases (metric fields from the task's requests,
    rebuilt from the seed and ``n_prompts``); one-line errors for a missing file or another sample."""
    from probe.errors import ProbeError
    from probe.models.loader import load_model
    from probe.studies.sampling_check.check import paper_check_of
    from probe.tasks.paper_check import PromptCase

    out, tok = [], None
    for d in dirs:
        path = d / "check.json"
        if not path.is_file():
            raise ProbeError(f"{path}: no such file (give the --output folders of `probe validate sampling`)")
        check = json.loads(path.read_text())
        if check.get("task") != "implicitbbq":
            raise ProbeError(f"{path}: task {check.get('task')!r}, not implicitbbq")
        task, paper = paper_check_of("implicitbbq")
        if tok is None:
            tok = load_model(check["model"], device="cpu").tokenizer
        n = int(check["settings"].get("n_prompts", n_prompts))  # runs before it was recorded: the option
        cfg = paper.config(task, n, int(check["settings"]["seed"]), None)
        items = list(task.selection.select(cfg, task.items(cfg), None))
        meta = {r.id: dict(r.meta) for r in paper.requests(task, cfg, items, tok)}
        missing = [r["id"] for r in check["prompts"] if r["id"] not in meta]
        if missing:
            raise ProbeError(f"{path}: prompt {missing[0]!r} is not in the seed's sample at --n-prompts {n}; "
                             "give the run's --n-prompts")
        cases = [PromptCase(id=r["id"], unit=r["unit"], prompt="", options=tuple(r["options"]),
                            exact=r["exact_probs"], exact_mass=float(r["exact_counted_share"]), meta=meta[r["id"]])
                 for r in check["prompts"]]
        out.append((check, cases))
    return out


def pooled_quantiles(checks: list[tuple[dict, list]], draws: int) -> dict[str, list[float]]:
    """Per metric, each seed's sampled value's mid-rank quantile among ``draws`` fresh draws of its verdict."""
    from probe.studies.sampling_check.check import draw_quantile, paper_check_of, predicted_draws

    _task, paper = paper_check_of("implicitbbq")
    out: dict[str, list[float]] = {}
    for check, cases in checks:
        rng = np.random.default_rng(int(check["settings"]["seed"]) + 10_000)
        dr = predicted_draws(paper, paper.units(cases), int(check["settings"]["k"]), rng, draws)
        for m, a in check["aggregate"].items():
            if not m.startswith("n"):
                out.setdefault(m, []).append(draw_quantile(float(a["sampled"]), dr[m]))
    return out


def answer_counts(checks: list[tuple[dict, list]]) -> dict[str, np.ndarray]:
    """Per context kind, over the disambiguated prompts' parsed generations: rows observed, expected and
    variance; columns correct, Unknown, wrong (expected from each prompt's exact answer given a parse)."""
    out: dict[str, np.ndarray] = {}
    for check, cases in checks:
        rows = {r["id"]: r for r in check["prompts"]}
        for c in cases:
            m, r = c.meta, rows[c.id]
            if m["context_condition"] != "disambig" or c.exact is None:
                continue
            lab, unk = int(m["label"]), int(m["unknown_index"])
            roles = [lab, unk, ({0, 1, 2} - {lab, unk}).pop()]
            seen = [c.options.index(x) for x in r["parsed"] if x is not None]
            n = len(seen)
            p = np.asarray(c.exact, float)[roles]
            t = out.setdefault(m["context_kind"], np.zeros((3, 3)))
            t[0] += [sum(s == j for s in seen) for j in roles]
            t[1] += n * p
            t[2] += n * p * (1 - p)
    return out


def parse_counts(checks: list[tuple[dict, list]]) -> dict[str, tuple[float, float, float]]:
    """Per context kind: parsed generations observed, expected from the exact parse rate, and variance."""
    out: dict[str, list[float]] = {}
    for check, cases in checks:
        k = int(check["settings"]["k"])
        rows = {r["id"]: r for r in check["prompts"]}
        for c in cases:
            a = min(1.0, max(0.0, c.exact_mass))
            t = out.setdefault(c.meta["context_kind"], [0.0, 0.0, 0.0])
            t[0] += sum(x is not None for x in rows[c.id]["parsed"])
            t[1] += k * a
            t[2] += k * a * (1 - a)
    return {kind: (t[0], t[1], t[2]) for kind, t in out.items()}


def report(checks: list[tuple[dict, list]], draws: int) -> str:
    from scipy.stats import norm

    seeds = [int(c["settings"]["seed"]) for c, _ in checks]
    q = pooled_quantiles(checks, draws)
    lines = [f"Seeds {', '.join(map(str, seeds))}: per metric, the sampled value's place among {draws} draws of "
             "the exact side on that seed's prompts (z; 0 = their median), pooled (Stouffer).", "",
             "| metric | " + " | ".join(f"seed {s}" for s in seeds) + " | pooled z | p | p x metrics |",
             "|---|" + "---|" * len(seeds) + "---|---|---|"]
    for m, qs in q.items():
        z = [float(norm.ppf(min(max(x, 0.5 / draws), 1 - 0.5 / draws))) for x in qs]
        pooled = sum(z) / math.sqrt(len(z))
        p = 2 * float(norm.sf(abs(pooled)))
        lines.append(f"| {m} | " + " | ".join(f"{x:+.2f}" for x in z)
                     + f" | {pooled:+.2f} | {p:.3f} | {min(1.0, p * len(q)):.3f} |")
    lines += ["", "Disambiguated prompts, parsed generations (observed / expected from the exact answer given a "
              "parse, z):", "", "| context | correct | Unknown | wrong | parsed / expected from the parse rate |",
              "|---|---|---|---|---|"]
    counts, parses = answer_counts(checks), parse_counts(checks)
    for kind, t in sorted(counts.items()):
        cells = [f"{o:.0f} / {e:.1f} ({(o - e) / math.sqrt(v):+.2f})" if v > 0 else f"{o:.0f} / {e:.1f}"
                 for o, e, v in zip(*t)]
        o, e, v = parses[kind]
        lines.append(f"| {kind} | " + " | ".join(cells) + f" | {o:.0f} / {e:.1f} ({(o - e) / math.sqrt(v):+.2f}) |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="--output folders of `probe validate sampling implicitbbq`")
    ap.add_argument("--n-prompts", type=int, default=100, help="the runs' --n-prompts (default 100)")
    ap.add_argument("--draws", type=int, default=4000, help="draws of the exact side per seed (default 4000)")
    args = ap.parse_args()
    from probe.errors import ProbeError

    try:
        print(report(load_checks(args.dirs, args.n_prompts), args.draws))
    except ProbeError as exc:
        print(f"pool_seeds: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
