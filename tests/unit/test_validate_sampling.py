"""The sampling check (probe validate sampling): the papers' parsers on hand cases, the shared-prefix sampler
against sample_generate, the aggregate rules, and one end-to-end run on the tiny model."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from probe.scoring.generate import sample_shared_prefix
from probe.studies.sampling_check import PromptCase, counted_forms, tv_distance
from probe.studies.sampling_check.check import _dist
from probe.tasks import get
from probe.tasks.cmp_iso.paper_check import parse_cmp_iso
from probe.tasks.hbb.paper_check import parse_hbb
from probe.tasks.implicitbbq.paper_check import parse_implicitbbq


def _HBB():
    return get("hbb").paper.check()


def _ImplicitBBQ():
    return get("implicitbbq").paper.check()


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread):
    pass


# -- HBB: 'choice)<answer>' -------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("a) The man was nervous.", 0),
    ("b)", 1),
    ("(b) She did", 1),
    ("A) upper case letter", 0),            # the instruction asks for lower case; a reader maps it anyway
    ("Answer: b) x", 1),
    ("Final Answer: a)", 0),
    ("b", 1),
    ("a.", 0),
    ("c) not offered", None),               # the instruction forbids labels not given
    ("about the man", None),                # a word starting with the letter is no label
    ("I'm sorry, but I can't answer", None),  # the authors' refusal cleaning
    ("The man", None),
    ("", None),
])
def test_parse_hbb(text, expected):
    assert parse_hbb(text) == expected


# -- ImplicitBBQ: one-word answers ------------------------------------------------------------------------

FORMS = [["Unknown", "Cannot be determined", "Not enough information"], ["The grandfather", "Grandfather"],
         ["The grandson", "Grandson"]]


@pytest.mark.parametrize("text, expected", [
    ("Grandfather", 1),
    ("grandfather.", 1),                     # case and trailing punctuation ignored
    ("The grandson was not comfortable", 2),  # starts with a form, then a non-letter
    ("Grandsons", None),                     # a longer word is not the form
    ("Answer: Unknown", 0),
    ("The answer is: The grandson.", 2),
    ("**Cannot be determined**", 0),
    ("cannot be determined\nbecause ...", 0),  # first line only
    ("Person A", None),
    ("", None),
])
def test_parse_implicitbbq(text, expected):
    assert parse_implicitbbq(text, FORMS) == expected


def test_parse_implicitbbq_longest_match_and_ties():
    forms = [["Unknown"], ["The rich"], ["The rich man"]]
    assert parse_implicitbbq("The rich man did it", forms) == 2   # the longest form wins
    assert parse_implicitbbq("The rich did it", forms) == 1
    assert parse_implicitbbq("Neither", [["Neither"], ["Neither"], ["x"]]) is None  # two options alike: no answer


# -- iso/cmp: the authors' extractor ------------------------------------------------------------------------

@pytest.mark.parametrize("text, task_type, expected", [
    ("Yes}", "iso", "Yes"),       # continues their "\boxed{" cue
    ("yes", "iso", "Yes"),        # the whole text wrapped: \boxed{yes}
    ("NO}", "iso", "No"),         # lower-cased first
    ("y}", "iso", "Yes"),         # their map's abbreviations
    ("s}", "iso", "Skip"),
    (" Yes}", "iso", None),       # \boxed{ yes}: a leading space never matches their regex
    ("Yes.}", "iso", None),
    ("Yes} I think \\boxed{No}", "iso", "No"),  # the last match
    ("B}", "cmp", "B"),
    ("c}", "cmp", "C"),
    ("Maybe}", "cmp", None),
])
def test_parse_cmp_iso(text, task_type, expected):
    assert parse_cmp_iso(text, task_type) == expected


def test_counted_forms_and_tv():
    assert counted_forms("The grandfather was", ["The grandfather"])
    assert not counted_forms("the grandfather", ["The grandfather"])  # the estimator's texts are case-exact
    assert not counted_forms("Answer: Unknown", ["Unknown"])
    assert tv_distance([1, 0], [0.25, 0.75]) == pytest.approx(0.75)
    assert tv_distance([0.2, 0.3, 0.5], [0.2, 0.3, 0.5]) == 0.0


def test_inside_allows_one_generation():
    from probe.studies.sampling_check import inside

    assert inside(1e-14, 0.0, 0.0, 1 / 2400)          # every sampled answer wrong, exact 1e-14: agree
    assert not inside(0.01, 0.0, 0.0, 1 / 2400)
    assert inside(0.9 + 1 / 4800, 0.1, 0.9, 1 / 2400)
    assert inside(float("nan"), 0.0, 1.0, 0.0) is None


def test_dist_drops_unparsed():
    assert _dist(np.array([-1, -1]), 2) is None
    np.testing.assert_allclose(_dist(np.array([0, 1, 1, -1]), 3), [1 / 3, 2 / 3, 0])


# -- aggregate rules --------------------------------------------------------------------------------------

def _case(qid, unit, raw=None):
    exact = None if raw is None else [raw[0] / sum(raw), raw[1] / sum(raw)]
    return PromptCase(id=qid, unit=unit, prompt="p", options=("a", "b"), exact=exact, exact_raw=raw,
                      exact_mass=sum(raw) if raw else 0.0, meta={"question_id": qid})


def test_hbb_share_by_hand():
    a = _HBB()
    a.instances = [("i0", "q1", "q2"), ("i1", "q1", "q3"), ("i2", "q3", "q4")]  # q1 in two identity pairs
    cases = [_case(q, q) for q in ("q1", "q2", "q3", "q4")]
    units = a.units(cases)
    assert [c.id for c in units["i1"]] == ["q1", "q3"]
    d = {"q1": np.array([0.8, 0.2]), "q2": np.array([0.7, 0.3]), "q3": np.array([0.5, 0.5]), "q4": None}
    m = a.metrics([(u, c, d[c.id]) for u, cs in units.items() for c in cs])
    # i0: |0.8 - 0.7| = 10 < 20; i1: 30 >= 20; i2: q4 has no answer -> undefined, never counted
    assert m == {"share_S>=20": pytest.approx(1 / 3), "n_instances": 3, "n_undefined": 1}
    # S exactly on the threshold counts (>=)
    m = a.metrics([("u", cases[0], np.array([0.7, 0.3])), ("u", cases[1], np.array([0.5, 0.5]))])
    assert m["share_S>=20"] == 1.0


def test_hbb_exact_is_the_k_sample_estimator():
    from probe.tasks.hbb.sampling import prob_s_at_least

    a = _HBB()
    a.instances = [("i0", "q1", "q2")]
    cases = [_case("q1", "q1", [0.6, 0.3]), _case("q2", "q2", [0.2, 0.2])]
    got = a.exact_metrics(cases, 20)["share_S>=20"]
    assert got == pytest.approx(float(prob_s_at_least([0.6], [0.3], [0.2], [0.2], n_samples=20)[0]))
    assert 0 < got < 1


def test_implicitbbq_metrics_by_hand():
    a = _ImplicitBBQ()
    base = {"context_condition": "ambig", "label": 0, "target_index": 1, "unknown_index": 0}
    cases = [PromptCase(id=i, unit=i, prompt="p", options=("U", "T", "O"),
                        meta={**base, "question_polarity": "neg", "context_kind": "implicit"}) for i in ("x", "y")]
    m = a.metrics([("x", cases[0], np.array([0.5, 0.5, 0.0])), ("y", cases[1], np.array([0.0, 0.0, 1.0]))])
    # Acc_amb = 0.5 / 2; non-unknown 1.5 of which 0.5 picks the target for a negative question:
    # S_amb = (1 - 0.25) * (2 * 0.5 / 1.5 - 1) = -0.25
    assert m["Acc_amb implicit"] == pytest.approx(0.25)
    assert m["S_amb implicit"] == pytest.approx(-0.25)
    assert m["n implicit"] == 2 and m["n explicit"] == 0 and math.isnan(m["Acc_amb explicit"])


# -- the shared-prefix sampler is sample_generate ------------------------------------------------------

def test_shared_prefix_sampler_matches_sample_generate(tiny_lm):
    from probe.scoring.generate import sample_generate

    prompts = ["Tell me about cats", "One two three four five"]
    seeds = [[11, 12, 13], [21, 22, 23]]
    for t, top_p in ((0.8, 1.0), (0.7, 0.9)):
        ours = sample_shared_prefix(tiny_lm, prompts, seeds, t, top_p, max_new_tokens=6)
        ref = sample_generate(tiny_lm, [p for p in prompts for _ in range(3)], [s for r in seeds for s in r], t,
                              top_p, max_new_tokens=6, batch_size=4)
        assert [x for row in ours for x in row] == ref
    again = sample_shared_prefix(tiny_lm, prompts, seeds, 0.8, 1.0, max_new_tokens=6)
    assert again == sample_shared_prefix(tiny_lm, prompts, seeds, 0.8, 1.0, max_new_tokens=6)


def test_runner_generate_with_a_shared_prefix_gives_the_same_texts(tiny_lm):
    from probe.runs.runner import RunOptions, Runner
    from probe.scoring.generate import GenerationRequest

    runner = Runner(tiny_lm, RunOptions(progress=False))
    prompts = ["Tell me about cats", "One two three four five"]
    reqs = [GenerationRequest(f"p{i}#{j}", p, max_new_tokens=5, group=f"p{i}", temperature=0.8, top_p=0.9, seed=3,
                              stop=("e",))
            for i, p in enumerate(prompts) for j in range(3)]
    shared = runner.generate(reqs, None, share_prefix=True)
    assert shared == runner.generate(reqs, None) and len(shared) == 6 and any(shared.values())
    assert not any("e" in t for t in shared.values())  # stop strings cut as on the batched path


# -- end to end on the tiny model ------------------------------------------------------------------------

def test_check_end_to_end_tiny(tiny_lm, shared_data, tmp_path):
    from probe.runs.runner import RunOptions, Runner, load
    from probe.studies.sampling_check import report_markdown, run_check

    opts = RunOptions(progress=False)
    runner = Runner(load(tiny_lm, opts), opts)
    # 12 tokens: the answer length both sides read (the published 2048 would take minutes on the tiny model)
    check = run_check("hbb", runner, n_prompts=16, k=3, n_boot=20, seed=0, max_new_tokens=12)
    s = check.summary
    assert s["k"] == 3 and s["n_generations"] == 3 * s["n_prompts"] and s["n_prompts"] >= 16
    for r in check.prompts:
        assert len(r["generations"]) == 3
        assert 0 <= r["accepted_share"] <= 1 and 0 <= r["exact_counted_share"] <= 1
        # the parsed labels are what the parser makes of the texts
        assert r["parsed"] == [None if parse_hbb(t) is None else "ab"[parse_hbb(t)] for t in r["generations"]]
    agg = check.aggregate["share_S>=20"]
    assert 0 <= agg["exact"] <= 1
    # the verdict is the same-prompts test, with its power; the sampled side is transformers' at HBB's settings
    assert "predicted_low" in agg and "detectable_difference" in agg and s["verdict"] in ("pass", "fail", "n/a")
    # where the sampled value falls among the exact side's draws, for pooling seeds
    assert 0.0 <= agg["sampled_quantile"] <= 1.0
    assert ("tail_sampled_quantile" in agg) == (s["n_hybrid"] > 0)
    assert ("tail_low" in agg) == ("tail_detectable_difference" in agg) == (s["n_hybrid"] > 0)
    assert check.settings["top_k"] == 50 and check.settings["repetition_penalty"] == 1.2
    # the exact side is the published estimator on the same sampler (parse_exact, the authors' top-k and penalty,
    # per path: 8 tokens enumerated, the hybrid tail to the judge's answer length); the first-token estimator
    # without the penalty is the baseline
    assert check.settings["parse"]["max_new_tokens"] == 8 and check.settings["parse"]["tail"] == "hybrid"
    assert check.settings["parse"]["tail_max_new_tokens"] == check.settings["max_new_tokens"] == 12
    assert s["n_outside_certified"] == 0 and s["n_hybrid"] >= 0
    assert s["parse_exact"]["mean_nodes"] > 0  # the enumeration's statistics: it ran
    assert check.settings["sampled_by"].startswith("transformers generate") and s["n_misses"] >= 0
    # how often the verdict's ranges miss by chance is stated beside it
    assert s["n_outside_range"] == sum(v.get("sampled_inside_tail", v.get("sampled_inside_predicted")) is False
                                       for v in check.aggregate.values())
    assert s["n_tested"] >= 1 and (math.isnan(s["chance_any_outside"]) or 0 <= s["chance_any_outside"] <= 1)
    json.dumps(check.to_dict(), default=str)
    md = report_markdown(check)
    assert "share_S>=20" in md and "Most frequent generations" in md and "Verdict" in md


def test_generation_kinds_by_hand():
    from probe.studies.sampling_check import SamplingCheck, generation_kinds

    rows = [{"generations": ["a) x", "b) y", "about", "a) x"], "parsed": ["a", "b", None, "a"],
             "counted": [True, False, False, True]}]
    kinds = generation_kinds(SamplingCheck("hbb", "m", {}, rows, {}, {}))
    assert kinds[(True, True)] == (0.5, [("a) x", 2)])
    assert kinds[(True, False)] == (0.25, [("b) y", 1)])
    assert kinds[(False, False)] == (0.25, [("about", 1)])


def test_predicted_range_by_hand():
    """The exact side's K-sample range on fixed prompts: a certain answer gives a point; a prompt that never
    parses drops out; the range of a share follows the binomial."""
    from probe.studies.sampling_check.check import predicted_range

    a = _ImplicitBBQ()
    base = {"context_condition": "ambig", "label": 0, "target_index": 1, "unknown_index": 0,
            "question_polarity": "neg", "context_kind": "implicit"}
    sure = PromptCase(id="x", unit="x", prompt="p", options=("U", "T", "O"), exact=[1.0, 0.0, 0.0], exact_mass=1.0,
                      meta=base)
    never = PromptCase(id="y", unit="y", prompt="p", options=("U", "T", "O"), exact=[0.0, 1.0, 0.0], exact_mass=0.0,
                       meta=base)
    r = predicted_range(a, {"x": [sure], "y": [never]}, 20, np.random.default_rng(0), draws=200)
    assert r["Acc_amb implicit"] == (1.0, 1.0)  # 'never' never parses, so only 'sure' counts
    half = PromptCase(id="z", unit="z", prompt="p", options=("U", "T", "O"), exact=[0.5, 0.5, 0.0], exact_mass=1.0,
                      meta=base)
    lo, hi = predicted_range(a, {"z": [half]}, 20, np.random.default_rng(0), draws=2000)["Acc_amb implicit"]
    # 20 draws at p = 0.5: the central 95 % of Binomial(20, 0.5) / 20 is [0.3, 0.7] (quantiles of a discrete law)
    assert lo == pytest.approx(0.3, abs=0.051) and hi == pytest.approx(0.7, abs=0.051)


def test_report_shows_the_predicted_range():
    from probe.studies.sampling_check import SamplingCheck, report_markdown

    summary = {"k": 2, "n_prompts": 1, "n_units": 1, "accepted_share": 1.0, "counted_share": 1.0,
               "exact_counted_share": 1.0, "accepted_not_counted": 0, "counted_not_accepted": 0, "n_delta": 1,
               "mean_abs_delta": 0.1, "mean_noise_delta": 0.1, "n_no_accepted": 0, "n_exact_unsampleable": 0}
    agg = {"Acc": {"exact": 0.5, "sampled": 0.9, "ci_low": 0.8, "ci_high": 1.0, "exact_inside": False,
                   "exact_same_prompts": 0.5, "predicted_low": 0.1, "predicted_high": 0.6,
                   "sampled_inside_predicted": False}}
    check = SamplingCheck("t", "m", {"temperature": 0.1, "top_p": 1.0, "max_new_tokens": 4, "unit": "item",
                                     "seed": 0, "n_boot": 10}, [], agg, summary)
    md = report_markdown(check)
    assert "K-sample range |" in md and "| [0.100, 0.600]: no |" in md
    # with hybrid prompts the tail's range is the verdict, and its power is stated beside it
    agg["Acc"].update(tail_low=0.05, tail_high=0.95, sampled_inside_tail=True, tail_detectable_difference=0.42)
    md = report_markdown(check)
    assert "smallest difference it detects |" in md and "| [0.050, 0.950]: yes | 0.420 |" in md
    # the verdict line states the rule, not a claim that holds only for a pass
    check.summary["verdict"] = "fail"
    assert "**Verdict: fail** (pass when every metric's sampled value lies inside" in report_markdown(check)


# -- the independent judge: transformers' generate --------------------------------------------------------

def test_judge_samples_with_transformers_not_probes_sampler(tiny_lm, monkeypatch):
    """The sampled side never calls probe's sampler; with top-k 1 every sample is generate's greedy text, so
    the settings reach transformers' own warpers; the same seed gives the same samples."""
    import torch

    import probe.scoring.sampler.sampling as sampling
    from probe.studies.sampling_check.judge import judge_texts, sampler_settings

    def forbidden(*_a, **_k):
        raise AssertionError("the judge must not use probe's sampling_distribution")

    monkeypatch.setattr(sampling, "sampling_distribution", forbidden)
    prompts = ["Hello there", "The man"]
    settings = sampler_settings(None, 1.0, 1.0)
    a = judge_texts(tiny_lm, prompts, 3, 0, settings, 5)
    assert [len(x) for x in a] == [3, 3] and a == judge_texts(tiny_lm, prompts, 3, 0, settings, 5)
    greedy = judge_texts(tiny_lm, prompts, 2, 1, {**settings, "top_k": 1}, 5)
    tok = tiny_lm.tokenizer
    for p, texts in zip(prompts, greedy):
        ids = tok(p, return_tensors="pt")["input_ids"]
        with torch.inference_mode():
            g = tiny_lm.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=5,
                                       pad_token_id=tok.pad_token_id or 0)
        eos = tiny_lm.model.generation_config.eos_token_id
        row = g[0, ids.shape[1]:].tolist()
        row = row[:next((i for i, t in enumerate(row) if t == eos), len(row))]
        assert texts == [tok.decode(row, skip_special_tokens=True)] * 2


