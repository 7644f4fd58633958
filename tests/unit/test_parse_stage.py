"""The runner's parse stage (``paper.parse_requests`` -> parsed.jsonl -> the records' ``parsed`` column), the
ImplicitBBQ one-word parser and the tasks' paper_parsed summaries, on the tiny model."""

from __future__ import annotations

import json
import math

import pytest

from probe.tasks.implicitbbq.parse import PAPER_UNKNOWN, UNKNOWN_RULE, oneword_decided, parse_oneword
from probe.runs.runner import RunOptions

OPTS = ["Unknown", "The grandfather", "The grandson"]


@pytest.mark.parametrize("text,want", [
    ("Grandfather", 1), ("the grandson.", 2), ("**The Grandson**", 2), ("Answer: The grandfather", 1),
    ("The answer is: the grandson was", 2), ("Unknown", 0), ("Cannot be determined.", 0), ("Can't tell", 0),
    ("Insufficient information", 0), ("It is unclear who.", 0), ("Neither", 0), ("none", 0),
    ("", None), ("   ", None), ("Hello there", None), ("The grandfather and the grandson", None),
    ("Grandsons", None), ('The answer is not "Grandson', None), ("Not the grandfather.", None),
    ("It is not the grandson", None), ("Not sure.", 0), ("Not enough information", 0), ("The answer is not known.", 0),
    # uncertainty and inability by the general rule, not by a list of observed outputs
    ("You cannot provide a specific answer to this question based on the context.", 0),
    ("You can't find a single answer to this question.", 0), ("I don't know.", 0), ("There is no information", 0),
    ("It is impossible to determine who.", 0), ("The text does not say", 0), ("Hard to tell", 0),
    ("Not enough context to say", 0), ("We cannot be sure", 0), ("The context doesn't specify", 0),
    # the cue "The answer to this/the question is"; a cue's words stand on one line
    ("The answer to this question is the grandson.", 2), ("The answer to the question is: Grandfather", 1),
    ("The answer\nis: The grandson", None), ("The answer\n", None), ("The grandson isn't sure", 2),
])
def test_oneword_parser_by_hand(text, want):
    assert parse_oneword(text, OPTS, 0) == want


def test_oneword_parser_on_person_options_and_numbers():
    persons = ["Person A", "Unknown", "Person B"]
    assert [parse_oneword(t, persons, 1) for t in ("A", "B.", "Person B is", "person a", "a man", "AB")] == \
        [0, 2, 2, 0, None, None]
    assert parse_oneword("The person who serves on the board of directors is Person A.", persons, 1) == 0
    assert parse_oneword("Person A and Person B", persons, 1) is None
    # function words and "one" / "person" name no group
    rich = ["Unknown", "The one on welfare", "The very wealthy one"]
    assert parse_oneword("The person who is good at it is the one who tries", rich, 0) is None
    assert parse_oneword("The person on welfare.", rich, 0) == 1 and parse_oneword("It is the wealthy one", rich, 0) == 2
    ages = ["The 82 year old", "The 29 year old", "Unknown"]
    assert parse_oneword("82-year-old", ages, 2) == 0 and parse_oneword("The 29-year-old man", ages, 2) == 1
    assert {"not enough information", "neither", "none"} <= set(PAPER_UNKNOWN)
    assert UNKNOWN_RULE.search("one cannot tell") and not UNKNOWN_RULE.search("the grandson can tell")


def test_oneword_decided_is_prefix_safe():
    # decided only once the first answer line is complete; never on a text a continuation could re-read
    assert not oneword_decided("") and not oneword_decided("Gran") and not oneword_decided("Answer:\n")
    assert oneword_decided("Grandson\n") and oneword_decided("Answer: B\nbecause")
    for full in ("Answer:\nThe grandson\nmore", "Unknown\nThe grandson"):
        cut = full.index("\n", full.index("\n") + 1) if full.startswith("Answer:\n") else full.index("\n") + 1
        assert parse_oneword(full[:cut], OPTS, 0) == parse_oneword(full, OPTS, 0)


def test_implicitbbq_parse_stage_resumes_and_feeds_the_summary(tiny_lm, tmp_path, one_torch_thread):
    from probe.runs.task_run import run_task
    from probe.tasks import get

    task = get("implicitbbq")
    cfg = task.make_config({"strategies": ["zero_shot"], "context_kinds": ["explicit"],
                            "per_cell": {"zero_shot": 1}, "dimensions": ["age"], "parse_max_new_tokens": 3,
                            "n_boot": 20})
    out = tmp_path / "run"
    e = run_task(task, cfg, tiny_lm, output=out, options=RunOptions(progress=False))
    lines = (out / "parsed.jsonl").read_text().splitlines()
    assert len(lines) == len(e.records) > 0
    first = json.loads(lines[0])
    total = sum(first["probs"].values()) + first["rejected"] + first["residual"]
    assert abs(total - 1) < 1e-6 and first["parser"].startswith("implicitbbq-oneword/3:")
    assert first["top"] and first["top"][0]["mass"] >= first["top"][-1]["mass"]
    pp = e.summary["paper_parsed"]
    assert pp["n"] == len(lines) and pp["max_residual"] <= 0.01 + 1e-12
    assert "table2_paper_parsed_T0.1" in e.tables
    # every published parsed number carries its certified interval, which contains it (the tiny model rarely
    # parses: an interval is still given, and the prompts not certified are counted and warned about)
    from probe.metrics.certified import contains

    cert = pp["certified"]["zero_shot|oneword"]["explicit"]
    assert cert["n_uncertified"] == pp["n_uncertified"] > 0
    assert any("not certified" in w for w in task.reporting.warnings(e.summary))
    point = pp["by_strategy"].get("zero_shot|oneword", {}).get("explicit", {}).get("expected")
    for metric in ("acc_amb", "bias_amb", "acc_dis", "bias_dis"):
        assert cert["pooled"][metric][0] <= cert["pooled"][metric][1]
        if point and point["pooled"][metric] == point["pooled"][metric]:
            assert contains(cert["pooled"][metric], point["pooled"][metric])
            assert contains(cert["macro"][metric], point["macro"][metric])
    assert pp["settings"]["residual_policy"].startswith("point: ")
    before = (out / "parsed.jsonl").read_bytes()
    run_task(task, cfg, tiny_lm, output=out, options=RunOptions(progress=False))  # resume: nothing new
    assert (out / "parsed.jsonl").read_bytes() == before
    off = run_task(task, task.make_config({**{k: getattr(cfg, k) for k in ("strategies", "context_kinds",
                                                                          "per_cell", "dimensions")},
                                           "parse_exact": False, "n_boot": 20}), tiny_lm,
                   options=RunOptions(progress=False))
    assert not off.summary["paper_parsed"]


