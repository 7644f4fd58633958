"""The task registry, the third-party entry point, the one Runner, the record schema and `probe run`."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

import probe
from probe.errors import ProbeError
from probe.runs.record import Record, records_to_frame
from probe.runs.runner import RunOptions, Runner
from probe.scoring.requests import ContinuationRequest, LabelRequest, PerplexityRequest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "probe_pairs"


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread):
    pass


@pytest.fixture
def pairs_installed(tmp_path, monkeypatch):
    """The docs' third-party task, registered as an installed distribution would be (a dist-info with an entry point)."""
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(EXAMPLE / "probe_pairs.py", site / "probe_pairs.py")
    info = site / "probe_pairs-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: probe-pairs\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[probe.tasks]\npairs = probe_pairs:PairsTask\n")
    monkeypatch.syspath_prepend(str(site))
    return site


def test_registry_lists_the_builtin_tasks_and_rejects_unknown_names():
    from probe.tasks import BUILTIN, available, get

    assert list(available())[:len(BUILTIN)] == list(BUILTIN)  # built-ins first, in their registry order
    # a built-in is its folder: probe/tasks/<name>/task.py
    assert all(target.startswith(f"probe.tasks.{name}.task:") for name, target in BUILTIN.items())
    with pytest.raises(ProbeError, match="unknown task 'nope'.*known tasks: demo"):
        get("nope")


def test_example_task_is_short_and_declared_like_the_docs_say():
    assert len((EXAMPLE / "probe_pairs.py").read_text().splitlines()) < 80
    assert 'pairs = "probe_pairs:PairsTask"' in (EXAMPLE / "pyproject.toml").read_text()
    assert "probe_pairs.py" in (ROOT / "docs" / "tasks.md").read_text()


def test_third_party_task_registers_through_the_entry_point_and_runs(pairs_installed, tiny_lm, tmp_path):
    assert "pairs" in probe.list_tasks()
    out = tmp_path / "run"
    e = probe.evaluate(tiny_lm, "pairs", output=out, progress=False, threshold=0.0)
    assert e.records.shape[0] == 6 and set(e.records["side"]) == {"a", "b"}
    assert e.summary["n_pairs"] == 3 and e.summary["n_at_threshold"] == 3  # threshold 0: every pair counts
    want = e.tables["pairs"]["gap"].to_numpy()
    assert want == pytest.approx(e.tables["pairs"]["p_yes_a"] - e.tables["pairs"]["p_yes_b"], abs=2e-6)  # rounded
    assert json.loads((out / "summary.json").read_text())["n_pairs"] == 3
    assert (out / "tables" / "pairs.md").is_file() and (out / "provenance.json").is_file()
    # the pair's two variants were scored as one group: same numbers as scoring each alone
    alone = Runner(tiny_lm, RunOptions(progress=False, chunk_size=1))
    reqs = __import__("probe_pairs").PairsTask().requests(
        e.config, [{"id": "t0", "template": e.config.templates[0]}], tiny_lm.tokenizer)
    p = [alone.score([r])[0].probs[0] for r in reqs]
    assert p[0] - p[1] == pytest.approx(want[0], abs=1e-6)


def test_unknown_task_option_is_an_error_naming_the_valid_keys(pairs_installed, tiny_lm):
    with pytest.raises(ProbeError, match="unknown key.*treshold.*valid keys: group_a"):
        probe.evaluate(tiny_lm, "pairs", treshold=0.1)


# -- the Runner --------------------------------------------------------------------------------------------
def _requests():
    return [
        LabelRequest("l1", "Is the sky blue? Answer:", ("Yes", "No"), group="g", meta={"category": "age"}),
        LabelRequest("l2", "Is the sea blue? Answer:", ("Yes", "No"), group="g", meta={"category": "age"}),
        ContinuationRequest("c1", "The cat sat on the", (" mat", " hat"), meta={"category": "ses"}),
        PerplexityRequest("p1", " sat on the mat.", prefix="The cat", meta={"category": "ses"}),
    ]


