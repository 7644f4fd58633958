"""The implicitbbq task: config validation, the stratified paired sample, --limit, requests, records -> probs."""

import math
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from probe.tasks.bbq.items import BBQItem
from probe.errors import ProbeError
from probe.tasks import get
from probe.tasks.implicitbbq import summary as results
from probe.tasks.implicitbbq.task import ImplicitBBQConfig, request_id
from probe.tasks.implicitbbq.selection import Selection, select, stratified_sample, unit_key

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def task():
    return get("implicitbbq")


def test_config_rejects_unknown_keys(task):
    with pytest.raises(ProbeError, match="unknown key"):
        task.make_config({"per_cel": {"zero_shot": 1}})
    with pytest.raises(ProbeError, match="unknown key.*chunk_size"):  # the runner owns chunking now
        task.make_config({"chunk_size": 48})


def test_config_validates_strategies(task):
    with pytest.raises(ProbeError, match="unknown strategies"):
        task.make_config({"strategies": ["zero_shot", "sampling"], "per_cell": {"zero_shot": 1, "sampling": 1}})
    with pytest.raises(ProbeError, match="per_cell has no entry"):
        task.make_config({"strategies": ["zero_shot", "safety"], "per_cell": {"zero_shot": 1}})
    with pytest.raises(ProbeError, match="unknown answer_formats"):
        task.make_config({"answer_formats": ["letters"]})
    with pytest.raises(ProbeError, match="per_cell"):
        task.make_config({"per_cell": {"zero_shot": 0, "safety": 1, "few_shot": 1, "cot": 1}})
    with pytest.raises(ProbeError, match="explicit_set must be one of matched, full"):
        task.make_config({"explicit_set": "all"})
    assert task.make_config({}).explicit_set == "matched"  # the paper's balanced explicit set by default


def test_items_pass_the_explicit_set_to_the_builder(task, monkeypatch):
    import probe.tasks.implicitbbq.task as task_module

    seen = {}
    # patched where the task looks it up
    monkeypatch.setattr(task_module, "build_implicitbbq", lambda *a, **kw: seen.update(kw) or [])
    task.items(task.make_config({"explicit_set": "full", "seed": 3}))
    assert seen["explicit_set"] == "full" and seen["seed"] == 3


@pytest.mark.parametrize("name", ["experiments/implicitbbq/configs/implicitbbq.yaml", "configs/implicitbbq_quick.yaml",
                                  "configs/implicitbbq_formats.yaml"])
def test_shipped_configs_load(task, name):
    from probe.api import split_options
    from probe.commands.run import read_config
    from probe.runs.runner import options_from

    values = read_config(ROOT / name)
    assert values.pop("task") == "implicitbbq" and values.pop("model") == "smollm2"
    assert values.pop("output").startswith("runs/")
    run_values, task_values = split_options(values)
    options_from(run_values)
    assert isinstance(task.make_config(task_values, source=name), ImplicitBBQConfig)


def _items():
    out = []
    for dim in ("age", "ses"):
        for kind in ("explicit", "implicit", "neutral"):
            for u in range(10):
                for cond in ("ambig", "disambig"):
                    for pol in ("neg", "nonneg"):
                        if kind == "neutral":
                            setting = f"neutral_{pol}"
                        else:
                            setting = f"{kind}_{'amb' if cond == 'ambig' else 'dis'}_{pol}"
                        out.append(BBQItem(
                            id=f"ibbq-{dim}-{kind[:3]}-u{u}-{cond}-{pol}", source="t", category=dim,
                            context=f"Person A met Person B ({u}).", question=f"Who {pol}?",
                            options=("Person A", "Person B", "Unknown"), label=2 if cond == "ambig" else 0,
                            target_index=0, unknown_index=2, question_polarity=pol, context_condition=cond,
                            context_kind=kind, setting=setting, template_id=f"{dim}-q{u % 3}",
                            background="" if kind == "explicit" else "Person A has a cue.\nPerson B has a cue.",
                            group_words=("Person A", "Person B", "")))
    return out


def test_stratified_sample_whole_units_nested_and_round_robin():
    items = _items()
    s3 = stratified_sample(items, 3, seed=0)
    cells = Counter((it.category, it.setting) for it in s3)
    assert all(v == 3 for k, v in cells.items() if not k[1].startswith("neutral"))
    assert all(v == 4 for k, v in cells.items() if k[1].startswith("neutral"))  # ceil(3/2) units x 2 conditions
    units = Counter(unit_key(it) for it in s3)
    assert set(units.values()) == {4}  # every unit complete
    s5 = stratified_sample(items, 5, seed=0)
    assert {unit_key(i) for i in s3} <= {unit_key(i) for i in s5}  # nested
    first = [unit_key(it) for it in s3[:4 * 6]]
    assert len({u.split("-")[1] + u.split("-")[2] for u in first}) == 6  # round-robin over (dim, kind)
    only = stratified_sample(items, 2, 0, settings={"explicit_amb_neg"})
    assert {it.setting for it in only} == {"explicit_amb_neg"}