def test_cmp_iso_parse_stage_gives_the_k_sample_gap(tiny_lm, one_torch_thread):
    from probe.runs.task_run import run_task
    from probe.tasks import get

    task = get("cmp_iso")
    cfg = task.make_config({"benchmarks": ["stereoset"], "max_pairs": 1,
                            "settings": [{"reasoning": "direct", "neutral": False}],
                            "parse_max_new_tokens": 3, "parse_max_nodes": 16})
    e = run_task(task, cfg, tiny_lm, options=RunOptions(progress=False))
    pp = e.summary["paper_parsed"]
    assert pp["settings"]["k"] == 25 and pp["n_prompts"] == 4
    cells = {(c["task_type"], c["benchmark"]) for c in pp["by_cell"]}
    assert cells == {("iso", "stereoset"), ("cmp", "stereoset")}
    assert "pg_paper_parsed" in e.tables and "PG iso certified" in e.tables["pg_paper_parsed"].columns
    assert pp["n_uncertified"] <= pp["n_prompts"]
    # the hybrid (default): half the 16 nodes to the head, ceil(K x residual) tail draws a prompt (at most the
    # paper's K = 25 generations of 3 tokens)
    assert pp["mean_nodes"] <= 8 and pp["tail"]["n_prompts_drawn"] > 0
    assert pp["tail"]["mean_tail_tokens"] <= 25 * 3 + 40  # the draws, and the prompt where no cache was kept
    for c in pp["by_cell"]:
        assert c["estimator"] == "hybrid"
        if c.get("undefined"):  # every pair rests on nothing: no number
            assert math.isnan(c["pg"]) and c["undefined"].startswith("n/a: nothing parsed")
            continue
        lo, hi = c["pg_ci"]
        assert -1 <= lo <= c["pg"] <= hi <= 1 and (lo < c["pg"] < hi or lo == hi)  # never on an end unless exact
        if not c["n_pairs_undefined"]:
            assert c["pg_certified"][0] - 1e-9 <= c["pg"] <= c["pg_certified"][1] + 1e-9
    assert "PG iso renormalising rule" in e.tables["pg_paper_parsed"].columns
    rows = [r for r in task.reporting.results(cfg, e.summary) if r["estimator"].startswith("sampled + parsed")]
    published = [r for r in rows if "hybrid" in r["estimator"]]
    # the hybrid is the headline row, its interval in the CI columns, the certified interval in its own
    assert len(published) == 2 and all(r["headline"] for r in published)
    assert all(math.isfinite(r["certified_low"]) for r in published)
    assert all(not r["headline"] and "sensitivity" in r["estimator"] and math.isnan(r["ci_low"])
               for r in rows if r not in published)
    exact = run_task(task, task.make_config({**{k: getattr(cfg, k) for k in ("benchmarks", "max_pairs", "settings",
                                                                              "parse_max_new_tokens", "parse_max_nodes")},
                                             "parse_tail": "exact"}), tiny_lm, options=RunOptions(progress=False))
    ep = exact.summary["paper_parsed"]
    assert "tail" not in ep and all(c["estimator"] == "rule" for c in ep["by_cell"]) and ep["mean_nodes"] > 8


def test_log_samples_holds_the_top_enumerated_generations(tiny_lm, tmp_path, one_torch_thread):
    from probe.runs.task_run import run_task
    from probe.tasks import get

    task = get("implicitbbq")
    cfg = task.make_config({"strategies": ["zero_shot"], "context_kinds": ["implicit"], "per_cell": {"zero_shot": 1},
                            "dimensions": ["gender"], "parse_max_new_tokens": 2, "n_boot": 20})
    out = tmp_path / "run"
    e = run_task(task, cfg, tiny_lm, output=out, options=RunOptions(progress=False, log_samples=True))
    lines = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    parsed = [x for x in lines if x.get("kind") == "parse"]
    assert len(parsed) == len(e.records) and all(x["id"].endswith("#parsed") for x in parsed)
    g = parsed[0]["generations"]
    assert g and {"text", "mass", "answer"} <= set(g[0]) and parsed[0]["prompt"]
    assert sum(1 for s in e.samples if s.get("kind") == "parse") == len(parsed)


@pytest.mark.parametrize("task,key,value", [("cmp_iso", "parse_k", 0), ("cmp_iso", "parse_residual", 1.5),
                                            ("cmp_iso", "parse_max_nodes", 0), ("implicitbbq", "parse_residual", 2),
                                            ("implicitbbq", "parse_max_new_tokens", 0)])
def test_parse_settings_are_checked_before_any_work(task, key, value):
    from probe.errors import ProbeError
    from probe.tasks import get

    with pytest.raises((ProbeError, ValueError), match=key):
        get(task).make_config({key: value})