def test_runner_in_memory_equals_file_and_resume_is_byte_identical(tiny_lm, tmp_path):
    runner = Runner(tiny_lm, RunOptions(progress=False, chunk_size=2))
    mem = runner.score(_requests(), task="t")
    out = tmp_path / "records.jsonl"
    disk = runner.score(_requests(), out, task="t")
    assert [r.to_dict() for r in mem] == [r.to_dict() for r in disk]
    assert [r.meta["category"] for r in disk] == ["age", "age", "ses", "ses"]
    assert {r.model for r in disk} == {runner.model_id} and len(runner.model_id) == 12
    first = out.read_bytes()
    lines = first.splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:1]) + lines[1][:10])  # a crash: one whole record, one torn
    again = runner.score(_requests(), out, task="t")
    assert out.read_bytes() == first and [r.to_dict() for r in again] == [r.to_dict() for r in disk]


def test_runner_refuses_to_mix_models_and_names_both(tiny_lm, tmp_path):
    from tests.tiny import tiny_lm as make

    out = tmp_path / "records.jsonl"
    Runner(tiny_lm, RunOptions(progress=False)).score(_requests(), out)
    other = make(seed=1)
    other.name = "other-tiny"
    tiny_name = getattr(tiny_lm, "name", None)
    with pytest.raises(ProbeError, match=f"came from {tiny_name}.*this run uses other-tiny"):
        Runner(other, RunOptions(progress=False)).score(_requests(), out)
    assert len(out.read_text().splitlines()) == 4  # nothing lost


def test_runner_refuses_duplicate_ids(tiny_lm):
    r = LabelRequest("x", "Q? Answer:", ("Yes", "No"))
    with pytest.raises(ProbeError, match="duplicate request id 'x'"):
        Runner(tiny_lm, RunOptions(progress=False)).score([r, r])


def test_generation_is_recorded_and_resumed(tiny_lm, tmp_path):
    from probe.scoring.generate import GenerationRequest

    runner = Runner(tiny_lm, RunOptions(progress=False))
    reqs = [GenerationRequest(f"g{i}", f"Tell me about {i}", max_new_tokens=4, meta={"kind": "cot"}) for i in range(3)]
    out = tmp_path / "generations.jsonl"
    first = runner.generate(reqs, out)
    assert list(first) == ["g0", "g1", "g2"] and runner.timing["cot"]["n"] == 3
    runner.timing.clear()
    assert runner.generate(reqs, out) == first and runner.timing == {}  # read back, not regenerated
    assert json.loads(out.read_text().splitlines()[0])["meta"] == {"kind": "cot"}


# -- records ------------------------------------------------------------------------------------------------
def test_record_schema_round_trips_and_non_finite_never_answers(tiny_lm):
    from probe.scoring.requests import LabelResult

    res = LabelResult("q", ("A", "B"), (math.nan, math.nan), (math.nan, math.nan), math.nan, ((1,), (2,)), 3,
                      finite=False, meta={"k": 1})
    rec = Record.from_result("t", "m", res)
    assert rec.pred_index is None and not rec.answers
    back = Record.from_dict(json.loads(json.dumps(rec.to_dict(), allow_nan=True)))
    assert back.pred_index is None and back.meta == {"k": 1} and back.kind == "label"
    with pytest.raises(ValueError, match="details reuse common field names"):
        Record("t", "i", "m", "label", (), (), (), None, None, True, 1, {}, {"mass": 1}).to_dict()


