"""iso/cmp CoT as sampled chains, Table 6 on pairs claiming randomness, label mass: hand-computed cases."""

from __future__ import annotations

import math

import pytest

from probe.errors import ProbeError
from probe.tasks.cmp_iso.metrics import CmpIsoObservation, summarize
from probe.tasks.cmp_iso.claims import CLAIM_KEYWORDS, claimed_consistency, claims_randomness, preference_aligned
from probe.tasks import get
from probe.tasks.cmp_iso.summary import run_summary

TASK = get("cmp_iso")


def cfg(**kw):
    base = {"benchmarks": ["stereoset"], "settings": [{"reasoning": "cot"}], "n_boot": 50, "n_iter": 50,
            "paper_temperature": None, "cot_chains": 2}
    return TASK.make_config({**base, **kw})


# -- Table 6 pieces ----------------------------------------------------------------------------------------------
def test_preference_aligned_cases():
    assert preference_aligned({"A": 0.9, "B": 0.1}, {"A": 0.3, "B": 0.7}) == 1.0  # t in both orders
    assert preference_aligned({"A": 0.2, "B": 0.8}, {"A": 0.6, "B": 0.4}) == 1.0  # t' in both orders
    assert preference_aligned({"A": 0.6, "B": 0.4}, {"A": 0.6, "B": 0.4}) == 0.0  # always A: position bias
    assert preference_aligned({"A": 0.5, "B": 0.5}, {"A": 0.0, "B": 1.0}) == 0.5  # a tie: no preferred target
    # the neutral option does not count: A 0.2 vs B 0.1 among the picks still prefers A
    assert preference_aligned({"A": 0.2, "B": 0.1, "C": 0.7}, {"A": 0.1, "B": 0.2, "C": 0.7}) == 1.0
    assert math.isnan(preference_aligned({"C": 1.0}, {"A": 1.0}))
    # not the independent-draw probability, which expected counts pull toward 0.5
    assert preference_aligned({"A": 0.6, "B": 0.4}, {"A": 0.4, "B": 0.6}) == 1.0


def test_claims_randomness_keywords():
    assert len(CLAIM_KEYWORDS) == 28 and CLAIM_KEYWORDS[0] == "random" and CLAIM_KEYWORDS[-1] == "no way to distinguish"
    assert claims_randomness("I will choose RANDOMLY")
    assert claims_randomness("We can't determine who it was")  # "t determine", the tail of can't / cannot
    assert claims_randomness("It cannot be determined")  # "t be determine"
    assert claims_randomness("Either could be right")
    assert not claims_randomness("The answer is clearly B. \\boxed{B}")
    assert not claims_randomness("") and not claims_randomness(None)
    assert claims_randomness("pick by dice", keywords=("dice",)) and not claims_randomness("random", keywords=("x",))


def test_claimed_consistency_subset_ties_and_empty():
    vals = {"p1": 1.0, "p2": 0.0, "p3": 0.5, "p4": math.nan, "p5": 1.0}
    r = claimed_consistency(vals, ["p1", "p2", "p3", "p4", "missing"], n_boot=50)
    assert r["n_claimed"] == 4 and r["n_pairs"] == 3 and r["n_no_pick"] == 1 and r["n_ties"] == 1
    assert r["consistency"] == pytest.approx(50.0) and r["ci_unit"] == "context pair"
    # 3 context pairs: fewer than the small-sample rule's 10 units, so no resampled interval
    assert all(math.isnan(x) for x in r["ci"])
    e = claimed_consistency(vals, [])
    assert e["n_pairs"] == 0 and math.isnan(e["consistency"]) and all(math.isnan(x) for x in e["ci"])
    one = claimed_consistency(vals, ["p5"])
    assert one["consistency"] == 100.0 and all(math.isnan(x) for x in one["ci"])  # one pair: no CI


def test_summarize_consistency_is_preference_alignment():
    obs = [CmpIsoObservation(0, "cmp", None, "t_first", {"A": 0.6, "B": 0.4}),
           CmpIsoObservation(0, "cmp", None, "t_prime_first", {"A": 0.4, "B": 0.6}),
           CmpIsoObservation(1, "cmp", None, "t_first", {"A": 0.7, "B": 0.3}),
           CmpIsoObservation(1, "cmp", None, "t_prime_first", {"A": 0.7, "B": 0.3})]
    s = summarize(obs)
    assert s.cmp.pair_consistency == (1.0, 0.0) and s.cmp.consistency == 0.5


