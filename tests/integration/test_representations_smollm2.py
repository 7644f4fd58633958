"""The representations analysis on SmolLM2 (Python API, a small sample, activations + logit lens)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.integration


def test_lens_last_layer_is_the_scored_output(smollm2, shared_data, tmp_path, one_torch_thread):
    """The logit lens at the last layer reads the same label probabilities the activation pass scored."""
    from probe.analysis.representations import RepresentationsConfig, run_representations

    cfg = RepresentationsConfig(dimensions=("age",), per_dimension=16, positions=("last",), probe_positions=("last",),
                                lens_items=8, output_dir=str(tmp_path), steps=("items", "activations", "lens"))
    out = run_representations(cfg, lm=smollm2)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_items"] == {"age": 16} and not (out / "provenance.json").exists()
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()][:8]
    recs = {r["id"]: r for r in map(json.loads, (out / "acts" / "items.jsonl").read_text().splitlines())}
    for key, field in (("p_target_by_layer", "target_index"), ("p_unknown_by_layer", "unknown_index")):
        scored = np.mean([recs[it["id"]]["label_probs"][it[field]] for it in items])
        assert len(summary["lens"][key]) == 30
        assert abs(summary["lens"][key][-1] - scored) < 1e-4  # the summary rounds to 4 decimals