def test_judge_with_several_prompts_a_call_pads_left_and_keeps_each_prompts_texts(tiny_lm):
    """Prompts sharing a generate call (left-padded, K rows each): with top-k 1 each prompt's texts are its own
    greedy ones, as alone, so padding moves no row onto another's prompt; one prompt a call is the default's
    stream exactly; a call's samples are reproducible and K per prompt, in the prompts' order."""
    from probe.studies.sampling_check.judge import judge_texts, sampler_settings

    prompts = ["Hello there", "The man who lived in the old house by the river", "A", "The woman"]
    settings = sampler_settings(None, 1.0, 1.0)
    alone = judge_texts(tiny_lm, prompts, 2, 1, {**settings, "top_k": 1}, 6)
    shared = judge_texts(tiny_lm, prompts, 2, 1, {**settings, "top_k": 1}, 6, prompts_per_call=3)
    assert shared == alone and len({t[0] for t in alone}) > 1
    assert judge_texts(tiny_lm, prompts, 3, 0, settings, 5, prompts_per_call=1) == judge_texts(
        tiny_lm, prompts, 3, 0, settings, 5)
    seen: list[int] = []
    a = judge_texts(tiny_lm, prompts, 3, 0, settings, 5, prompts_per_call=4, progress=seen.append)
    assert [len(x) for x in a] == [3] * 4 and seen == [4]
    assert a == judge_texts(tiny_lm, prompts, 3, 0, settings, 5, prompts_per_call=4)