def test_select_controls_only_for_control_strategies_and_limit_is_stratified(task):
    items = _items()
    cfg = ImplicitBBQConfig(strategies=("zero_shot", "safety"), per_cell={"zero_shot": 2, "safety": 3})
    sel = task.selection.select(cfg, items, None)
    assert isinstance(sel, Selection) and sel.pool is items
    assert any(it.context_kind == "neutral" for it in sel.samples["zero_shot"])
    assert not any(it.context_kind == "neutral" for it in sel.samples["safety"])
    assert len(sel) == len({it.id for s in sel.samples.values() for it in s})  # the union, no duplicates
    assert [it.id for it in sel[:len(sel.samples["zero_shot"])]] == [it.id for it in sel.samples["zero_shot"]]
    lim = task.selection.select(cfg, items, 12)
    assert {it.id for it in lim} <= {it.id for it in sel}
    assert [it.id for it in task.selection.select(cfg, items, 8)] == [it.id for it in lim[:8]]  # smaller = a prefix
    assert {it.id for s in lim.samples.values() for it in s} <= {it.id for it in lim}
    # below a whole unit per (dimension, context kind): one item per cell first, so every cell is covered
    assert len({(it.category, it.context_kind) for it in lim}) == len({(it.category, it.context_kind) for it in sel})
    assert len({it.category for it in lim}) == len({it.category for it in sel})  # every dimension
    five = select(cfg, items, 5)
    assert len(five) == 5 and len({(it.category, it.context_kind) for it in five}) == 5  # five cells, one each


def _demo_sets(items):
    """Two-slot sets per dimension x kind over ``_items()``: primaries from templates q0/q1, alternates q1/q2."""
    def pick(dim, kind, t, cond):
        return next(it for it in items if it.category == dim and it.context_kind == kind
                    and it.template_id == f"{dim}-q{t}" and it.context_condition == cond)

    def slot(k, dim, kind, cond):
        a, b = pick(dim, kind, k - 1, cond), pick(dim, kind, k, cond)
        return {"slot": k, "id": a.id, "template": a.template_id, "alternate": {"id": b.id, "template": b.template_id}}
    return {"seed": 0, "sets": {dim: {kind: [slot(1, dim, kind, "ambig"), slot(2, dim, kind, "disambig")]
                                      for kind in ("explicit", "implicit")} for dim in ("age", "ses")}}


def test_requests_ids_groups_order_and_meta(task, monkeypatch):
    from probe.tasks.implicitbbq import fewshot as bbq_demos
    from tests.tiny import tiny_tokenizer

    items = _items()
    monkeypatch.setattr(bbq_demos, "load_demo_sets", lambda: _demo_sets(items))
    cfg = ImplicitBBQConfig(strategies=("zero_shot", "safety", "few_shot"), answer_formats=("oneword", "labels"),
                            per_cell={"zero_shot": 1, "safety": 1, "few_shot": 1}, n_shots=2)
    sel = task.selection.select(cfg, items, None)
    reqs = task.requests(cfg, sel, tiny_tokenizer())
    assert len(reqs) == 2 * sum(len(v) for v in sel.samples.values())
    assert len({r.id for r in reqs}) == len(reqs)
    assert reqs[0].id == request_id(sel.samples["zero_shot"][0], "zero_shot", "oneword")
    # strategy by strategy; a group (strategy x context unit, both formats) is contiguous
    assert [r.meta["kind"] for r in reqs] == sorted((r.meta["kind"] for r in reqs),
                                                     key=("zero_shot", "safety", "few_shot").index)
    seen, prev = set(), None
    for r in reqs:
        if r.group != prev:
            assert r.group not in seen
            seen.add(r.group)
            prev = r.group
    assert all(len([r for r in reqs if r.group == g]) == 8 for g in seen)  # 4 variants x 2 formats
    lab = next(r for r in reqs if r.meta["answer_format"] == "labels")
    one = next(r for r in reqs if r.meta["answer_format"] == "oneword")
    assert lab.kind == "label" and one.kind == "continuation" and one.options[:2] == ("Person A", "Person B")
    assert one.meta["owner"][:3] == [0, 1, 2] and set(one.meta["owner"][2:]) == {2}
    assert {"setting", "context_kind", "label", "target_index", "unknown_index", "answers"} <= set(one.meta)
    assert task.paper.generation_requests(cfg, sel, tiny_tokenizer()) == []
    by_id = {it.id: it for it in items}
    for r in (r for r in reqs if r.meta["strategy"] == "few_shot"):
        demos = [by_id[i] for i in r.meta["demo_ids"]]
        assert len(demos) == 2 and all(d.context_kind == r.meta["context_kind"] for d in demos)
        assert all(d.template_id != r.meta["template_id"] for d in demos)  # never the item's own template
        assert r.meta["demo_fallback"] == ([1] if r.meta["template_id"].endswith("q0") else
                                           [2] if r.meta["template_id"].endswith("q1") else [])


