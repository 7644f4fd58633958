"""Captured residuals vs a plain forward's hidden states, per layer, packed pass vs level path.

    python benchmarks/capture_exactness.py --threads 1 --items 8
    python benchmarks/capture_exactness.py --threads 2 --items 8

Captures ``resid_post`` of every layer at the last prompt token of BBQ requests (the vs_lm_eval
workload, SmolLM2, float32) in the scorer's own passes (prefix sharing on), once on the packed pass and
once on the level-by-level path (``Scorer.packed = False``), and compares each with
``output_hidden_states`` of a plain forward of that prompt alone (every block but the last, whose entry
there is after the final norm). Prints, per layer, the largest
``|captured - plain| / (1 + |plain|)`` over every element of every request, for both paths, then the
largest ``|plain|`` of that layer and the norm-wise error (``max |captured - plain| / max |plain|`` per vector) (how large its residual stream grows) and the row length the packed
pass ran.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PROBE_DATA", str((ROOT.parent / "shared" / "data").resolve()))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
import torch  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    from gpu import bbq_workload

    from probe.activations.scoring_capture import CaptureSpec
    from probe.models import load_model
    from probe.scoring import Scorer

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--items", type=int, default=8, help="BBQ items (2 requests each)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    lm = load_model(args.model, device="cpu", dtype="float32")
    reqs, _ = bbq_workload(lm.tokenizer, args.items, "Age,Nationality,Religion")
    # the last entry of output_hidden_states is after the final norm, the last block's resid_post before it:
    # every block but the last is compared
    n_layers = lm.model.config.num_hidden_layers - 1
    layers = ",".join(str(i) for i in range(n_layers))
    spec = CaptureSpec.parse(f"blocks.{layers}.hook_resid_post@last", n_layers=n_layers + 1)
    out: dict = {"threads": args.threads, "requests": len(reqs), "layers": {}}
    got = {}
    for label, packed in (("packed", True), ("level", False)):
        scorer = Scorer(lm)
        scorer.packed = packed
        widths: list[int] = []
        if packed:
            real = scorer.driver._packed_pass
            scorer.driver._packed_pass = lambda a, *rest: (widths.append(a.ids.shape[1]), real(a, *rest))[1]
        got[label] = scorer.score(reqs, capture=spec)
        out[f"{label}_row_widths"] = widths
    enc = Scorer(lm).encode
    worst = {k: np.zeros(n_layers) for k in ("packed", "level")}
    normwise = {k: np.zeros(n_layers) for k in ("packed", "level")}  # max |delta| / max |plain| of the vector
    scale = np.zeros(n_layers)
    with torch.inference_mode():
        for i, r in enumerate(reqs):
            e = enc(r)
            prompt = e.sequences[0].ids[: e.n_prompt_tokens]
            hs = lm.model(torch.tensor([prompt]), output_hidden_states=True).hidden_states
            for layer in range(n_layers):
                ref = hs[layer + 1][0, -1].numpy()
                scale[layer] = max(scale[layer], float(np.abs(ref).max()))
                for label in worst:
                    vec = got[label][i].activations[f"blocks.{layer}.hook_resid_post@last"]
                    worst[label][layer] = max(worst[label][layer], float((np.abs(vec - ref) / (1 + np.abs(ref))).max()))
                    normwise[label][layer] = max(normwise[label][layer],
                                                 float(np.abs(vec - ref).max() / np.abs(ref).max()))
    for layer in range(n_layers):
        out["layers"][layer] = {"packed": worst["packed"][layer], "level": worst["level"][layer],
                                "packed_normwise": normwise["packed"][layer], "level_normwise": normwise["level"][layer],
                                "max_abs_ref": scale[layer]}
        print(f"layer {layer:2d}: packed {worst['packed'][layer]:.2e}  level {worst['level'][layer]:.2e}  "
              f"max |ref| {scale[layer]:.1f}  normwise packed {normwise['packed'][layer]:.1e} "
              f"level {normwise['level'][layer]:.1e}")
    print(f"threads {args.threads}, {len(reqs)} requests, packed rows {out['packed_row_widths']}; "
          f"worst packed {worst['packed'].max():.2e} (layer {int(worst['packed'].argmax())}), "
          f"level {worst['level'].max():.2e} (layer {int(worst['level'].argmax())})")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
