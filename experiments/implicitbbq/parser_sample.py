"""The hand-read parser sample: the most probable generations of ImplicitBBQ's one-word prompts, as the exact
parse enumerates them (the paper's T = 0.1, the task's parse settings), each with its parsed answer.

    python experiments/implicitbbq/parser_sample.py --model smollm2 --prompts 20 --top 3 --max-nodes 64 \
        --out sample_smollm2.jsonl

Writes one JSON line per generation: model, prompt id, strategy, the item's options and Unknown index, the
generation's text and enumerated mass, and the option the parser reads (or null). The reader labels each line
by hand (a ``label`` field) and ``--agreement`` compares the labels with the parser.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def sample(model: str, per_cell: int, top: int, seed: int, threads: int, prompts: int | None,
           max_nodes: int | None) -> list[dict]:
    from probe.runs.options import RunOptions, load
    from probe.scoring.parse.exact import run_parse_requests
    from probe.tasks import get

    task = get("implicitbbq")
    strategies = ["zero_shot", "safety"]
    cfg = task.make_config({"strategies": strategies, "answer_formats": ["oneword"],
                            "context_kinds": ["explicit", "implicit"], "seed": seed,
                            "per_cell": {s: per_cell for s in strategies},
                            **({} if max_nodes is None else {"parse_max_nodes": max_nodes})})
    lm = load(model, RunOptions(device="cpu", threads=threads, progress=False))
    items = list(task.selection.select(cfg, task.items(cfg), None))
    reqs = task.paper.parse_requests(cfg, items, lm.tokenizer)
    if prompts is not None and prompts < len(reqs):  # evenly spaced over the (stratified) requests
        reqs = [reqs[round(i * len(reqs) / prompts)] for i in range(prompts)]
    dists = run_parse_requests(lm, reqs, top=top)
    rows = []
    for r, d in zip(reqs, dists):
        options, unknown = json.loads(r.parser_name.split(":", 1)[1])
        for g in d.top[:top]:
            text, mass, answer = g if isinstance(g, (tuple, list)) else (g["text"], g["mass"], g["answer"])
            rows.append({"model": model, "id": r.id, "strategy": r.meta["kind"].split("/")[0], "options": options,
                         "unknown_index": unknown, "text": text, "mass": float(mass),
                         "parsed": None if answer is None else int(answer)})
    return rows


def agreement(path: Path) -> dict:
    """Agreement of the hand labels with the parser (share of lines, and mass-weighted), per model and overall;
    re-parses each text with the current parser."""
    from probe.tasks.implicitbbq.parse import parse_oneword

    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    out = {}
    for name in sorted({r["model"] for r in rows}) + ["all"]:
        mine = [r for r in rows if name in ("all", r["model"])]
        same = [parse_oneword(r["text"], r["options"], r["unknown_index"]) == r["label"] for r in mine]
        mass = sum(r["mass"] for r in mine)
        out[name] = {"n": len(mine), "agreement": sum(same) / len(mine),
                     "mass_weighted": sum(r["mass"] for r, s in zip(mine, same) if s) / mass,
                     "disagreements": [(r["text"], r["options"], r["label"]) for r, s in zip(mine, same) if not s]}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--per-cell", type=int, default=1)
    p.add_argument("--top", type=int, default=3, help="generations kept per prompt (the most probable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompts", type=int, default=None, help="at most this many prompts, evenly spaced")
    p.add_argument("--max-nodes", type=int, default=None,
                   help="node cap per prompt (default: the task's); the enumeration is best-first, so the most "
                   "probable generations come first")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path)
    p.add_argument("--agreement", type=Path, help="a labelled sample: print the agreement and stop")
    a = p.parse_args(argv)
    if a.agreement:
        print(json.dumps(agreement(a.agreement), indent=1))
        return 0
    rows = sample(a.model, a.per_cell, a.top, a.seed, a.threads, a.prompts, a.max_nodes)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if a.out:
        a.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