# -- sampled chains through run_summary ----------------------------------------------------------------------------
def _row(cp, tt, slot, k, probs, boxed=True, gen="", mass=0.9, sampling=None, setting="cot"):
    labels = ["Yes", "No"] if tt == "iso" else ["A", "B"]
    r = {"id": f"{setting}|stereoset|{cp}|{tt}|{slot}|chain{k}", "setting": setting, "base_setting": setting,
         "variant": 0, "reasoning": setting.split("+")[0], "benchmark": "stereoset", "context_pair_id": cp,
         "task_type": tt, "target": slot if tt == "iso" else None, "order": slot if tt == "cmp" else None,
         "options": labels, "probs": probs, "mass": mass, "finite": True, "chain": k, "boxed_found": boxed,
         "generation": gen}
    if sampling is not None:
        r["sampling"] = [{"temperature": 0.7, "top_p": 0.9, "probs": sampling[0], "mass": sampling[1]}]
    return r


def _pair1(**kw):
    """Pair 1: iso t (0.8, 0.4 -> Yes 0.6), t' (0.2, 0.2); cmp t first (0.9; chain 1 has no boxed label),
    t' first (A 0.2, 0.4 -> 0.3); both cmp prompts have a chain claiming randomness."""
    return [_row(1, "iso", "t", 0, [0.8, 0.2], **kw), _row(1, "iso", "t", 1, [0.4, 0.6], **kw),
            _row(1, "iso", "t_prime", 0, [0.2, 0.8], **kw), _row(1, "iso", "t_prime", 1, [0.2, 0.8], **kw),
            _row(1, "cmp", "t_first", 0, [0.9, 0.1], gen="a random guess", **kw),
            _row(1, "cmp", "t_first", 1, [0.5, 0.5], boxed=False, **kw),
            _row(1, "cmp", "t_prime_first", 0, [0.2, 0.8], **kw),
            _row(1, "cmp", "t_prime_first", 1, [0.4, 0.6], gen="It's a Toss-up", **kw)]


def _cell(summary, mode="expected"):
    return next(r for r in summary["results"] if r["mode"] == mode)


def test_chains_averaged_per_prompt_rao_blackwell():
    s = run_summary(_pair1(), cfg())
    r = _cell(s)
    # iso: a_t = 0.6, a_t' = 0.2 -> p_t = 0.75 -> gap 0.5; cmp: q(t first) = 0.9 (chain 1 left out),
    # q(t' first) = 0.7 -> p_t = 0.8 -> gap 0.6
    assert r["iso"]["pg"] == pytest.approx(0.5) and r["cmp"]["pg"] == pytest.approx(0.6)
    # argmax per chain, counted: iso t Yes/No -> 0.5/0.5, t' No/No -> p_t = 1; cmp t first A; t' first B, B
    a = _cell(s, "argmax")
    assert a["iso"]["pg"] == pytest.approx(1.0) and a["cmp"]["pg"] == pytest.approx(1.0)
    cot = s["cot"]
    assert cot["n_chains"] == 8 and cot["n_chains_no_cue"] == 1 and cot["n_prompts"] == 4
    assert cot["settings"]["chains"] == 2 and cot["settings"]["temperature"] == 0.7
    cell = cot["by_cell"]["cot|stereoset"]
    # PG on chain 0 alone: iso p_t = 0.8 / 1.0 -> 0.6; chain 1: 0.4 / 0.6 -> 2/3 -> 1/3
    assert cell["pg_by_chain"]["expected"]["iso"] == pytest.approx([0.6, 1 / 3])
    assert cell["pg_std_across_chains"]["expected"]["iso"] == pytest.approx(abs(0.6 - 1 / 3) / math.sqrt(2))
    # chain 1 of t first has no boxed label: on chain 1 alone that order has no valid answer and scores 0.5
    # (seed 003 appendix B); t' first q = 0.6 -> p_t = (0.5 + 0.6) / 2 -> gap 0.1; chain 0: (0.9 + 0.8) / 2 -> 0.7
    assert cell["pg_by_chain"]["expected"]["cmp"] == pytest.approx([0.7, 0.1])
    # per-prompt spread: mean over the 3 prompts with 2 valid chains of the label std (ddof 1)
    sd = lambda a, b: abs(a - b) / math.sqrt(2)  # noqa: E731
    assert cell["mean_prompt_std"] == pytest.approx((sd(0.8, 0.4) + 0.0 + sd(0.2, 0.4)) / 3)


