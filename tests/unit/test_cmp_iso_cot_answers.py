"""iso/cmp chain-of-thought as the authors run it (issue #23 part 3), on hand-made cases.

- the CoT prompt layout: the authors' chat messages (header as system, the rest as user) for every
  benchmark, prompt, variation, neutral option and "answer randomly" setting (8 x 4 x 54 x 2 x 2 = 13,824
  renders), rendered under SmolLM2's own template, which injects a default system prompt when none is given;
- the final label after a chain: the authors' regex (``extract_prediction``) and the label's surface forms;
- prompts with no valid answer are kept (seed 003 appendix B: iso affirmation 0, cmp order 0.5) and counted;
- ``probe metrics cmp-iso`` maps y / n / s and reads chains without a valid answer as the task does.
"""

from __future__ import annotations

import json
import math

import pytest

from probe.tasks.cmp_iso.data import BENCHMARK_FILES, load_benchmark
from probe.tasks.cmp_iso.prompts import (
                                         N_VARIANTS,
                                         CmpIsoSetting,
                                         authors_prompt,
                                         build_prompt,
                                         cot_answer_forms,
                                         cot_answer_prompt,
                                         last_boxed,
                                         parse_boxed,
                                         render_built,
                                         )
from probe.tasks import get
from probe.tasks.cmp_iso.summary import run_summary

TASK = get("cmp_iso")
# SmolLM2-135M-Instruct's chat template, verbatim: without a system message it writes its own
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


@pytest.fixture(scope="module")
def smol_tok():
    from tests.tiny import tiny_tokenizer

    return tiny_tokenizer(SMOLLM2_TEMPLATE)


# -- 1. the CoT prompt layout -------------------------------------------------------------------------------------
def test_cot_layout_is_the_authors_for_every_benchmark_and_variation(smol_tok, shared_data):
    """2 pairs x 4 prompts x 8 benchmarks x 54 variations x neutral x randomly = 13,824 renders (the audit's
    count). Each CoT render = the authors' generation-mode messages (system header, user = instructions + task +
    footer) under the model's template, plus the assistant header; never the model's default system prompt."""
    n = 0
    for bench in BENCHMARK_FILES:
        pairs = load_benchmark(bench, shared_data / "cmp_iso")[:2]
        for p in (p for pair in pairs for p in pair.prompts()):
            for variant in range(N_VARIANTS):
                for neutral in (False, True):
                    for randomly in (False, True):
                        built = build_prompt(p, CmpIsoSetting("cot", neutral, randomly, variant))
                        msgs = authors_prompt(p, "cot", neutral, randomly, variant, chat=True)
                        assert [m["role"] for m in msgs] == ["system", "user"]
                        assert (built.system, built.user, built.prefill) == (msgs[0]["content"], msgs[1]["content"],
                                                                             None)
                        text = render_built(smol_tok, built)
                        # the authors render with add_generation_prompt=False (set_chat_params); we add the
                        # assistant header (documented departure), so theirs is our text without it
                        theirs = smol_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False)
                        assert text == theirs + "<|im_start|>assistant\n"
                        assert text.startswith("<|im_start|>system\n" + msgs[0]["content"] + "<|im_end|>\n")
                        assert "SmolLM" not in text and text.count("<|im_start|>system") == 1
                        n += 1
    assert n == 13824


def test_cot_layout_plain_and_without_system_role(shared_data):
    from tests.tiny import NO_SYSTEM, tiny_tokenizer

    pair = load_benchmark("bbq", shared_data / "cmp_iso")[0]
    p = pair.prompts()[2]
    built = build_prompt(p, CmpIsoSetting("cot"))

    class Plain:  # no chat template: the authors' plain string (their --is_chat False), the released prompt
        chat_template = None

    assert render_built(Plain(), built) == authors_prompt(p, "cot") == built.system + "\n" + built.user
    # a template without a system role gets the header folded into the user turn
    text = render_built(tiny_tokenizer(NO_SYSTEM), built)
    assert text.startswith("<start_of_turn>user\n" + built.system) and text.endswith("<start_of_turn>model\n")


# -- 2. the final label after a chain ------------------------------------------------------------------------------
ISO, CMP = ("Yes", "No"), ("A", "B")