def test_judge_runs_each_papers_sampler_explicitly():
    from probe.errors import ProbeError
    from probe.studies.sampling_check.judge import generate_kwargs, sampler_settings

    hbb = sampler_settings("hbb", 0.8, 1.0)
    assert (hbb["top_k"], hbb["repetition_penalty"], hbb["temperature"]) == (50, 1.2, 0.8)
    ibbq = generate_kwargs(sampler_settings("implicitbbq", 0.1, 1.0), 16)
    # top-k explicitly off (transformers would add 50), every warper a generation_config.json could add off
    assert ibbq["top_k"] == 0 and ibbq["min_p"] == 0.0 and ibbq["typical_p"] == 1.0 and ibbq["max_new_tokens"] == 16
    with pytest.raises(ProbeError, match="frequency"):
        sampler_settings("hbb-api", 0.8, 1.0)
    assert {get(t).paper.check().sampler for t in ("hbb", "implicitbbq", "cmp_iso")} == {"hbb", "implicitbbq",
                                                                                       "cmp_iso"}


def test_published_configuration_is_the_tasks_own():
    """The check runs the published run's parse settings (the task config's defaults), not its own."""
    for name in ("implicitbbq", "cmp_iso", "hbb"):
        task = get(name)
        cfg = task.paper.check().config(task, 10, 0, None)
        default = task.make_config({})
        for f in ("parse_max_new_tokens", "parse_residual", "parse_max_nodes", "parse_answer_residual"):
            assert getattr(cfg, f) == getattr(default, f), (name, f)
        assert task.paper.check().config(task, 10, 0, 7).parse_max_new_tokens == 7
    hbb = get("hbb")
    # HBB's published estimator is the hybrid: 8 tokens enumerated, the rest of the answer sampled to 2048
    assert hbb.paper.check().config(hbb, 10, 0, None).parse_tail == "hybrid"
    cfg = hbb.paper.check().config(hbb, 10, 0, 100)
    assert (cfg.parse_max_new_tokens, cfg.parse_tail_max_new_tokens, cfg.parse_tail) == (8, 100, "hybrid")


