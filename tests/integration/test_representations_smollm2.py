"""The representations study on SmolLM2 (a small ImplicitBBQ run with capture, then the logit lens)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.integration


def test_lens_last_layer_is_the_scored_output(smollm2, shared_data, tmp_path, one_torch_thread):
    """The logit lens at the last layer, read from the run's captured residuals, gives the label
    probabilities the run scored."""
    from probe.studies.analyze import run_for
    from probe.studies.representations import Settings, run_representations

    run = run_for("implicitbbq", smollm2, {"answer_formats": ["labels"], "strategies": ["zero_shot"],
                                           "dimensions": ["age"]}, limit=16, output=tmp_path / "run",
                  capture=["blocks.*.hook_resid_post@last"])
    with run:
        out = run_representations(run, tmp_path / "study", Settings(steps=("lens",), lens_items=8))
        recs = run.records.iloc[:8].to_dict("records")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_records"] == {"age": 16} and not (out / "provenance.json").exists()
    for key, field in (("p_target_by_layer", "target_index"), ("p_unknown_by_layer", "unknown_index")):
        scored = np.mean([sum(p for p, o in zip(r["probs"], r["owner"]) if o == r[field]) for r in recs])
        assert len(summary["lens"][key]) == 30
        assert abs(summary["lens"][key][-1] - scored) < 1e-4  # the summary rounds to 4 decimals
