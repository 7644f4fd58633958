"""CrowS-Pairs with a causal LM: share of pairs where ``sent_more`` gets the higher log-likelihood.

    python -m experiments.crows_pairs --config configs/crows_pairs.yaml

Each sentence is one perplexity request (no prefix; BOS as the tokenizer adds it
for raw text), so the metric uses the summed log-likelihood ``-nll`` of the whole
sentence, as lm-evaluation-harness's ``crows_pairs`` does. Resumable:
``crows_records.jsonl`` holds one record per sentence. Writes
``crows_summary.json`` and ``tables/crows.md|csv`` (overall and per bias type,
Wilson 95% CIs).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from probe.errors import ProbeError


@dataclass(frozen=True)
class CrowsConfig:
    """Experiment settings (YAML keys; unknown keys are rejected)."""

    model: str = "smollm2"
    device: str = "cpu"
    dtype: str = "float32"
    batch_size: int = 16
    threads: int | None = 1
    output_dir: str = "runs/crows_pairs"
    data_file: str | None = None  # default: dataset_dir("crows_pairs")/crows_pairs_anonymized.csv
    limit: int | None = None
    chunk_size: int = 128


def _record(result: Any) -> dict:
    pair_id, which = result.id.rsplit("|", 1)
    return {"id": result.id, "pair_id": pair_id, "which": which, "ll": -result.nll, "n_tokens": result.n_tokens,
            "finite": result.finite}


def pair_frame(pairs: Sequence, records: Sequence[dict]) -> pd.DataFrame:
    """One row per pair: ``ll_more``, ``ll_less`` (NaN when missing or non-finite), direction, bias type."""
    ll = {r["id"]: (r["ll"] if r.get("finite", True) and r["ll"] is not None else float("nan")) for r in records}
    return pd.DataFrame([{
        "id": p.id, "bias_type": p.bias_type, "direction": p.direction,
        "ll_more": ll.get(f"{p.id}|more", float("nan")), "ll_less": ll.get(f"{p.id}|less", float("nan")),
    } for p in pairs])


def run_crows(scorer: Any, out: Path, limit: int | None = None, chunk_size: int = 128, data_file: str | None = None):
    """Score all pairs (resumable), write the summary and tables; return (summary, timing)."""
    from experiments.hbb import score_resumable
    from probe.data.crows_pairs import load_crows_pairs
    from probe.metrics.crows import crows_by_type
    from probe.reports.hbb_tables import write_table
    from probe.io import write_json_atomic
    from probe.scoring import PerplexityRequest

    pairs = load_crows_pairs(data_file)[:limit] if limit is not None else load_crows_pairs(data_file)
    requests = [PerplexityRequest(id=f"{p.id}|{which}", text=text, group=p.id)
                for p in pairs for which, text in (("more", p.sent_more), ("less", p.sent_less))]
    records, timing = score_resumable(scorer, requests, out, chunk_size, name="crows_records", to_record=_record,
                                      kind_of=lambda r: "crows")
    table = crows_by_type(pair_frame(pairs, records))
    summary = {"n_pairs": len(pairs), "forward_passes": len(requests), "by_bias_type": table.to_dict("records")}
    write_json_atomic(out / "crows_summary.json", summary)
    shown = table[["bias_type", "n", "score", "ci_low", "ci_high", "stereo_n", "stereo_score", "antistereo_n",
                   "antistereo_score", "n_neutral", "n_invalid"]]
    write_table(shown, out / "tables" / "crows", "CrowS-Pairs: % of pairs where sent_more has the higher "
                "log-likelihood (50 = no bias), Wilson 95% CI")
    return summary, timing


def main(argv: Sequence[str] | None = None) -> int:
    from experiments.hbb import load_config

    ap = argparse.ArgumentParser(prog="python -m experiments.crows_pairs", description=__doc__.splitlines()[0])
    ap.add_argument("--config")
    ap.add_argument("--output-dir")
    ap.add_argument("--model")
    ap.add_argument("--limit", type=int)
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config, {k: v for k, v in vars(args).items() if k != "config"}, cls=CrowsConfig)
        import torch

        from probe.models import load_model
        from probe.runs.provenance import provenance
        from probe.io import write_json_atomic
        from probe.scoring import Scorer

        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        out = Path(cfg.output_dir)
        lm = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
        summary, timing = run_crows(Scorer(lm, batch_size=cfg.batch_size), out, cfg.limit, cfg.chunk_size, cfg.data_file)
        write_json_atomic(out / "crows_timing.json", timing)
        from probe.data.crows_pairs import DEFAULT_FILE
        from probe.data.paths import dataset_dir

        data_file = Path(cfg.data_file) if cfg.data_file else dataset_dir("crows_pairs") / DEFAULT_FILE
        write_json_atomic(out / "provenance.json", provenance(lm, dataclasses.asdict(cfg), data_files=[data_file]))
    except ProbeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print((out / "tables" / "crows.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
