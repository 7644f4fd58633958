"""The published parse rate and answer shares of iso/cmp against transformers' ``generate``, prompt by prompt.

For each temperature (the authors' T = 0.7 and T = 0.8, top-p 0.9) the sampling check's stratified sample of
direct-setting prompts is enumerated by the task's own parse stage (``parse_tail: hybrid``, as ``probe run``
runs it) and sampled ``--draws`` times by ``generate`` (the authors' sampler, the same extractor). Per prompt
and per row (the parse rate, each offered label's share of all generations) the published value and its 95 %
interval (:func:`probe.metrics.hybrid.prompt_estimate`) are set against the ``generate`` share:
``z = (published - generate) / sqrt(se_published^2 + se_generate^2)``, and whether the interval covers it.

Two steps, so the statistics can be recomputed from the saved draws without sampling again::

    python experiments/cmp_iso/hybrid_vs_generate.py sample --temperature 0.8 --out /tmp/v55/t08.json
    python experiments/cmp_iso/hybrid_vs_generate.py table /tmp/v55/t08.json /tmp/v55/t07.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def sample(args: argparse.Namespace) -> None:
    """Enumerate and sample the check's prompts at one temperature; write the raw per-prompt data."""
    from probe.runs.options import RunOptions, load
    from probe.runs.runner import Runner
    from probe.studies.sampling_check.check import paper_check_of
    from probe.studies.sampling_check.exact import _cases
    from probe.studies.sampling_check.judge import judge_texts

    task, check = paper_check_of("cmp_iso")
    base = check.config

    def config(t: object, n: int, seed: int, budget: object) -> object:  # the check's sample at this temperature
        cfg = base(t, n, seed, budget)
        return t.make_config({**{k: getattr(cfg, k) for k in ("benchmarks", "max_pairs", "seed", "settings")},
                              "paper_temperature": args.temperature, "paper_top_p": args.top_p})

    check.config = config
    options = RunOptions(device="cpu", threads=args.threads, progress=False)
    runner = Runner(load(args.model, options), options)
    cases, settings = _cases(task, check, runner, args.n_prompts, args.seed, None)
    texts = judge_texts(runner.lm, [c.prompt for c in cases], args.draws, args.seed, settings,
                        int(settings["max_new_tokens"]), keys=[c.id for c in cases])
    rows = []
    for c, gen in zip(cases, texts):
        labels = [check.parse(c, t) for t in gen]
        rows.append({"id": c.id, "options": list(c.options), "parsed": c.meta["parsed"],
                     "generate": {o: sum(1 for x in labels if x == i) for i, o in enumerate(c.options)},
                     "draws": len(gen)})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"temperature": args.temperature, "top_p": args.top_p,
                                          "model": args.model, "settings": settings, "prompts": rows}))


def compare(path: str) -> list[dict]:
    """One row per prompt and quantity (parse rate, each label's share): published, interval, generate, z."""
    from probe.metrics.hybrid import prompt_estimate
    from probe.studies.sampling_check.rows import generate_z

    data = json.loads(Path(path).read_text())
    out = []
    for p in data["prompts"]:
        n = int(p["draws"])
        est = prompt_estimate(p["parsed"], p["options"])
        paper = prompt_estimate(p["parsed"], p["options"], k=data["settings"].get("k_paper", 25))
        if est is None:
            continue
        gen = {**{o: p["generate"][o] / n for o in p["options"]}}
        gen["parse rate"] = sum(p["generate"].values()) / n
        for q, (point, lo, hi, se) in est.items():
            g = gen[q]
            z = generate_z(point, se, g, n)  # the generate share's own noise included, never zero
            _p, klo, khi, _se = paper[q]
            out.append({"T": data["temperature"], "id": p["id"], "quantity": q, "published": point, "lo": klo,
                        "hi": khi, "tail_lo": lo, "tail_hi": hi, "generate": g, "z": z,
                        "covered": klo - 1e-12 <= g <= khi + 1e-12,
                        "tail_covered": lo - 1e-12 <= g <= hi + 1e-12,
                        "n_tail": int((p["parsed"].get("hybrid") or {}).get("n_tail", 0)),
                        "residual": float(p["parsed"]["residual"])})
    return out


def table(args: argparse.Namespace) -> None:
    """The per-temperature summary and the per-prompt parse-rate table, as Markdown."""
    rows = [r for path in args.files for r in compare(path)]
    print("| T | rows | prompts | \\|z\\| <= 2 | mean z | K-sample interval covers generate | tail-only "
          "interval covers generate |")
    print("|---|---|---|---|---|---|---|")
    for t in sorted({r["T"] for r in rows}):
        mine = [r for r in rows if r["T"] == t]
        ok = sum(abs(r["z"]) <= 2 for r in mine)
        cov = sum(r["covered"] for r in mine)
        tcov = sum(r["tail_covered"] for r in mine)
        print(f"| {t:g} | {len(mine)} | {len({r['id'] for r in mine})} | {ok} ({ok / len(mine):.0%}) | "
              f"{sum(r['z'] for r in mine) / len(mine):+.2f} | {cov} ({cov / len(mine):.0%}) | "
              f"{tcov} ({tcov / len(mine):.0%}) |")
    print()
    print("| T | prompt | residual | tail draws | parse rate published [95 %, K = 25] | generate | z |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["quantity"] == "parse rate":
            print(f"| {r['T']:g} | {r['id']} | {r['residual']:.3f} | {r['n_tail']} | {r['published']:.3f} "
                  f"[{r['lo']:.3f}, {r['hi']:.3f}] | {r['generate']:.3f} | {r['z']:+.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--model", default="smollm2")
    s.add_argument("--temperature", type=float, required=True)
    s.add_argument("--top-p", type=float, default=0.9)
    s.add_argument("--n-prompts", type=int, default=24)
    s.add_argument("--draws", type=int, default=200)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--out", required=True)
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    t.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    (sample if args.cmd == "sample" else table)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