def test_cot_needs_its_generations(task):
    """Greedy single chain (cot_chains 0): the id and prompt of the runs before sampled chains existed."""
    from tests.tiny import tiny_tokenizer

    cfg = ImplicitBBQConfig(strategies=("cot",), per_cell={"cot": 1}, cot_max_new_tokens=7, cot_chains=0)
    sel = task.selection.select(cfg, _items(), None)
    gens = task.paper.generation_requests(cfg, sel, tiny_tokenizer())
    assert len(gens) == len(sel.samples["cot"]) and gens[0].max_new_tokens == 7
    assert gens[0].meta["kind"] == "cot/generate" and gens[0].temperature is None
    assert gens[0].id == request_id(sel.samples["cot"][0], "cot", "oneword")
    with pytest.raises(ProbeError, match="no CoT reasoning"):
        task.requests(cfg, sel, tiny_tokenizer(), {})
    texts = {g.id: "Because. Final Answer: Person A" for g in gens}
    reqs = task.requests(cfg, sel, tiny_tokenizer(), texts)
    assert reqs[0].prompt == gens[0].prompt + "Because.\nFinal Answer:"
    assert reqs[0].meta["reasoning"] == texts[gens[0].id] and "chain" not in reqs[0].meta


def test_cot_chains_requests(task):
    """K sampled chains per (item, format): ids ITEM|cot|FORMAT|chain{k}, the seed's sampling, one scoring
    request per chain (meta chain = k), each cut at its own first cue variant."""
    from tests.tiny import tiny_tokenizer

    cfg = ImplicitBBQConfig(strategies=("cot",), per_cell={"cot": 1}, cot_chains=2, answer_formats=("oneword", "labels"))
    assert (cfg.cot_temperature, cfg.cot_top_p) == (0.1, 1.0) and cfg.cot_max_new_tokens >= 1024
    assert ImplicitBBQConfig().cot_chains == 5
    sel = task.selection.select(cfg, _items(), None)
    gens = task.paper.generation_requests(cfg, sel, tiny_tokenizer())
    first = sel.samples["cot"][0]
    base = request_id(first, "cot", "oneword")
    assert [g.id for g in gens[:4]] == [f"{base}|chain0", f"{base}|chain1",
                                        f"{request_id(first, 'cot', 'labels')}|chain0",
                                        f"{request_id(first, 'cot', 'labels')}|chain1"]
    assert len(gens) == 2 * 2 * len(sel.samples["cot"]) and len({g.id for g in gens}) == len(gens)
    assert all(g.temperature == 0.1 and g.top_p == 1.0 and g.seed == 0 for g in gens)
    assert [g.meta["chain"] for g in gens[:2]] == [0, 1] and gens[0].prompt == gens[1].prompt
    texts = {g.id: ("A. **Final Answer**: Person A" if g.meta["chain"] == 0 else "no cue here") for g in gens}
    reqs = task.requests(cfg, sel, tiny_tokenizer(), texts)
    assert [r.id for r in reqs] == [g.id for g in gens]
    assert reqs[0].prompt == gens[0].prompt + "A.\nFinal Answer:" and reqs[0].meta["chain"] == 0
    assert reqs[1].prompt == gens[1].prompt + "no cue here\nFinal Answer:" and reqs[1].meta["chain"] == 1
    assert reqs[0].group == reqs[1].group == reqs[2].group
    with pytest.raises(ProbeError, match="cot_chains"):
        task.make_config({"cot_chains": -1})
    with pytest.raises(ProbeError, match="cot_temperature"):
        task.make_config({"cot_temperature": 0})


