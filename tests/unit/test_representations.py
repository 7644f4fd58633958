"""The representations analysis (probe.analysis.representations, `probe analyze representations`).

Labels from item fields, the config (defaults = the shipped paper-scale config),
the command group, and one end-to-end run on the tiny model (every step, tiny
sizes): the files it writes and what they must hold.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from probe.analysis.representations import (RepresentationsConfig, consistency, first_group, lexical_key,
                                            load_config, patching_pairs)
from probe.cli import main
from probe.errors import InputError

ROOT = Path(__file__).resolve().parents[2]

EXPLICIT = {"context_kind": "explicit",
            "metadata": {"group1": "old", "group2": "young", "name1": "grandfather", "name2": "grandson"}}
IMPLICIT = {"context_kind": "implicit",
            "metadata": {"group1": "old", "group2": "young", "person1": "Person B",
                         "cue1": "has wrinkles", "cue2": "has smooth skin"}}


def test_first_group_and_control_key():
    assert first_group(EXPLICIT) == "old"
    assert first_group(IMPLICIT) == "young"  # Person A carries group2's cue here
    assert first_group({**IMPLICIT, "metadata": {**IMPLICIT["metadata"], "person1": "Person A"}}) == "old"
    assert lexical_key(EXPLICIT) == "grandfather|grandson"
    assert lexical_key(IMPLICIT) == "has wrinkles|has smooth skin"


@pytest.mark.parametrize("pred, polarity, expected", [
    (0, "neg", 1.0),      # the target in a negative question: stereotype-consistent
    (1, "neg", 0.0),
    (1, "nonneg", 1.0),   # the non-target, non-unknown option in a non-negative question
    (0, "nonneg", 0.0),
    (2, "neg", math.nan),  # Unknown: no label
    (None, "neg", math.nan),  # a non-finite record is never an answer
])
def test_consistency(pred, polarity, expected):
    rec = {"meta": {"target_index": 0, "unknown_index": 2, "question_polarity": polarity}, "pred_index": pred}
    got = consistency(rec)
    assert (math.isnan(got) and math.isnan(expected)) or got == expected


def test_defaults_are_the_shipped_config():
    """`probe analyze representations` without --config runs the paper-scale study of configs/."""
    assert load_config(ROOT / "configs" / "representations.yaml") == RepresentationsConfig()


def test_config_rejects_probe_position_not_recorded(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("positions: [last]\nprobe_positions: [last, mean:context]\n")
    with pytest.raises(InputError, match="mean:context"):
        load_config(path)


def test_overrides_and_lists_become_tuples(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("dimensions: [age]\nsteer_alphas: [0.5]\n")
    cfg = load_config(path, {"model": "x", "output_dir": None})
    assert cfg.model == "x" and cfg.output_dir == RepresentationsConfig.output_dir
    assert cfg.dimensions == ("age",) and cfg.steer_alphas == (0.5,)


def test_analyze_is_a_command_group(capsys):
    assert main(["analyze"]) == 2
    assert "representations" in capsys.readouterr().err


def test_cli_bad_config_is_a_user_error(tmp_path, capsys):
    path = tmp_path / "r.yaml"
    path.write_text("batch_sise: 8\n")
    assert main(["analyze", "representations", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert "r.yaml" in err and "batch_sise" in err


def test_patching_pairs_are_matched(shared_data):
    from probe.data.implicitbbq import build_implicitbbq

    cfg = RepresentationsConfig(dimensions=("age",), patch_pairs_per_dimension=2)
    pairs = patching_pairs(cfg, build_implicitbbq(["age"]))
    assert {k: len(v) for k, v in pairs.items()} == {"explicit->implicit": 2, "implicit->explicit": 2,
                                                     "group swap": 2}
    for tgt, src in pairs["explicit->implicit"]:
        assert (tgt.context_kind, src.context_kind) == ("implicit", "explicit")
        assert (tgt.template_id, tgt.context_condition, tgt.question_polarity) == \
               (src.template_id, src.context_condition, src.question_polarity) and tgt.context_condition == "ambig"
    for tgt, src in pairs["group swap"]:
        assert tgt.metadata["context_id"] == src.metadata["context_id"] and tgt.id != src.id


def test_end_to_end_on_the_tiny_model(shared_data, model_dir, tmp_path, capsys, one_torch_thread):
    cfg = tmp_path / "r.yaml"
    cfg.write_text("dimensions: [age]\nper_dimension: 32\npositions: [last, mean:context, span:question]\n"
                   "probe_positions: [last]\nprobe_layer_stride: 1\nn_splits: 2\nn_boot: 20\nlens_items: 4\n"
                   "patch_pairs_per_dimension: 1\npatch_positions: [last, span:question]\nsteer_items: 8\n"
                   "batch_size: 8\n")
    out = tmp_path / "out"
    assert main(["analyze", "representations", "--config", str(cfg), "--model", str(model_dir),
                 "--output", str(out)]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"n_items", "timings_s"}
    for name in ("items.jsonl", "probes.csv", "transfer.csv", "probe_group.png", "probe_framing.png", "lens.png",
                 "patching.npz", "patching.png", "steering.csv", "steering.md", "summary.json", "provenance.json"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_items"] == {"age": 32} and summary["config"]["model"] == str(model_dir)
    assert summary["activations"]["items_run"] == 32
    n_layers = 2  # the tiny model
    assert len(summary["lens"]["p_target_by_layer"]) == n_layers
    import pandas as pd

    probes = pd.read_csv(out / "probes.csv")
    assert set(probes.task) >= {"group", "framing"} and set(probes.layer) == {0, 1}
    assert probes.accuracy.between(0, 1).all()
    effects = np.load(out / "patching.npz")
    assert {k: effects[k].shape for k in effects.files} == {
        k: (1, n_layers, 2) for k in ("explicit_to_implicit", "implicit_to_explicit", "group_swap")}
    steering = pd.read_csv(out / "steering.csv")
    assert list(steering.direction.unique()) == ["mean difference", "probe"]
    prov = json.loads((out / "provenance.json").read_text())
    assert str(out / "items.jsonl") in prov["data_files"] and prov["config"]["output_dir"] == str(out)
    # re-running reuses the sample and the activation store
    assert main(["analyze", "representations", "--config", str(cfg), "--model", str(model_dir),
                 "--output", str(out)]) == 0
    capsys.readouterr()
    assert json.loads((out / "summary.json").read_text())["activations"]["items_run"] == 0