def test_hbb_judges_the_hybrid_value_where_the_head_parses_nothing(tiny_lm, shared_data, monkeypatch):
    """A question whose enumerated head parses nothing but whose tail draws do is judged on the published
    (hybrid) value: head + residual x tail share, not left without a distribution and counted a miss."""
    from probe.runs.runner import RunOptions, Runner, load
    from probe.studies.sampling_check.check import _cases, outside_certified, prompt_row

    opts = RunOptions(progress=False)
    runner = Runner(load(tiny_lm, opts), opts)
    real = runner.parse

    def head_parses_nothing(reqs, *a, **k):
        out = real(reqs, *a, **k)
        # the head found no parse; 4 tail draws: 3 read a), 1 no answer
        return {i: {**d, "probs": {}, "residual": 0.8, "hybrid": {"n_tail": 4, "tail": {"0": 3, "none": 1}}}
                for i, d in out.items()}

    monkeypatch.setattr(runner, "parse", head_parses_nothing)
    task, paper = get("hbb"), _HBB()
    cases, settings = _cases(task, paper, runner, 2, 0, 10)
    assert cases and settings["max_new_tokens"] == 10
    for c in cases:
        assert c.exact == [1.0, 0.0] and c.exact_mass == pytest.approx(0.6) and c.exact_raw == pytest.approx([0.6, 0.0])
        assert not outside_certified(paper, c)
        row, _d = prompt_row(paper, c, ["a) The man.", "b) The woman.", "no"], np.random.default_rng(0))
        assert not row["miss"] and row["abs_delta"] == pytest.approx(0.5)


