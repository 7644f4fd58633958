"""StereoSet: loader (dev.json layout), fetch from a local copy, the authors' ss / lms / icat on hand-computed
cases, and the ``stereoset`` task on an invented fixture with the tiny model (both protocols)."""

from __future__ import annotations

import json
import math

import pytest

from probe.data.fetch import fetch
from probe.tasks import data_set
from probe.tasks.stereoset.data import load_stereoset
from probe.errors import InputError, ProbeError
from probe.tasks.stereoset.metrics import stereoset_scores, term_counts
from probe.runs.runner import RunOptions
from probe.runs.task_run import run_task
from probe.tasks import get


def _ex(eid, target, bias, context, stereo, anti, unrel):
    golds = [("stereotype", stereo), ("anti-stereotype", anti), ("unrelated", unrel)]
    return {"id": eid, "target": target, "bias_type": bias, "context": context,
            "sentences": [{"id": f"{eid}-{i}", "sentence": s, "gold_label": g,
                           "labels": [{"label": g, "human_id": "h"}]} for i, (g, s) in enumerate(golds)]}


#: invented examples in the dev.json layout (not StereoSet's data)
FIXTURE = {"version": "1.1", "data": {
    "intrasentence": [
        _ex("i1", "grandfather", "gender", "The grandfather was BLANK.", "The grandfather was slow.",
            "The grandfather was fast.", "The grandfather was mat."),
        _ex("i2", "cat", "profession", "The cat sat on the BLANK.", "The cat sat on the mat.",
            "The cat sat on the phone.", "The cat sat on the answer."),
    ],
    "intersentence": [
        _ex("x1", "grandson", "gender", "I saw a man at the market.", "He was not comfortable.",
            "He was comfortable.", "The cat sat."),
    ]}}


@pytest.fixture
def dev(tmp_path):
    p = tmp_path / "stereoset" / "dev.json"
    p.parent.mkdir()
    p.write_text(json.dumps(FIXTURE), encoding="utf-8")
    return p


def test_loader_reads_both_splits_and_names_bad_fields(dev, tmp_path):
    exs = load_stereoset(dev)
    assert [e.id for e in exs] == ["intrasentence:i1", "intrasentence:i2", "intersentence:x1"]
    assert exs[2].split == "intersentence" and exs[2].sentence("unrelated") == "The cat sat."
    assert [e.id for e in load_stereoset(dev, ("intersentence",))] == ["intersentence:x1"]
    bad = json.loads(json.dumps(FIXTURE))
    bad["data"]["intrasentence"][1]["sentences"][2]["gold_label"] = "neutral"
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(InputError, match=r"data.intrasentence\[1\].sentences\[2\].gold_label"):
        load_stereoset(p)
    bad["data"]["intrasentence"][1]["sentences"][2]["gold_label"] = "stereotype"  # two stereotypes
    p.write_text(json.dumps(bad))
    with pytest.raises(InputError, match="one sentence per gold label"):
        load_stereoset(p)
    p.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_stereoset(p)
    p.write_text(json.dumps({"version": 1}))
    with pytest.raises(InputError, match="field 'data'"):
        load_stereoset(p)


def test_fetch_from_a_local_copy_and_file_url(dev, tmp_path):
    dest = fetch(data_set("stereoset"), source=str(dev.parent.parent), dest=tmp_path / "a")  # the parent of stereoset/
    assert json.loads((dest / "dev.json").read_text()) == FIXTURE
    dest = fetch(data_set("stereoset"), source=f"file://{dev.parent}", dest=tmp_path / "b")
    assert "dev.json" in json.loads((dest / "MANIFEST.json").read_text())["files"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProbeError, match="no file of data set 'stereoset'"):
        fetch(data_set("stereoset"), source=str(tmp_path / "empty"), dest=tmp_path / "c")


def test_counts_follow_evaluation_py_ties_are_anti():
    c = term_counts([(-1.0, -2.0, -3.0), (-2.0, -2.0, -1.0), (-3.0, -1.0, -2.0), (0.0, 0.0, float("nan"))],
                    ["a", "a", "b", "b"])
    # a: ex1 pro, both > unrelated (2); ex2 tie -> anti, neither > unrelated; b: anti, only anti > unrelated
    assert c == {"a": {"pro": 1.0, "anti": 1.0, "related": 2.0, "total": 2.0},
                 "b": {"pro": 0.0, "anti": 1.0, "related": 1.0, "total": 1.0}}


def test_scores_are_macro_over_terms_by_hand():
    # term a: 3 examples, pro 3 -> ss 100, related 6/6 -> lms 100; term b: 1 example, anti, related 1/2 -> lms 50
    scores = [(-1.0, -2.0, -9.0)] * 3 + [(-3.0, -1.0, -2.0)]
    r = stereoset_scores(scores, ["a", "a", "a", "b"])
    assert (r.n, r.n_terms, r.n_invalid) == (4, 2, 0)
    assert r.ss == pytest.approx(50.0)  # mean(100, 0): the macro average; the pooled share is 75
    assert r.ss_examples == pytest.approx(75.0)
    assert r.lms == pytest.approx(75.0) and r.icat == pytest.approx(75.0 * 50.0 / 50.0)
    assert r.micro_icat == pytest.approx((100 * 0 / 50 + 50 * 0 / 50) / 2)  # each term is all-or-nothing
    r = stereoset_scores([(-1.0, -2.0, -3.0)] * 3 + [(-2.0, -1.0, -3.0)], ["a"] * 4)
    assert r.ss == pytest.approx(75.0) and r.lms == 100.0 and r.icat == pytest.approx(100.0 * 25.0 / 50.0)