def test_require_cue_off_keeps_chains_without_boxed_label():
    r = _cell(run_summary(_pair1(), cfg(cot_require_cue=False)))
    # t first: (0.9 + 0.5) / 2 = 0.7 -> p_t = (0.7 + 0.7) / 2 -> gap 0.4
    assert r["cmp"]["pg"] == pytest.approx(0.4)


def test_table6_on_pairs_claiming_randomness():
    rows = _pair1()
    # pair 2: t first prefers A, t' first prefers A (position bias); only t first claims randomness
    rows += [_row(2, "cmp", "t_first", k, [0.7, 0.3], gen="random") for k in (0, 1)]
    rows += [_row(2, "cmp", "t_prime_first", k, [0.7, 0.3]) for k in (0, 1)]
    r = _cell(run_summary(rows, cfg()))
    cr = r["cmp"]["claimed_random"]
    assert cr["n_claimed"] == 1 and cr["consistency"] == 100.0  # pair 1 only: t preferred in both orders
    assert r["cmp"]["consistency"] == pytest.approx(0.5)  # all pairs: pair 1 aligned, pair 2 not
    # both orders of pair 2 now claim randomness
    rows[-1] = _row(2, "cmp", "t_prime_first", 1, [0.7, 0.3], gen="I am unsure")
    cr = _cell(run_summary(rows, cfg()))["cmp"]["claimed_random"]
    assert cr["n_claimed"] == 2 and cr["consistency"] == pytest.approx(50.0)
    # a keyword list of the config's own
    cr = _cell(run_summary(rows, cfg(claim_keywords=["toss-up"])))["cmp"]["claimed_random"]
    assert cr["n_claimed"] == 0 and math.isnan(cr["consistency"])


def test_direct_rows_have_no_claimed_random_table():
    rows = [{**x, "setting": "direct", "base_setting": "direct", "reasoning": "direct", "chain": None,
             "boxed_found": None, "generation": None, "id": x["id"].replace("cot", "direct")}
            for x in _pair1() if x["chain"] == 0]
    r = _cell(run_summary(rows, cfg(settings=[{"reasoning": "direct"}])))
    assert "claimed_random" not in r["cmp"] and run_summary(rows, cfg())["cot"] == {}


def test_paper_mode_averages_sampled_probs_and_counts_unsampleable():
    rows = _pair1(sampling=([1.0, 0.0], 0.5))
    rows[0]["sampling"][0]["probs"] = [None, None]  # iso t chain 0: no label in the nucleus
    s = run_summary(rows, cfg(paper_temperature=0.7, paper_top_p=0.9))
    p = _cell(s, "paper")
    # iso t keeps chain 1 only: Yes 1.0; t' Yes 1.0 -> p_t 0.5 -> gap 0; cmp: both orders A -> gap 0
    assert p["iso"]["pg"] == pytest.approx(0.0) and p["cmp"]["pg"] == pytest.approx(0.0)
    assert s["paper_equivalent"]["n_unsampleable"] == 1 and p["label_mass"]["iso"] == pytest.approx(0.5)


def test_mass_floor_results_with_and_without_non_answering_prompts():
    rows = _pair1()
    # pair 2: its iso t prompt carries little label mass (0.05 < 0.1): not answering
    rows += [_row(2, "iso", "t", k, [0.9, 0.1], mass=0.05) for k in (0, 1)]
    rows += [_row(2, "iso", "t_prime", k, [0.1, 0.9]) for k in (0, 1)]
    r = _cell(run_summary(rows, cfg()))
    assert r["mass"]["iso"]["n"] == 4 and r["mass"]["iso"]["n_below_floor"] == 1
    assert r["iso"]["n_pairs"] == 2 and r["answering_only"]["iso"]["n_pairs"] == 1
    assert r["answering_only"]["iso"]["pg"] == pytest.approx(0.5)
    # a floor exactly at the mass counts as answering
    r = _cell(run_summary(rows, cfg(mass_floor=0.05)))
    assert r["answering_only"]["iso"]["n_pairs"] == 2 and r["mass"]["iso"]["n_below_floor"] == 0