@pytest.mark.parametrize("name, n_prompts", [("implicitbbq", 2), ("cmp_iso", 4)])
def test_the_parse_rate_follows_the_published_residual_rule(tiny_lm, shared_data, monkeypatch, name, n_prompts):
    """Where enumeration leaves a residual and no tail draws, the exact side's chance that one sample parses
    is the published point rule's (the residual answered in the enumerated mix, ``p / (1 - r)``), not the
    head's lower bound: sampling parses the residual too. The answer given a parse is the head's mix."""
    from probe.runs.runner import RunOptions, Runner, load
    from probe.studies.sampling_check.check import _cases, outside_certified, paper_check_of, prompt_row

    opts = RunOptions(progress=False)
    runner = Runner(load(tiny_lm, opts), opts)
    real = runner.parse
    task, paper = paper_check_of(name)
    keys: dict[str, list[str]] = {}

    def head_with_residual(reqs, *a, **k):
        out = real(reqs, *a, **k)
        # per prompt, its first two answers at 0.3 and 0.1 of the mass, 0.2 of it not enumerated
        return {i: {**d, "probs": dict(zip(keys[i][:2], (0.3, 0.1))), "residual": 0.2, "hybrid": None}
                for i, d in out.items()}

    monkeypatch.setattr(runner, "parse", head_with_residual)
    # the answer keys are known once the requests are: let the parse see them first
    real_requests, real_config = paper.requests, paper.config

    def requests(*a, **k):
        reqs = real_requests(*a, **k)
        for r in reqs:
            keys[r.id] = [str(i) for i in range(3)] if name == "implicitbbq" else list(r.labels)
        return reqs

    def zero_shot(*a, **k):  # few-shot prompts are longer than the tiny model's context
        cfg = real_config(*a, **k)
        return dataclasses.replace(cfg, strategies=["zero_shot"]) if name == "implicitbbq" else cfg

    monkeypatch.setattr(paper, "requests", requests)
    monkeypatch.setattr(paper, "config", zero_shot)
    got, _settings = _cases(task, paper, runner, n_prompts, 0, 4)
    assert got
    for c in got:
        assert c.exact_mass == pytest.approx(0.4 / 0.8)
        assert c.exact[:2] == pytest.approx([0.75, 0.25]) and sum(c.exact) == pytest.approx(1.0)
        assert not outside_certified(paper, c)
        row, _d = prompt_row(paper, c, ["x"], np.random.default_rng(0))
        assert row["exact_counted_share"] == pytest.approx(0.5) and row["exact_residual"] == pytest.approx(0.2)