def test_records_to_frame_flattens_meta_and_reads_a_run_directory(tiny_lm, tmp_path):
    Runner(tiny_lm, RunOptions(progress=False)).score(_requests(), tmp_path / "records.jsonl", task="t")
    df = records_to_frame(tmp_path)
    assert list(df["category"]) == ["age", "age", "ses", "ses"]
    assert {"task", "id", "model", "kind", "options", "logprobs", "probs", "pred_index", "mass", "finite",
            "n_prompt_tokens"} <= set(df.columns)
    assert df.loc[3, "ppl"] > 1 and df.loc[3, "kind"] == "perplexity"
    clash = records_to_frame([{"id": "a", "kind": "label", "meta": {"kind": "mcq"}}])
    assert clash.loc[0, "kind"] == "label" and clash.loc[0, "meta.kind"] == "mcq"
    with pytest.raises(FileNotFoundError):
        records_to_frame(tmp_path / "nothing")


# -- probe run -------------------------------------------------------------------------------------------
def test_probe_run_config_with_set_overrides(pairs_installed, model_dir, tmp_path, capsys):
    from probe.cli import main

    cfg = tmp_path / "pairs.yaml"
    cfg.write_text(f"task: pairs\nmodel: {model_dir}\noutput: {tmp_path / 'cfgout'}\nbatch_size: 4\n"
                   "group_a: tall\nthreshold: 0.5\n")
    assert main(["run", str(cfg), "--set", "threshold=0", "--set", "group_b=short", "--no-progress"]) == 0
    summary = json.loads((tmp_path / "cfgout" / "summary.json").read_text())
    assert summary["n_at_threshold"] == 3  # --set won over the config
    prov = json.loads((tmp_path / "cfgout" / "provenance.json").read_text())
    assert prov["config"]["task_config"]["group_a"] == "tall" and prov["config"]["run_options"]["batch_size"] == 4
    recs = records_to_frame(tmp_path / "cfgout")
    assert set(recs["group_name"]) == {"tall", "short"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: x\n")
    assert main(["run", str(bad)]) == 1
    assert "names no task" in capsys.readouterr().err
    assert main(["run", "pairs", "--model", str(model_dir), "--set", "nonsense"]) == 1
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_probe_tasks_lists_every_task_with_a_description(pairs_installed, capsys):
    from probe.cli import main

    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "demo " in out and "pairs " in out and "worked example" in out


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in
                                        [*(ROOT / "configs").glob("*.yaml"), *(ROOT / "experiments").glob("*/configs/*.yaml")]
                                        if "task:" in p.read_text()))
def test_shipped_task_configs_are_valid(path):
    """Every task config in configs/ (single runs) and experiments/*/configs/ (the studies' paper-scale configs)
    names a task and only keys that task or the runner knows."""
    from probe.api import split_options
    from probe.commands.run import read_config
    from probe.runs.runner import options_from
    from probe.tasks import get

    values = read_config(ROOT / path)
    task = get(values.pop("task"))
    for key in ("model", "models", "output"):
        values.pop(key, None)
    run_values, task_values = split_options(values)
    options_from(run_values)
    task.make_config(task_values, source=path)


def test_task_sampling_specs_reach_the_records_and_the_input_check(tiny_lm, tmp_path):
    """A task's paper settings (``paper.sampling``) are scored in the same run; resuming with other specs is
    refused."""
    from probe.runs.task_run import run_task
    from probe.tasks.base import Paper
    from probe.tasks.demo.task import DemoTask

    class TemperedPaper(Paper):
        def sampling(self, config):
            return ({"temperature": self.task.temperature, "top_p": 1.0},)

    class Tempered(DemoTask):
        temperature = 0.5
        paper = TemperedPaper()

    out = tmp_path / "run"
    e = run_task(Tempered(), Tempered().make_config({"chat_template": False}), tiny_lm, output=out, limit=4,
                 options=RunOptions(progress=False))
    line = json.loads((out / "records.jsonl").read_text().splitlines()[0])
    [entry] = line["sampling"]
    assert entry["temperature"] == 0.5 and len(entry["logprobs"]) == len(line["options"])
    assert len(e.records) == 4

    class Hotter(Tempered):
        temperature = 0.7

    with pytest.raises(ProbeError, match="other sampling specs"):
        run_task(Hotter(), Hotter().make_config({"chat_template": False}), tiny_lm, output=out, limit=4, options=RunOptions(progress=False))