@pytest.mark.parametrize("text, labels, want", [
    ("so \\boxed{yes}", ISO, "Yes"),  # any case
    ("so \\boxed{YES}.", ISO, "Yes"),
    ("\\boxed{Y}", ISO, "Yes"),  # the authors' one-letter iso answers
    ("\\boxed{n}", ISO, "No"),
    ("\\boxed{s}", ISO + ("Skip",), "Skip"),
    ("answer: boxed{A}", CMP, "A"),  # no backslash needed (their regex is boxed\{...\})
    ("\\boxed{ A }", CMP, None),  # spaces inside: no match
    ("\\boxed{A.}", CMP, None),  # anything else inside: no match
    ("\\boxed{\\text{A}}", CMP, None),
    ("\\boxed{A} then \\boxed{maybe}", CMP, "A"),  # a non-label box is no match, the last label box counts
    ("\\boxed{A} then \\boxed{C}", CMP, None),  # C not offered: the last answer is invalid, no fallback to A
    ("\\boxed{Yes} ... \\boxed{skip}", ISO, None),  # Skip not offered
    ("\\boxed{Yes} ... \\boxed{s}", ISO, None),
    ("\\boxed{y}", CMP, None),  # y is no cmp answer
    ("b} because", CMP, "B"),  # their "\boxed{" + text + "}" wrapping: a generation starting with the answer
    ("no", ISO, "No"),  # ... or consisting of it
    ("so it is \\boxed{B", CMP, "B"),  # ... or cut off right after it
    ("nothing boxed", CMP, None),
])
def test_parse_boxed_is_the_authors_regex(text, labels, want):
    assert parse_boxed(text, labels) == want


def _authors_extract(prediction: str, op_map: dict) -> int:
    """The authors' ``extract_prediction`` (result_analysis/extractor.py), re-typed as an oracle."""
    import re

    pattern = "|".join(map(re.escape, map(str, op_map)))
    matches = re.findall(r"boxed\{(" + pattern + r")\}", ("\\boxed{" + prediction + "}").lower())
    return op_map[matches[-1]] if matches else -1


def test_parse_boxed_agrees_with_the_authors_extractor():
    map_iso = {"yes": 0, "no": 1, "y": 0, "n": 1, "skip": 2, "s": 2}
    map_cmp = {"a": 0, "b": 1, "c": 2}
    texts = ["", "x", "A", "a}", "\\boxed{A}", "\\boxed{ b}", "Boxed{C}", "\\BOXED{b} \\boxed{a}", "\\boxed{ab}",
             "\\boxed{yes}\\boxed{No}", "\\boxed{Y} boxed{skip}", "\\boxed{S", "yes", "\\boxed{{A}}", "\\boxed{B}}",
             "İ \\boxed{a} İ", "\\boxed{n} and \\boxed{yes.}"]
    for t in texts:
        for labels, amap, names in ((("Yes", "No", "Skip"), map_iso, ("Yes", "No", "Skip")),
                                    (("A", "B", "C"), map_cmp, ("A", "B", "C"))):
            got = parse_boxed(t, labels)
            ref = _authors_extract(t, amap)
            assert got == (None if ref == -1 else names[ref]), t
            # with two labels offered, the authors zero the neutral answer: invalid
            got2 = parse_boxed(t, labels[:2])
            assert got2 == (None if ref in (-1, 2) else names[ref]), t


def test_answer_position_and_scoring_prompt():
    gen = " Let me think. \\boxed{A} no wait, boxed{b}."
    a = last_boxed(gen, CMP)
    assert (a.named, a.label) == ("B", "B") and gen[a.start] == "b" and gen[:a.start].endswith("boxed{")
    prompt, found = cot_answer_prompt("<P>", gen, CMP)
    assert found and prompt == "<P> Let me think. \\boxed{A} no wait, boxed{"
    # lower-casing that changes a character's length ("İ" -> 2 chars) does not shift the position
    gen = "İİ \\boxed{Yes}"
    a = last_boxed(gen, ISO)
    assert gen[a.start:a.start + 3] == "Yes"
    # the answer at the very start (the wrapping prefix): scored right after the rendered prompt
    assert cot_answer_prompt("<P>", "A} since", CMP) == ("<P>", True)
    # an unoffered last label: invalid, scored (only with cot_require_cue false) after an appended cue
    prompt, found = cot_answer_prompt("<P>", "\\boxed{A} \\boxed{C} ", CMP)
    assert not found and prompt == "<P>\\boxed{A} \\boxed{C}\nFinal answer: \\boxed{"