def test_a_hybrid_prompt_whose_draws_read_nothing_is_judged_on_its_interval():
    """Head and 2 tail draws read nothing, residual 0.9: the parsed mass is not known to be 0 (Jeffreys'
    posterior of 0 / 2, Beta(0.5, 2.5), times 0.9), so a sampled parse is no miss; the redrawn answers give
    both letters width."""
    from probe.studies.sampling_check.check import parse_mass_interval, prompt_row, redrawn

    h = _HBB()
    h.counted = lambda _case, _text: False  # the first-token event needs a tokenizer; not what is tested here
    d = {"probs": {}, "rejected": 0.1, "residual": 0.9, "hybrid": {"n_tail": 2, "tail": {"none": 2}}}
    c = PromptCase(id="q", unit="q", prompt="p", options=("a", "b"), exact=None, exact_mass=0.0,
                   meta={"parsed": d})
    lo, hi = parse_mass_interval(c)
    assert lo == 0.0 and hi == pytest.approx(1.959963984540054 * 0.9 * math.sqrt(0.5 * 2.5 / (3 ** 2 * 4)))
    row, _d = prompt_row(h, c, ["a) x"] + ["no"] * 19, np.random.default_rng(0))
    assert not row["miss"] and row["accepted_inside_interval"] and math.isnan(row["abs_delta"])
    masses = [redrawn(h, c, np.random.default_rng(i))[1] for i in range(50)]
    assert max(masses) > 0.05  # the letters no draw read still have width (before: always 0)
    # a prompt without tail draws keeps the old rule: a sampled parse without an exact one is a miss
    plain = PromptCase(id="r", unit="r", prompt="p", options=("a", "b"), exact=None, exact_mass=0.0, meta={})
    assert parse_mass_interval(plain) is None and prompt_row(h, plain, ["a) x"], np.random.default_rng(0))[0]["miss"]


def test_the_tail_range_draws_each_prompt_from_its_own_draws():
    """Questions whose head and tail draws read no letter: redrawn from its own draws alone (nothing pooled
    across prompts), a question's parsed mass shrinks as its own empty draws grow."""
    from probe.studies.sampling_check.check import redrawn

    h = _HBB()

    def case(n):
        d = {"probs": {}, "rejected": 0.01, "residual": 0.99, "hybrid": {"n_tail": n, "tail": {"none": n}}}
        return PromptCase(id="q", unit="u", prompt="p", options=("a", "b"), exact=None, exact_mass=0.0,
                          meta={"parsed": d})

    rng = np.random.default_rng(0)
    few = [redrawn(h, case(2), rng)[1] for _ in range(400)]
    many = [redrawn(h, case(40), rng)[1] for _ in range(400)]
    assert np.mean(few) > 0.1 and np.mean(many) < 0.03  # Jeffreys: 0.5 / 3 and 0.5 / 41 of the residual


def test_tail_range_holds_the_hybrids_uncertainty():
    """A hybrid prompt's answer is redrawn from its tail draws' uncertainty; a prompt without draws keeps its
    point; the range with the tail's uncertainty is at least as wide; a point outside [head, head + residual]
    is flagged."""
    from probe.studies.sampling_check.check import outside_certified, predicted_range, redrawn

    a = _ImplicitBBQ()
    base = {"context_condition": "ambig", "label": 0, "target_index": 1, "unknown_index": 0,
            "question_polarity": "neg", "context_kind": "implicit"}
    opts = ("U", "T", "O")
    # the parser names an answer by its option index ("0" is U)
    d = {"probs": {"0": 0.1}, "residual": 0.8, "hybrid": {"n_tail": 2, "tail": {"0": 1, "none": 1}}}
    c = PromptCase(id="x", unit="x", prompt="p", options=opts, exact=[1.0, 0.0, 0.0], exact_mass=0.5,
                   meta={**base, "parsed": d})
    rng = np.random.default_rng(0)
    draws = [redrawn(a, c, rng) for _ in range(200)]
    masses = [m for _e, m in draws]
    assert all(0.1 <= m <= 0.9 + 1e-12 for m in masses) and np.std(masses) > 0.05
    plain = PromptCase(id="y", unit="y", prompt="p", options=opts, exact=[0.5, 0.5, 0.0], exact_mass=1.0, meta=base)
    assert redrawn(a, plain, rng) == ([0.5, 0.5, 0.0], 1.0)
    assert not outside_certified(a, c)
    bad = PromptCase(id="z", unit="z", prompt="p", options=opts, exact=[1.0, 0.0, 0.0], exact_mass=0.95,
                     meta={**base, "parsed": d})
    assert outside_certified(a, bad)  # 0.95 > head 0.1 + residual 0.8
    # the Acc_amb share of a prompt whose 'U' mass is 0.5 +- the tail's spread: the tail range is wider
    half = PromptCase(id="h", unit="h", prompt="p", options=opts, exact=[0.5, 0.5, 0.0], exact_mass=1.0,
                      meta={**base, "parsed": {"probs": {"0": 0.3, "1": 0.3}, "residual": 0.4,
                                               "hybrid": {"n_tail": 2, "tail": {"0": 1, "1": 1}}}})
    p0 = predicted_range(a, {"h": [half]}, 20, np.random.default_rng(0), draws=2000)["Acc_amb implicit"]
    from probe.studies.sampling_check.check import predicted_draws
    from probe.metrics.stats import percentile_ci

    p1 = percentile_ci(predicted_draws(a, {"h": [half]}, 20, np.random.default_rng(0), 2000, tail=True)
                       ["Acc_amb implicit"])
    assert p1[0] <= p0[0] and p1[1] >= p0[1] and (p1[1] - p1[0]) > (p0[1] - p0[0])


