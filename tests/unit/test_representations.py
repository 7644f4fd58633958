"""The representations study (probe.studies.representations, `probe analyze representations RUN_DIR`).

Labels from item fields and records, the settings, the command group, and one end-to-end run on the tiny
model (`probe run implicitbbq --capture ...`, then every step of the study, tiny sizes): the files it writes
and what they must hold.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np
import pytest

from probe.cli import main
from probe.studies.representations import Settings
from probe.tasks.implicitbbq.representations import consistency, first_group, lexical_key

ROOT = Path(__file__).resolve().parents[2]

EXPLICIT = NS(context_kind="explicit",
              metadata={"group1": "old", "group2": "young", "name1": "grandfather", "name2": "grandson"})
IMPLICIT = NS(context_kind="implicit",
              metadata={"group1": "old", "group2": "young", "person1": "Person B",
                        "cue1": "has wrinkles", "cue2": "has smooth skin"})


def test_first_group_and_control_key():
    assert first_group(EXPLICIT) == "old"
    assert first_group(IMPLICIT) == "young"  # Person A carries group2's cue here
    assert first_group(NS(context_kind="implicit", metadata={**IMPLICIT.metadata, "person1": "Person A"})) == "old"
    assert lexical_key(EXPLICIT) == "grandfather|grandson"
    assert lexical_key(IMPLICIT) == "has wrinkles|has smooth skin"


@pytest.mark.parametrize("pred, owner, polarity, expected", [
    (0, [0, 1, 2], "neg", 1.0),      # the target in a negative question: stereotype-consistent
    (1, [0, 1, 2], "neg", 0.0),
    (1, [0, 1, 2], "nonneg", 1.0),   # the non-target, non-unknown option in a non-negative question
    (0, [0, 1, 2], "nonneg", 0.0),
    (2, [0, 1, 2], "neg", math.nan),  # Unknown: no label
    (None, [0, 1, 2], "neg", math.nan),  # a non-finite record is never an answer
    (1, [2, 0, 1], "neg", 1.0),      # labels listed in another order: the option the label names counts
    (0, [2, 0, 1], "neg", math.nan),
])
def test_consistency(pred, owner, polarity, expected):
    rec = {"target_index": 0, "unknown_index": 2, "question_polarity": polarity, "pred_index": pred, "owner": owner}
    got = consistency(rec)
    assert (math.isnan(got) and math.isnan(expected)) or got == expected


def test_settings_are_checked():
    assert Settings(steps=["probes"]).steps == ("probes",)
    with pytest.raises(ValueError, match="unknown step"):
        Settings(steps=("probes", "items"))
    with pytest.raises(ValueError, match="layer_stride"):
        Settings(layer_stride=0)


def test_analyze_is_a_command_group(capsys):
    assert main(["analyze"]) == 2
    assert "representations" in capsys.readouterr().err


def test_the_older_config_spelling_names_the_new_one(tmp_path, capsys):
    assert main(["analyze", "representations", "--config", str(tmp_path / "r.yaml")]) == 1
    err = capsys.readouterr().err
    assert "probe run configs/representations.yaml" in err and "probe analyze representations RUN_DIR" in err
    assert len(err.strip().splitlines()) == 1


def test_shipped_config_is_a_run_config():
    """configs/representations.yaml is step 1 (`probe run`): an implicitbbq config capturing every layer."""
    from probe.api import split_options
    from probe.commands.run import read_config
    from probe.runs.multi import task_configs
    from probe.runs.runner import options_from

    values = read_config(ROOT / "configs" / "representations.yaml")
    assert values.pop("task") == "implicitbbq"
    for key in ("model", "output"):
        values.pop(key)
    run_values, task_values = split_options(values)
    cfg = task_configs(["implicitbbq"], task_values, source="test")["implicitbbq"]
    assert cfg.answer_formats == ("labels",)
    assert options_from(run_values).capture == ("blocks.*.hook_resid_post@last",)


def test_end_to_end_on_the_tiny_model(shared_data, model_dir, tmp_path, capsys, one_torch_thread):
    run = tmp_path / "run"
    assert main(["run", "implicitbbq", "--model", str(model_dir), "--set", "answer_formats=[labels]",
                 "--set", "strategies=[zero_shot]", "--set", "dimensions=[age]", "--set", "per_cell={zero_shot: 34}",
                 "--set", "context_kinds=[explicit, implicit]", "--capture", "blocks.*.hook_resid_post@last",
                 "--output", str(run), "--no-progress", "--threads", "1"]) == 0
    capsys.readouterr()
    out = tmp_path / "out"
    assert main(["analyze", "representations", str(run), "--output", str(out), "--positions", "last,span:question",
                 "--layer-stride", "1", "--folds", "2", "--n-boot", "20", "--lens-items", "4", "--pairs", "1",
                 "--steer-items", "8", "--threads", "1"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"n_records", "timings_s"}
    for name in ("probes.csv", "transfer.csv", "probe_group.png", "probe_framing.png", "lens.png",
                 "patching.npz", "patching.png", "steering.csv", "steering.md", "summary.json", "provenance.json"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    n_records = sum(1 for _ in (run / "records.jsonl").open())
    assert summary["n_records"] == {"age": n_records} and summary["run"] == str(run)
    n_layers = 2  # the tiny model
    assert len(summary["lens"]["p_target_by_layer"]) == n_layers
    import pandas as pd

    probes = pd.read_csv(out / "probes.csv")
    assert set(probes.task) >= {"group", "framing"} and set(probes.layer) == {0, 1}
    assert set(probes.position) == {"last", "span:question"}  # span re-captured through the run's Runner
    assert probes.accuracy.between(0, 1).all()
    effects = np.load(out / "patching.npz")
    assert {k: effects[k].shape for k in effects.files} == {
        k: (1, n_layers, 2) for k in ("explicit_to_implicit", "implicit_to_explicit", "A__to_B")}
    steering = pd.read_csv(out / "steering.csv")
    assert list(steering.direction.unique()) == ["mean difference", "probe"]
    assert (steering[steering.alpha == 0].filter(like="delta_") == 0).all().all()


def test_the_study_reads_the_tasks_labels_and_names_the_tasks_that_give_them(tmp_path):
    """Whether the study applies is the task's say (``representation_labels``), not a name switch: a run of a
    task without labels is refused before any model work, naming the tasks that have them and their command."""
    import pandas as pd

    from probe.errors import ProbeError
    from probe.studies.analyze.run import TaskRun
    from probe.studies.representations import run_representations
    from probe.tasks import get
    from probe.tasks.implicitbbq.representations import LABELS

    assert get("implicitbbq").analyses.representation_labels() is LABELS and LABELS.transfer == ("explicit", "implicit")
    assert get("bbq").analyses.representation_labels() is None
    run = TaskRun(get("bbq"), None, [], [], pd.DataFrame({"kind": ["label"]}), runner=None)
    with pytest.raises(ProbeError, match=r"labels its items for it \(implicitbbq\), not 'bbq': probe run implicitbbq"):
        run_representations(run, tmp_path / "out")