def test_cot_answer_forms_are_the_direct_forms_without_spaces_plus_y_n_s():
    assert cot_answer_forms(("Yes", "No", "Skip")) == (("Yes", "yes", "YES", "y", "Y"), ("No", "no", "NO", "n", "N"),
                                                       ("Skip", "skip", "SKIP", "s", "S"))
    assert cot_answer_forms(("A", "B", "C")) == (("A", "a"), ("B", "b"), ("C", "c"))
    with pytest.raises(ValueError, match="neither"):
        cot_answer_forms(("Person A", "Person B"))


def test_cot_requests_score_the_forms_at_the_authors_answer(shared_data):
    from probe.tasks.cmp_iso.task import SampledPair, request_id
    from tests.tiny import tiny_tokenizer

    tok = tiny_tokenizer()
    pair = load_benchmark("stereoset", shared_data / "cmp_iso")[0]
    config = TASK.make_config({"benchmarks": ["stereoset"], "settings": [{"reasoning": "cot"}], "cot_chains": 2})
    items = [SampledPair(pair, 0)]
    gens = {g.id: "" for g in TASK.paper.generation_requests(config, items, tok)}
    setting = CmpIsoSetting("cot")
    iso_t = request_id(setting, "stereoset", pair.context_pair_id, "iso", "t")
    cmp_t = request_id(setting, "stereoset", pair.context_pair_id, "cmp", "t_first")
    gens[iso_t + "|chain0"] = "It is odd. \\boxed{y}"
    gens[iso_t + "|chain1"] = "\\boxed{ Yes }"  # spaces inside: no valid answer
    gens[cmp_t + "|chain0"] = "\\boxed{A} or \\boxed{C}"  # C not offered: no valid answer, no fallback
    gens[cmp_t + "|chain1"] = "I pick boxed{b}"
    reqs = {r.id: r for r in TASK.requests(config, items, tok, gens)}
    r = reqs[iso_t + "|chain0"]
    assert r.meta["boxed_found"] and r.prompt.endswith("It is odd. \\boxed{")
    assert r.forms == (("Yes", "yes", "YES", "y", "Y"), ("No", "no", "NO", "n", "N"))
    assert r.prompt.startswith("<|im_start|>system\nYou are a helpful assistant. <|im_end|>\n<|im_start|>user\n")
    assert not reqs[iso_t + "|chain1"].meta["boxed_found"]
    assert not reqs[cmp_t + "|chain0"].meta["boxed_found"]
    c = reqs[cmp_t + "|chain1"]
    assert c.meta["boxed_found"] and c.prompt.endswith("I pick boxed{") and c.forms == (("A", "a"), ("B", "b"))


# -- 3. prompts with no valid answer: kept and counted ---------------------------------------------------------------
def cfg(**kw):
    base = {"benchmarks": ["stereoset"], "settings": [{"reasoning": "cot"}], "n_boot": 50, "n_iter": 50,
            "paper_temperature": None, "cot_chains": 2}
    return TASK.make_config({**base, **kw})


def _row(cp, tt, slot, k, probs, boxed=True, sampling=None, setting="cot"):
    labels = ["Yes", "No"] if tt == "iso" else ["A", "B"]
    r = {"id": f"{setting}|stereoset|{cp}|{tt}|{slot}" + ("" if k is None else f"|chain{k}"), "setting": setting,
         "base_setting": setting, "variant": 0, "reasoning": setting, "benchmark": "stereoset",
         "context_pair_id": cp, "task_type": tt, "target": slot if tt == "iso" else None,
         "order": slot if tt == "cmp" else None, "options": labels, "probs": probs, "mass": 0.9, "finite": True,
         "chain": k, "boxed_found": boxed if setting == "cot" else None, "generation": ""}
    if sampling is not None:
        r["sampling"] = [{"temperature": 0.7, "top_p": 0.9, "probs": sampling[0], "mass": sampling[1]}]
    return r


def _no_valid_rows():
    """Pair 1: iso t no valid chain, t' Yes (0.6 + 0.2) / 2 = 0.4; cmp t first no valid chain, t' first B 0.7.
    Pair 2: every chain of every prompt without a valid answer."""
    bad = [0.5, 0.5]
    rows = [_row(1, "iso", "t", k, bad, boxed=False) for k in (0, 1)]
    rows += [_row(1, "iso", "t_prime", 0, [0.6, 0.4]), _row(1, "iso", "t_prime", 1, [0.2, 0.8])]
    rows += [_row(1, "cmp", "t_first", k, bad, boxed=False) for k in (0, 1)]
    rows += [_row(1, "cmp", "t_prime_first", k, [0.3, 0.7]) for k in (0, 1)]
    rows += [_row(2, tt, slot, k, bad, boxed=False) for tt, slots in (("iso", ("t", "t_prime")),
                                                                        ("cmp", ("t_first", "t_prime_first")))
             for slot in slots for k in (0, 1)]
    return rows