def _chain(item, chain, probs, reasoning, strategy="cot", fmt="oneword", cond="ambig", kind="implicit"):
    lp = [math.log(p) for p in probs] + [math.log(1e-9)]
    rid = f"{item}|{strategy}|{fmt}" + ("" if chain is None else f"|chain{chain}")
    rec = _rec(fmt, lp, mass=sum(probs))
    rec.update(id=rid, item_id=item, strategy=strategy, chain=chain, reasoning=reasoning, context_condition=cond,
               context_kind=kind, template_id="t")
    return rec


def test_chain_average_exclusion_and_spread_hand_numbers():
    """Two items x 3 chains (one-word; owner [0, 1, 2, 2]): the item's probabilities are the mean over its
    chains that reached a cue; a chain without one is left out and counted; an item with none is dropped."""
    from probe.tasks.implicitbbq.chains import average_chains, chain_summary

    cue, none = "so. Final answer: x", "rambling"
    rows = [
        _chain("i1", 0, [0.3, 0.1, 0.1], cue), _chain("i1", 1, [0.1, 0.3, 0.1], cue), _chain("i1", 2, [0.5, 0.0001, 0.0001], none),
        _chain("i2", 0, [0.1, 0.1, 0.3], none), _chain("i2", 1, [0.1, 0.1, 0.3], none), _chain("i2", 2, [0.1, 0.1, 0.3], none),
        _chain("i3", None, [0.2, 0.1, 0.1], none, cond="disambig"),  # a greedy chain without a cue
        _chain("z", None, [0.2, 0.1, 0.1], None, strategy="zero_shot"),
    ]
    frame = pd.DataFrame(rows)
    frame.loc[frame.chain.isna(), "chain"] = float("nan")  # as records_to_frame leaves it for other records
    recs, skipped = results.metric_records(frame)
    assert skipped == 0 and [r["id"] for r in recs] == ["i1|cot|oneword", "z|zero_shot|oneword"]
    i1 = recs[0]
    # chain 0 option probs (0.3, 0.1, 0.1 + 1e-9)/0.5, chain 1 (0.1, 0.3, ...)/0.5: mean (0.4, 0.4, 0.2)
    assert i1["probs"] == pytest.approx([0.4, 0.4, 0.2], abs=1e-6) and i1["n_chains"] == 2
    assert i1["mass"] == pytest.approx(0.5) and i1["pred_index"] == 0
    keep, _ = results.metric_records(frame, require_cue=False)
    assert [r["id"] for r in keep] == ["i1|cot|oneword", "i2|cot|oneword", "i3|cot|oneword", "z|zero_shot|oneword"]
    p2 = 0.5002 + 1e-9
    assert keep[0]["n_chains"] == 3 and keep[0]["probs"][0] == pytest.approx((0.6 + 0.2 + 0.5 / p2) / 3, abs=1e-6)
    assert keep[1]["probs"] == pytest.approx([0.2, 0.2, 0.6], abs=1e-6)
    per_chain, _ = results.metric_records(frame, per_chain=True)
    assert len(per_chain) == 8 and len(average_chains(per_chain)) == 2
    s = chain_summary([r for r in per_chain if r["strategy"] == "cot"])["cot|oneword"]
    assert (s["n_chains"], s["n_chains_no_cue"], s["n_items"], s["n_items_no_valid_chain"]) == (7, 5, 3, 2)
    # only i1 has 2 valid chains: per-option std (ddof 1) of (0.6, 0.2), (0.2, 0.6), (0.2, 0.2) -> mean
    sd = 0.4 / math.sqrt(2)
    assert s["n_items_with_spread"] == 1 and s["mean_item_std_probs"] == pytest.approx((sd + sd + 0) / 3, abs=1e-6)
    # metrics per chain index: chain 0 answers A (non-unknown, stereotype-consistent: target 0, neg), chain 1 B
    spread = s["metrics_std_across_chains"]["implicit"]
    assert spread["argmax"]["bias_amb"] == pytest.approx(float(pd.Series([1.0, -1.0]).std()))
    assert spread["argmax"]["acc_amb"] == pytest.approx(0.0)


def _rec(fmt, logprobs, probs=(), mass=None, finite=True, pred=0):
    base = {"id": "x", "answer_format": fmt, "finite": finite, "pred_index": pred, "logprobs": logprobs,
            "probs": list(probs), "mass": mass}
    base.update(owner=[0, 1, 2, 2] if fmt == "oneword" else [0, 1, 2], strategy="zero_shot", dimension="age",
                context_kind="implicit", context_condition="ambig", question_polarity="neg", label=2,
                target_index=0, unknown_index=2)
    return base


