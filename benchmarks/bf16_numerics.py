"""bfloat16 against float32: how far the scores move, and how often the answer changes.

On the BBQ requests of ``benchmarks/vs_lm_eval.py`` (each question as three
answer texts scored by continuation log-likelihood, and as A/B/C letters scored
as labels), one model is scored twice: in float32 and in bfloat16 (the same
weights, cast). Reported:

- label requests: max and 99th-percentile |delta p| over every label
  probability, and argmax agreement (the predicted letter);
- continuation requests: max |delta log-likelihood| per option, the same per
  token, and argmax agreement (the chosen answer text);
- where the float32 argmax and runner-up are within 0.01 in probability (label)
  or 0.05 nats (continuation), so a flip there is a near tie.

The tolerances stated in ``docs/scoring.md`` come from this script and the
tiny-model tests (``tests/unit/test_bf16.py``). bfloat16 matrix products run
on the CPU too, so the numbers do not need a GPU (``--device cuda`` on one).

    python benchmarks/bf16_numerics.py --limit 48 --threads 2

The last line is ``label_max_dp=X label_argmax_agree=A cont_max_dll_per_token=Y cont_argmax_agree=B``.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PROBE_DATA", str((ROOT.parent / "shared" / "data").resolve()))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402


def cast(lm: Any, dtype: str) -> Any:
    """A copy of ``lm`` with its weights cast to ``dtype`` (same tokenizer, same weights rounded)."""
    out = copy.copy(lm)
    out.model = copy.deepcopy(lm.model).to(getattr(torch, dtype))
    out.dtype = dtype
    return out


def _argmax(xs: Sequence[float]) -> int:
    return max(range(len(xs)), key=lambda i: (xs[i], -i))


def compare(ref: Sequence[Any], low: Sequence[Any], tie_p: float = 0.01, tie_ll: float = 0.05) -> dict:
    """Compare aligned results (float32 ``ref``, low precision ``low``) of label and continuation requests."""
    from probe.scoring.requests import ContinuationResult, LabelResult

    dp: list[float] = []
    dll: list[float] = []
    dll_tok: list[float] = []
    lab = {"n": 0, "agree": 0, "near_ties": 0, "flips_at_near_ties": 0}
    cont = {"n": 0, "agree": 0, "near_ties": 0, "flips_at_near_ties": 0}
    for r, s in zip(ref, low):
        if r.id != s.id:
            raise ValueError(f"results not aligned: {r.id!r} vs {s.id!r}")
        if isinstance(r, LabelResult):
            vals_r, vals_s, tie, bucket = r.probs, s.probs, tie_p, lab
            dp += [abs(x - y) for x, y in zip(r.probs, s.probs)]
        elif isinstance(r, ContinuationResult):
            vals_r, vals_s, tie, bucket = r.logprobs, s.logprobs, tie_ll, cont
            dll += [abs(x - y) for x, y in zip(r.logprobs, s.logprobs)]
            dll_tok += [abs(x - y) / max(1, n) for x, y, n in zip(r.logprobs, s.logprobs, r.token_counts)]
        else:
            continue
        top = sorted(vals_r, reverse=True)
        near = len(top) > 1 and top[0] - top[1] < tie
        same = _argmax(vals_r) == _argmax(vals_s)
        bucket["n"] += 1
        bucket["agree"] += same
        bucket["near_ties"] += near
        bucket["flips_at_near_ties"] += near and not same

    def q(xs: list[float], p: float) -> float:
        if not xs:
            return math.nan
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(p * len(xs)))]

    return {
        "label": {**lab, "agreement": lab["agree"] / lab["n"] if lab["n"] else math.nan,
                  "max_abs_dp": max(dp, default=math.nan), "p99_abs_dp": q(dp, 0.99)},
        "continuation": {**cont, "agreement": cont["agree"] / cont["n"] if cont["n"] else math.nan,
                         "max_abs_dll": max(dll, default=math.nan), "p99_abs_dll": q(dll, 0.99),
                         "max_abs_dll_per_token": max(dll_tok, default=math.nan),
                         "p99_abs_dll_per_token": q(dll_tok, 0.99)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--limit", type=int, default=48, help="BBQ questions (each: 3 answer texts + A/B/C letters)")
    ap.add_argument("--categories", default="Age,Nationality,Religion")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--low", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from vs_lm_eval import probe_requests, select_items

    from probe.models import load_model
    from probe.scoring import Scorer

    lm = load_model(args.model, device=args.device, dtype="float32")
    low = cast(lm, args.low)
    items = select_items(args.categories.split(","), args.limit)
    reqs = probe_requests(lm.tokenizer, items)
    t = time.perf_counter()
    ref = Scorer(lm, batch_size=16).score(reqs)
    t32 = time.perf_counter() - t
    t = time.perf_counter()
    got = Scorer(low, batch_size=16).score(reqs)
    t16 = time.perf_counter() - t
    out = {"model": args.model, "device": args.device, "low": args.low, "questions": len(items),
           "requests": len(reqs), "seconds": {"float32": round(t32, 2), args.low: round(t16, 2)},
           "torch": torch.__version__, "threads": torch.get_num_threads(), **compare(ref, got)}
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    lab, cont = out["label"], out["continuation"]
    print(f"label_max_dp={lab['max_abs_dp']:.2e} label_argmax_agree={lab['agree']}/{lab['n']} "
          f"cont_max_dll_per_token={cont['max_abs_dll_per_token']:.2e} cont_argmax_agree={cont['agree']}/{cont['n']}")


if __name__ == "__main__":
    main()