def test_no_valid_answer_pairs_kept_with_the_papers_rule():
    s = run_summary(_no_valid_rows(), cfg())
    r = next(x for x in s["results"] if x["mode"] == "expected")
    # iso pair 1: a_t = 0 (no valid answer), a_t' = 0.4 -> p_t = 0 -> gap -1; pair 2: no affirmation -> 0.5 -> 0
    assert r["iso"]["n_pairs"] == 2 and r["iso"]["pg"] == pytest.approx(-0.5)
    # cmp pair 1: t first 0.5, t' first (t is B) 0.7 -> p_t 0.6 -> gap 0.2; pair 2: 0.5 and 0.5 -> 0
    assert r["cmp"]["n_pairs"] == 2 and r["cmp"]["pg"] == pytest.approx(0.1)
    assert (r["iso"]["n_no_valid"], r["iso"]["n_pairs_no_valid"]) == (3, 2)
    assert (r["cmp"]["n_no_valid"], r["cmp"]["n_pairs_no_valid"]) == (3, 2)
    assert r["iso"]["n_baseline"] == 1 and r["cmp"]["n_baseline"] == 3
    a = next(x for x in s["results"] if x["mode"] == "argmax")  # argmax: t' Yes/No -> 0.5; t' first B, B -> 1
    assert a["iso"]["pg"] == pytest.approx(-0.5) and a["cmp"]["pg"] == pytest.approx(0.25)
    nv = s["no_valid_answer"]
    assert nv["by_mode"]["expected"] == {"n_prompts_iso": 3, "n_prompts_cmp": 3, "n_pairs_iso": 2, "n_pairs_cmp": 2}
    assert nv["by_cell"][0]["n_pairs_iso_total"] == 2 and "appendix B" in nv["rule"]
    assert s["cot"]["n_prompts_no_valid_chain"] == 6 and s["cot"]["n_chains_no_cue"] == 12
    # PG on chain k alone applies the same rule: chain 0 iso pair 1 a_t' = 0.6 -> gap -1, pair 2 -> 0
    cell = s["cot"]["by_cell"]["cot|stereoset"]
    assert cell["pg_by_chain"]["expected"]["iso"] == pytest.approx([-0.5, -0.5])
    assert cell["pg_by_chain"]["expected"]["cmp"] == pytest.approx([0.1, 0.1])
    # no prompt has a valid answer -> it carries no label mass: not "answering"
    assert r["answering_only"] is None or r["answering_only"]["iso"]["n_pairs"] == 0


def test_every_chain_without_a_boxed_label_gives_pg_zero_not_nan():
    """The run of the issue: every chain lacks a boxed label. Before: PG NaN, n_pairs 0."""
    rows = [x for x in _no_valid_rows() if x["context_pair_id"] == 2]
    rows += [{**x, "context_pair_id": 3, "id": x["id"].replace("|2|", "|3|")} for x in rows]
    r = next(x for x in run_summary(rows, cfg())["results"] if x["mode"] == "expected")
    assert (r["iso"]["pg"], r["iso"]["n_pairs"], r["cmp"]["pg"], r["cmp"]["n_pairs"]) == (0.0, 2, 0.0, 2)
    assert r["cmp_vs_iso"]["n_pairs"] == 2 and r["iso"]["n_no_valid"] == 4


def test_paper_mode_prompt_with_no_sampleable_label_has_no_valid_answer():
    """Direct records: iso t's labels all fall outside the nucleus, so under the authors' sampling it never
    yields a label: no valid answer (a_t = 0), not dropped."""
    rows = [_row(1, "iso", "t", None, [0.7, 0.3], setting="direct", sampling=([None, None], None)),
            _row(1, "iso", "t_prime", None, [0.4, 0.6], setting="direct", sampling=([0.25, 0.75], 0.5))]
    s = run_summary(rows, cfg(settings=[{"reasoning": "direct"}], paper_temperature=0.7))
    e = next(x for x in s["results"] if x["mode"] == "expected")
    p = next(x for x in s["results"] if x["mode"] == "paper")
    assert e["iso"]["pg"] == pytest.approx(2 * 0.7 / 1.1 - 1) and e["iso"]["n_no_valid"] == 0
    # paper: a_t = 0, a_t' = 0.25 -> p_t = 0 -> gap -1
    assert p["iso"]["pg"] == pytest.approx(-1.0) and p["iso"]["n_pairs"] == 1 and p["iso"]["n_no_valid"] == 1
    assert s["paper_equivalent"]["n_unsampleable"] == 1
    assert s["no_valid_answer"]["by_mode"]["paper"]["n_prompts_iso"] == 1
    assert s["no_valid_answer"]["by_mode"]["expected"]["n_prompts_iso"] == 0