def test_metric_records_sum_paraphrases_and_skip_nonfinite():
    lp = [math.log(x) for x in (0.2, 0.2, 0.05, 0.05)]
    recs = pd.DataFrame([
        _rec("oneword", lp, mass=0.5),
        _rec("labels", [-1.0, -2.0, -3.0], probs=(0.5, 0.3, 0.2), mass=0.9),
        _rec("oneword", [math.nan] * 4, mass=math.nan, finite=False, pred=None),
    ])
    out, skipped = results.metric_records(recs)
    assert skipped == 1 and len(out) == 2
    assert out[0]["probs"] == pytest.approx([0.4, 0.4, 0.2]) and out[0]["mass"] == pytest.approx(0.5)
    assert out[0]["pred_index"] == 0  # ties go to the lowest index
    assert out[1]["probs"] == [0.5, 0.3, 0.2] and out[1]["mass"] == 0.9
    assert out[0]["option_mass"] == pytest.approx([0.2, 0.2, 0.1])  # each option's forms summed
    assert out[1]["option_mass"] == pytest.approx([0.45, 0.27, 0.18])  # labels: probs x label mass


def test_option_mass_summary_and_demo_summary_hand_numbers():
    base = {"strategy": "zero_shot", "answer_format": "oneword", "target_index": 0, "unknown_index": 2}
    recs = [{**base, "context_kind": "explicit", "option_mass": [0.1, 0.2, 0.3]},
            {**base, "context_kind": "explicit", "option_mass": [0.3, 0.0, 0.1]},
            {**base, "context_kind": "implicit", "option_mass": [0.0, 0.0, 0.0]}]
    s = results.option_mass_summary(recs)["zero_shot|oneword"]
    assert s["explicit"] == pytest.approx({"n": 2, "target": 0.2, "other": 0.1, "unknown": 0.2, "person": 0.3,
                                           "unknown_share": 0.4})
    assert s["implicit"]["n"] == 1 and math.isnan(s["implicit"]["unknown_share"])  # no mass at all
    assert len(results.option_mass_table(results.option_mass_summary(recs))) == 2
    rows = pd.DataFrame([{"demo_ids": ["a", "b"], "demo_fallback": [1], "demo_skipped": []},
                         {"demo_ids": ["a", "b", "c"], "demo_fallback": [], "demo_skipped": [3]},
                         {"demo_ids": math.nan, "demo_fallback": math.nan, "demo_skipped": math.nan}])
    assert results.demo_summary(rows) == {"n_records": 2, "n_with_fallback": 1, "n_fallback_slots": 1,
                                          "n_with_skipped": 1, "n_demos_mean": 2.5}
    assert results.demo_summary([]) == {}


def test_projection_counts_cot_generation_and_formats():
    timing = {"zero_shot": {"n": 8, "seconds": 4.0}, "cot": {"n": 4, "seconds": 2.0},
              "cot/generate": {"n": 4, "seconds": 6.0}}
    p = results.projection(timing, {"zero_shot": 3600, "cot": 1800}, n_formats=2)
    assert p["zero_shot"]["seconds_per_item"] == 1.0 and p["zero_shot"]["hours"] == 1.0
    assert p["cot"]["seconds_per_item"] == 4.0 and p["cot"]["hours"] == 2.0
    assert p["total_hours"] == 3.0
    assert results.projection({}, {"zero_shot": 10}) == {"total_hours": 0}


def test_sampled_option_probs_hand_cases():
    """One-word: log-sum-exp per option, renormalised in log space; labels: the entry's probs; none sampleable: None."""
    import math

    from probe.tasks.bbq.records import sampled_option_probs

    # T = 0.1 makes every text's probability underflow in linear space; the ratio must survive
    entry = {"logprobs": [-2000.0, -2000.0 - math.log(3), -2001.0, None]}
    d = sampled_option_probs("oneword", [0, 1, 2, 2], entry)
    assert d["probs"][0] / d["probs"][1] == pytest.approx(3.0) and d["mass"] == 0.0
    assert d["probs"][2] / d["probs"][0] == pytest.approx(math.exp(-1.0))
    assert sampled_option_probs("oneword", [0, 1, 2], {"logprobs": [None, None, None]}) is None
    lab = sampled_option_probs("labels", [0, 1, 2], {"probs": [0.5, 0.5, 0.0], "mass": 0.2})
    assert lab == {"probs": [0.5, 0.5, 0.0], "mass": 0.2}
    assert sampled_option_probs("labels", [0, 1, 2], {"probs": [0.5, 0.5, 0.0], "mass": 0.0}) is None