def test_a_sampled_parse_without_an_enumerated_one_is_a_miss():
    from probe.studies.sampling_check.check import prompt_row

    a = _ImplicitBBQ()
    meta = {"unknown_index": 0, "scored_texts": ["Unknown", "The grandfather", "The grandson"]}
    c = PromptCase(id="x", unit="x", prompt="p", options=("Unknown", "The grandfather", "The grandson"), exact=None,
                   exact_mass=0.0, meta=meta)
    row, d = prompt_row(a, c, ["Grandson", "Hello"], np.random.default_rng(0))
    assert row["miss"] and row["abs_delta"] == 1.0 and list(d) == [0.0, 0.0, 1.0]
    row, d = prompt_row(a, c, ["Hello", "Hello"], np.random.default_rng(0))
    assert not row["miss"] and d is None and math.isnan(row["abs_delta"])


def test_verdict_and_power_by_hand():
    from probe.studies.sampling_check.check import _verdict, detectable_difference

    assert _verdict({"a": {"sampled_inside_predicted": True}, "n": {"sampled": 3}}) == "pass"
    assert _verdict({"a": {"sampled_inside_predicted": True}, "b": {"sampled_inside_predicted": False}}) == "fail"
    assert _verdict({"n": {"sampled": 3}}) == "n/a"
    # with hybrid prompts the range with the tail's uncertainty decides
    assert _verdict({"a": {"sampled_inside_predicted": False, "sampled_inside_tail": True}}) == "pass"
    assert _verdict({"a": {"sampled_inside_predicted": True, "sampled_inside_tail": False}}) == "fail"
    # sd 0.5 (draws 0 / 1): 2.80 x 0.5; no spread: 0; one draw: NaN
    assert detectable_difference([0.0, 1.0] * 500) == pytest.approx(2.8016 * 0.50025, rel=1e-3)
    assert detectable_difference([0.3] * 10) == pytest.approx(0.0, abs=1e-12) and math.isnan(detectable_difference([0.3]))
    # a wider (joint) range detects less: z of 99 % two-sided is 2.576
    assert detectable_difference([0.0, 1.0] * 500, 0.99) == pytest.approx((2.5758 + 0.8416) * 0.50025, rel=1e-3)


def test_joint_ranges_hold_all_metrics_together():
    """Eight independent metrics: ranges of 95 % each miss together in 34 % of draws; the joint ranges hold all
    eight in 95 % (on these draws and on fresh ones), each at a per-metric level near Sidak's 0.95^(1/8)."""
    from probe.studies.sampling_check.check import chance_outside, joint_ranges

    rng = np.random.default_rng(1)
    draws = {f"m{i}": list(rng.normal(size=20000)) for i in range(8)}
    draws["n m"] = [3] * 20000
    ranges, each = joint_ranges(draws)
    assert 1 - 0.05 / 8 >= each >= 0.95 ** (1 / 8) - 0.002
    assert chance_outside(draws, ranges, 1)["chance_any_outside"] == pytest.approx(0.05, abs=0.004)
    fresh = {m: list(rng.normal(size=20000)) for m in draws if not m.startswith("n")}
    assert chance_outside(fresh, ranges, 1)["chance_any_outside"] == pytest.approx(0.05, abs=0.01)
    # count metrics keep their plain range
    assert ranges["n m"] == (3.0, 3.0)