# -- 4. probe metrics cmp-iso maps answers as the task does ------------------------------------------------------------
def test_metrics_command_maps_y_n_s_and_case(tmp_path, capsys):
    from probe.cli import main as cli_main

    lines = [
        {"context_pair_id": 1, "task_type": "iso", "target": "t", "answers": ["y", "Y", "yes", "n", "x"]},
        {"context_pair_id": 1, "task_type": "iso", "target": "t_prime", "answers": ["N", "no", "y", "x"]},
    ]
    f = tmp_path / "in.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert cli_main(["metrics", "cmp-iso", "--input", str(f), "--n-iter", "50", "--n-boot", "20"]) == 0
    out = json.loads(capsys.readouterr().out)
    # y / n any case; "x" invalid: a_t = 3/4, a_t' = 1/3 -> p_t = 0.75 / (0.75 + 1/3)
    p_t = 0.75 / (0.75 + 1 / 3)
    assert out["iso"]["pg"] == pytest.approx(2 * p_t - 1) and out["neutral_share"]["iso"] is None
    # "s" is Skip, a valid answer once the neutral option was offered (chosen or listed): a_t = 3/5
    lines[0]["answers"][-1] = "s"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert cli_main(["metrics", "cmp-iso", "--input", str(f), "--n-iter", "50", "--n-boot", "20"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["iso"]["pg"] == pytest.approx(2 * 0.6 / (0.6 + 1 / 3) - 1)
    assert out["neutral_share"]["iso"] == pytest.approx((1 / 5 + 0 / 3) / 2)
    # probs keyed by any case / y-n: summed per label
    lines = [{"context_pair_id": 1, "task_type": "iso", "target": "t", "probs": {"yes": 0.5, "Y": 0.1, "no": 0.4}},
             {"context_pair_id": 1, "task_type": "iso", "target": "t_prime", "probs": {"Yes": 0.2, "No": 0.8}}]
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert cli_main(["metrics", "cmp-iso", "--input", str(f), "--n-iter", "50", "--n-boot", "20"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["iso"]["pg"] == pytest.approx(2 * 0.6 / 0.8 - 1)


def test_metrics_command_reads_chains_without_valid_answer_as_none(tmp_path, capsys):
    """A task record of a chain without a valid boxed answer: the prompt has no valid answer (as in the task)."""
    from probe.cli import main as cli_main

    def rec(tt, slot, probs, boxed):
        return {"id": f"cot|bbq|1|{tt}|{slot}|chain0", "options": ["A", "B"] if tt == "cmp" else ["Yes", "No"],
                "probs": probs, "finite": True,
                "meta": {"context_pair_id": 1, "task_type": tt, "target": slot if tt == "iso" else None,
                         "order": slot if tt == "cmp" else None, "setting": "cot", "chain": 0, "boxed_found": boxed}}

    recs = [rec("cmp", "t_first", [0.9, 0.1], False), rec("cmp", "t_prime_first", [0.3, 0.7], True),
            rec("iso", "t", [0.9, 0.1], False), rec("iso", "t_prime", [0.6, 0.4], True)]
    f = tmp_path / "records.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in recs) + "\n")
    assert cli_main(["metrics", "cmp-iso", "--input", str(f), "--where", "chain=0", "--n-iter", "50",
                     "--n-boot", "20"]) == 0
    out = json.loads(capsys.readouterr().out)
    # cmp: t first no valid answer -> 0.5, t' first 0.7 -> gap 0.2; iso: a_t = 0 -> gap -1
    assert out["cmp"]["pg"] == pytest.approx(0.2) and out["iso"]["pg"] == pytest.approx(-1.0)
    assert out["cmp"]["n_no_valid"] == 1 and out["iso"]["n_no_valid"] == 1
    assert math.isclose(out["cmp"]["n_pairs_no_valid"], 1)