def test_empty_invalid_and_bad_shapes():
    r = stereoset_scores([], [])
    assert r.n == 0 and math.isnan(r.ss) and math.isnan(r.icat)
    r = stereoset_scores([(float("nan"), 0.0, 0.0)], ["a"])
    assert r.n == 0 and r.n_invalid == 1 and math.isnan(r.lms)
    with pytest.raises(ValueError, match="needs 3 scores"):
        stereoset_scores([(0.0, 1.0)], ["a"])
    with pytest.raises(ValueError, match="same length"):
        stereoset_scores([(0.0, 1.0, 2.0)], [])


SHORT = dict(mcq_instruction="Pick one.", mcq_question="{context}", mcq_labels=("a", "b"), mcq_answer_cue="Answer:",
             sg_instruction="S", sg_user="{instruction} {context}", sg_system="Be useful.", sg_variation_prompt="V",
             sg_variations_asked=9)


def test_requests_layout(dev, tiny_lm):
    from probe.tasks.stereoset.task import stereoset_requests

    exs = load_stereoset(dev)
    ll = stereoset_requests(exs, "loglik")
    assert len(ll) == 9 and ll[0].prefix == "" and ll[0].text == "The grandfather was slow."
    assert ll[6].prefix == "I saw a man at the market." and ll[6].space == "space"  # intersentence: after context
    mcq = stereoset_requests(exs[:1], "mcq", tiny_lm.tokenizer)
    assert [r.meta["golds"] for r in mcq] == [["stereotype", "anti-stereotype", "unrelated"],
                                              ["anti-stereotype", "unrelated", "stereotype"],
                                              ["unrelated", "stereotype", "anti-stereotype"]]
    assert "Context: The grandfather was BLANK.\nChoices:\na) The grandfather was slow." in mcq[0].prompt
    assert mcq[0].labels == ("a", "b", "c") and mcq[0].prompt.endswith("<|im_start|>assistant\n")


def test_tiny_run_both_protocols(dev, tmp_path, tiny_lm, monkeypatch):
    import probe.tasks.crows_pairs.prompts as two

    # tiny: 256 positions
    monkeypatch.setattr(two, "load_two_choice", lambda: two.TwoChoicePrompt(SHORT["mcq_instruction"], ("a", "b"),
                                                                            SHORT["mcq_answer_cue"]))
    task = get("stereoset")
    out = tmp_path / "run"
    e = run_task(task, task.make_config({"data_file": str(dev)}), tiny_lm, output=out,
                 options=RunOptions(progress=False))
    s = e.summary
    assert s["n_examples"] == {"intrasentence": 2, "intersentence": 1} and s["table1_protocol"] == "mcq"
    assert s["by_protocol"]["loglik"]["forward_passes"] == 9 and s["by_protocol"]["mcq"]["forward_passes"] == 9
    for proto in ("mcq", "loglik"):
        rows = {(r["split"], r["bias_type"]): r for r in s["by_protocol"][proto]["rows"]}
        assert set(rows) == {("intersentence", "overall"), ("intersentence", "gender"), ("intrasentence", "overall"),
                             ("intrasentence", "gender"), ("intrasentence", "profession"), ("all", "overall")}
        intra = rows[("intrasentence", "overall")]
        assert intra["n"] == 2 and intra["n_terms"] == 2 and intra["ss"] in (0.0, 50.0, 100.0)
        assert 0.0 <= intra["icat"] <= 100.0
    mcq_all = next(r for r in s["by_protocol"]["mcq"]["rows"] if r["split"] == "all")
    assert 0.0 < mcq_all["mean_mass"] <= 1.0 and 0.0 <= mcq_all["share_refused"] <= 100.0  # (a) only
    for f in ("tables/stereoset_mcq.md", "tables/stereoset_loglik.csv", "report.md"):
        assert (out / f).exists(), f
    assert "protocol (a) three-choice question" in (out / "report.md").read_text()
    # resume: nothing rescored, same numbers
    again = run_task(task, task.make_config({"data_file": str(dev)}), tiny_lm, output=out,
                     options=RunOptions(progress=False)).summary
    assert again["by_protocol"]["loglik"]["rows"][0]["ss"] == s["by_protocol"]["loglik"]["rows"][0]["ss"]


def test_configs_parse():
    from pathlib import Path

    from probe.api import split_options
    from probe.commands.run import RUN_LEVEL_KEYS, read_config

    def task_config(path: Path):  # as `probe run` splits a config
        values = read_config(path)
        task = get(values["task"])
        run, rest = split_options({k: v for k, v in values.items() if k not in RUN_LEVEL_KEYS})
        RunOptions(**run)
        return task, task.make_config(rest, source=str(path)), run

    root = Path(__file__).resolve().parents[2]
    task, cfg, run = task_config(root / "configs" / "stereoset.yaml")
    assert task.name == "stereoset" and cfg.protocol == "both" and run["threads"] == 1
    task, cfg, _ = task_config(root / "experiments" / "bbq_crows" / "configs" / "crows_pairs.yaml")
    assert task.name == "crows_pairs" and cfg.protocol == "both" and cfg.system_prompt == "You are a useful assistant."