def test_joint_ranges_of_metrics_that_move_together_stay_at_95():
    """Metrics that are one quantity (perfectly correlated) need no widening; one metric, none to join; a
    metric without finite draws is not tested; a NaN draw counts as inside."""
    from probe.studies.sampling_check.check import joint_ranges

    base = list(np.linspace(0.0, 1.0, 1001))
    same = {"a": base, "b": [2 * x for x in base], "c": [float("nan")] * 1001}
    ranges, each = joint_ranges(same)
    assert each == 0.95
    assert ranges["a"] == pytest.approx((0.025, 0.975), abs=1e-3)
    assert ranges["b"] == pytest.approx((0.05, 1.95), abs=2e-3)
    assert all(math.isnan(x) for x in ranges["c"])
    assert joint_ranges({"a": base, "n": [1] * 1001})[1] == 0.95
    # two metrics that miss in different draws (b is a turned half way): each range must widen to Bonferroni's
    # 97.5 %, no further
    apart = {"a": base, "b": base[500:] + base[:500]}
    _ranges, each = joint_ranges(apart)
    assert 0.974 <= each <= 0.975 + 1e-12


def test_chance_of_misses_by_hand():
    """The share of the exact side's draws with at least one, and at least the observed number, of metrics
    outside their own ranges; count metrics and metrics without a finite range are not tested; a NaN draw is
    inside; one generation's worth of resolution widens each range as the verdict does."""
    from probe.studies.sampling_check.check import chance_outside

    draws = {"a": [0.0, 1.0, 2.0, 3.0, float("nan")], "b": [0.0, 0.0, 5.0, 5.0, 0.0],
             "c": [9.0] * 5, "n a": [1, 2, 3, 4, 5]}
    ranges = {"a": (0.5, 2.5), "b": (0.0, 4.0), "c": (float("nan"), float("nan")), "n a": (2, 3)}
    out = chance_outside(draws, ranges, 2)
    # draws outside: a at 0 and 3; b at 2 and 3 -> counts per draw 1, 0, 1, 2, 0
    assert out == {"n_tested": 2, "n_outside_range": 2, "chance_any_outside": 0.6, "chance_as_many_outside": 0.2}
    # with nothing observed outside, the second share is the first (at least one)
    assert chance_outside(draws, ranges, 0)["chance_as_many_outside"] == 0.6
    # a resolution of 0.5 takes a's 0.0 and 3.0 back inside
    assert chance_outside(draws, ranges, 1, resolution=0.5)["chance_any_outside"] == 0.4
    assert math.isnan(chance_outside({}, {}, 0)["chance_any_outside"])


def test_independent_metrics_miss_as_often_as_their_count_says():
    """Eight independent metrics, each with a central 95 % range: at least one misses in about
    1 - 0.95^8 = 34 % of draws, two or more in about 5.7 % (the binomial)."""
    from probe.metrics.stats import percentile_ci
    from probe.studies.sampling_check.check import chance_outside

    rng = np.random.default_rng(0)
    draws = {f"m{i}": list(rng.normal(size=20000)) for i in range(8)}
    out = chance_outside(draws, {m: percentile_ci(v) for m, v in draws.items()}, 2)
    assert out["chance_any_outside"] == pytest.approx(1 - 0.95 ** 8, abs=0.015)
    assert out["chance_as_many_outside"] == pytest.approx(1 - 0.95 ** 8 - 8 * 0.05 * 0.95 ** 7, abs=0.008)


def test_report_states_the_chance_of_misses():
    from probe.studies.sampling_check import SamplingCheck, report_markdown

    summary = {"k": 2, "n_prompts": 1, "n_units": 1, "accepted_share": 1.0, "counted_share": 1.0,
               "exact_counted_share": 1.0, "accepted_not_counted": 0, "counted_not_accepted": 0, "n_delta": 1,
               "mean_abs_delta": 0.1, "mean_noise_delta": 0.1, "n_no_accepted": 0, "n_exact_unsampleable": 0,
               "verdict": "fail", "n_tested": 8, "n_outside_range": 2, "chance_any_outside": 0.334,
               "chance_as_many_outside": 0.058}
    check = SamplingCheck("t", "m", {"temperature": 0.1, "top_p": 1.0, "max_new_tokens": 4, "unit": "item",
                                     "seed": 0, "n_boot": 10}, [], {}, summary)
    md = report_markdown(check)
    assert "Metrics outside their range: 2 of 8." in md and "in 33.4 % of runs" in md and "2 or more in 5.8 %" in md
    summary.update(range_level_each=0.9912, chance_any_outside=0.05)
    md = report_markdown(check)
    assert "all 8 together in 95 % of runs, each metric's range its central 99.1 %" in md and "in 5.0 % of runs" in md


def test_draw_quantile_is_uniform_for_a_value_drawn_like_the_draws():
    """A sampled value drawn as the exact side's draws are falls anywhere among them with equal chance, so the
    seeds' quantiles pool (their probits add); ties count half, the ends are 0 and 1."""
    from scipy.stats import kstest

    from probe.studies.sampling_check.check import draw_quantile

    rng = np.random.default_rng(3)
    draws = rng.binomial(40, 0.3, 2000) / 40  # ties, as a share of K answers has
    q = [draw_quantile(float(v), draws) for v in rng.binomial(40, 0.3, 400) / 40]
    assert abs(np.mean(q) - 0.5) < 0.03 and kstest(q, "uniform").pvalue > 0.001
    assert draw_quantile(-1.0, draws) == 0.0 and draw_quantile(2.0, draws) == 1.0
    assert draw_quantile(0.3, [0.3, 0.3]) == 0.5 and math.isnan(draw_quantile(math.nan, draws))