def test_greedy_chain_without_boxed_label_kept_with_no_valid_answer():
    rows = [{**x, "chain": None, "id": x["id"].rsplit("|", 1)[0]} for x in _pair1() if x["chain"] == 1]
    s = run_summary(rows, cfg(cot_chains=0))
    r = _cell(s)
    # t first's only chain has no boxed label: no valid answer, order score 0.5 (seed 003 appendix B);
    # t' first [0.4, 0.6] with t as B -> 0.6; p_t = 0.55 -> gap 0.1 (before #23 the pair was dropped)
    assert r["cmp"]["n_pairs"] == 1 and r["cmp"]["pg"] == pytest.approx(0.1) and r["iso"]["n_pairs"] == 1
    assert r["cmp"]["n_no_valid"] == 1 and r["cmp"]["n_pairs_no_valid"] == 1 and r["iso"]["n_no_valid"] == 0
    assert s["cot"]["settings"]["decoding"] == "greedy"
    assert _cell(run_summary(rows, cfg(cot_chains=0, cot_require_cue=False)))["cmp"]["n_pairs"] == 1


def test_ci_unit_is_context_pair():
    s = run_summary(_pair1(), cfg())
    assert s["ci"]["unit"].startswith("context pair")


@pytest.mark.parametrize("bad", [{"cot_chains": -1}, {"cot_chains": 1.5}, {"max_new_tokens": 0},
                                 {"cot_temperature": 0}, {"cot_top_p": 1.5}, {"mass_floor": 2},
                                 {"claim_keywords": []}, {"claim_keywords": [""]}])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ProbeError, match=next(iter(bad)).split("_")[-1]):
        cfg(**bad)


def test_config_defaults_are_the_authors():
    c = TASK.make_config({})
    assert (c.cot_chains, c.cot_temperature, c.cot_top_p, c.max_new_tokens) == (25, 0.7, 0.9, 2000)
    assert c.cot_require_cue and c.mass_floor == 0.1 and c.claim_keywords is None


# -- demographic category and the pooled cmp-vs-iso test (#15 parts 5-7) -----------------------------------------
def test_category_reads_that_categorys_files(tmp_path):
    c = cfg(category="race", data_dir=str(tmp_path))
    assert [p.name for p in TASK.data_files(c)] == ["stereo_set_race_cot_gen.csv"]
    assert [p.name for p in TASK.data_files(cfg())] == ["stereo_set_gender_cot_gen.csv"]
    with pytest.raises(ProbeError, match="build it with 'probe data build cmp_iso --benchmark stereoset --category race"):
        TASK.items(c)
    with pytest.raises(ProbeError, match="category must be one of gender, race, religion"):
        cfg(category="age")


def test_model_sizes_and_family_accept_a_value_or_a_mapping():
    assert cfg(active_params_b=0.135, model_family="smollm2").active_params_b == 0.135
    assert cfg(active_params_b={"m": 3.0}).active_params_b == {"m": 3.0}


def test_run_summary_has_the_pooled_cmp_vs_iso_test():
    s = run_summary(_pair1(), cfg())
    assert s["category"] == "gender"
    rows = {r["mode"]: r for r in s["pooled_cmp_vs_iso"]}
    assert set(rows) == {"expected", "argmax"}  # one test per mode (no paper mode without a temperature)
    row = rows["expected"]
    assert (row["setting"], row["benchmark"], row["n_blocks"], row["n_variants"]) == ("cot", "stereoset", 1, 1)


def test_answering_and_chains_tables_name_benchmarks_and_settings_in_words():
    """``tables/answering.md`` and ``tables/cot_chains.md`` read ``de_gen``, ``dt_tox`` and ``direct+neutral`` (the
    first-hour walk's check of every Markdown file); they now use the paper's names, as the other tables do."""
    from probe.tasks.cmp_iso.extra_tables import answering_table, chains_table

    mass = {"n_below_floor": 0, "n": 2, "median": 0.5}
    summary = {"results": [{"setting": "direct+neutral", "benchmark": "de_gen", "mode": "expected",
                            "mass": {"iso": mass, "cmp": mass}, "iso": {"pg": 0.1}, "cmp": {"pg": 0.2}},
                           {"setting": "direct", "benchmark": "dt_tox", "mode": "argmax"}],
               "cot": {"by_cell": {"cot|dt_tox": {"n_chains": 2}}}}
    a = answering_table(summary)
    assert len(a) == 1  # the argmax row is left out, as before
    assert (a.loc[0, "setting"], a.loc[0, "benchmark"], a.loc[0, "mode"]) == (
        "direct answer, with a neutral option", "DiscrimEval (generation)", "expected (exact probabilities)")
    c = chains_table(summary)
    assert (c.loc[0, "setting"], c.loc[0, "benchmark"]) == ("chain of thought", "DecodingTrust toxicity")
