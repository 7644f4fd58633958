"""End-to-end implicitbbq task on a tiny sample: records, generations, resume, summary, tables, plot."""

import json

import pytest

from probe.tasks.bbq.items import SETTINGS
from probe.runs.runner import RunOptions
from probe.runs.task_run import run_task
from probe.tasks import get


def _run(lm, out, **kw):
    # few-shot is left out here: its long prompts are slow with the byte-level tiny tokenizer
    # (it is covered by tests/unit/test_implicitbbq_prompts.py and tests/unit/test_task_implicitbbq.py)
    base = dict(dimensions=["age"], strategies=["zero_shot", "cot"], answer_formats=["oneword", "labels"],
                per_cell={"zero_shot": 1, "cot": 1}, cot_max_new_tokens=4, cot_chains=2, n_boot=50,
                cot_require_cue=False)  # 4 random tokens never reach "Final Answer:"
    base.update(kw)
    task = get("implicitbbq")
    return run_task(task, task.make_config(base), lm, output=out, options=RunOptions(progress=False, threads=1))


@pytest.fixture(scope="module")
def long_tiny_lm():
    """A private tiny model whose context fits few-shot prompts (its tokenizer has only 400 tokens)."""
    from tests.tiny import tiny_lm

    lm = tiny_lm(seed=1)
    lm.model.config.max_position_embeddings = 8192  # RoPE: positions are computed, nothing to resize
    return lm


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_tiny_run_end_to_end_and_resume(long_tiny_lm, shared_data, tmp_path):
    out = tmp_path / "run"
    ev = _run(long_tiny_lm, out)
    recs = _lines(out / "records.jsonl")
    assert len(recs) == len(ev.records)
    # zero-shot: 1 context unit (4 items) per dimension x kind -> all 12 settings
    zs = ev.records[(ev.records.strategy == "zero_shot") & (ev.records.answer_format == "oneword")]
    assert set(zs.setting) == set(SETTINGS)
    assert all(r["finite"] and 0 <= r["mass"] <= 1 + 1e-6 and abs(sum(r["probs"]) - 1) < 1e-6 for r in recs)
    cot = [r for r in recs if r["meta"]["strategy"] == "cot"]
    gen_lines = _lines(out / "generations.jsonl")
    gens = {g["id"]: g["text"] for g in gen_lines}
    assert cot and all(r["meta"]["reasoning"] == gens[r["id"]] for r in cot)
    # 2 sampled chains per (item, format), at the seed's T = 0.1, each final answer scored
    assert len(cot) == len(gens) == 2 * 2 * 8 and {r["meta"]["chain"] for r in cot} == {0, 1}
    assert all(g["temperature"] == 0.1 and g["seed"] == 0 and g["id"].endswith(f"|chain{g['meta']['chain']}")
               for g in gen_lines)
    c = ev.summary["cot"]
    assert c["settings"]["chains"] == 2 and c["n_chains"] == 32 and c["n_chains_no_cue"] == 32
    assert c["n_items"] == 16 and c["n_items_no_valid_chain"] == 0  # kept: cot_require_cue is off here
    assert c["by_strategy"]["cot|oneword"]["n_items_with_spread"] == 8
    assert ev.summary["by_strategy"]["cot|labels"]["implicit"]["n"] == 4  # one metric record per item
    # by default a chain without a cue is left out and counted: here every chain, so CoT has no metrics
    task = get("implicitbbq")
    strict = task.make_config(dict(dimensions=["age"], strategies=["zero_shot", "cot"], per_cell={"zero_shot": 1, "cot": 1},
                                   answer_formats=["oneword", "labels"], cot_chains=2, n_boot=20))
    agg = task.aggregate(strict, ev.records, task.selection.select(strict, task.items(strict), None))
    assert agg.summary["cot"]["n_items_no_valid_chain"] == 16 and agg.summary["cot"]["n_chains_no_cue"] == 32
    assert not any(k.startswith("cot") for k in agg.summary["by_strategy"])
    assert not any(r["meta"]["setting"].startswith(("neutral", "nochar")) for r in recs
                   if r["meta"]["strategy"] != "zero_shot")
    summary = json.loads((out / "summary.json").read_text())
    assert "zero_shot|oneword" in summary["by_strategy"] and "implicit" in summary["by_strategy"]["zero_shot|oneword"]
    assert summary["n_nonfinite"] == 0 and summary["sample"] == {"zero_shot": 16, "cot": 8}
    assert summary["counts"]["age"]["implicit_amb_neg"] > 0
    assert (out / "tables" / "table2_expected.md").read_text().startswith("| Model |")
    assert (out / "tables" / "per_dimension_cot_labels_argmax.csv").is_file()
    assert (out / "figure3_zero_shot_oneword.png").stat().st_size > 1000
    assert json.loads((out / "counts.json").read_text()) == summary["counts"]
    timing = json.loads((out / "timing.json").read_text())["scored_this_invocation"]
    assert set(timing) == {"zero_shot", "zero_shot/parse", "cot", "cot/generate"}
    # resume: nothing new to score or generate, same records
    before = (out / "records.jsonl").read_text(), (out / "generations.jsonl").read_text()
    _run(long_tiny_lm, out)
    assert ((out / "records.jsonl").read_text(), (out / "generations.jsonl").read_text()) == before
    assert json.loads((out / "projection.json").read_text())["total_hours"] >= 0


@pytest.mark.integration
def test_smollm2_zero_shot_sample(smollm2, shared_data, tmp_path):
    # parse_exact off: the enumeration of the one-word answer was 4/5 of this test's time and nothing here reads
    # it; it is checked on smollm2 against generate in test_parse_exact_smollm2.py and on this task in the tiny
    # runs above
    ev = _run(smollm2, tmp_path / "run", strategies=["zero_shot"], per_cell={"zero_shot": 1}, parse_exact=False)
    recs = ev.records
    # whole context units are sampled (4 variants each), so every one of the 12 settings has >= 1 item
    per_format = {f: recs[recs.answer_format == f] for f in ("oneword", "labels")}
    assert len(per_format["oneword"]) == len(per_format["labels"]) >= 12
    assert set(per_format["oneword"].setting) == set(SETTINGS) == set(per_format["labels"].setting)
    assert per_format["labels"]["mass"].mean() > 0.2  # an instruct model puts real mass on the option numbers


def test_paper_equivalent_estimate_beside_the_exact_one(long_tiny_lm, shared_data, tmp_path):
    """T = 0.1 (the seed's sampling) is scored in the same run, summarised, and heads the tables; T = 1 with
    top-p 1 reproduces the exact expected counts (a check that the two paths agree)."""
    out = tmp_path / "run"
    ev = _run(long_tiny_lm, out, strategies=["zero_shot"], per_cell={"zero_shot": 1})
    recs = _lines(out / "records.jsonl")
    assert all(r["sampling"][0]["temperature"] == 0.1 for r in recs)
    paper = ev.summary["paper_equivalent"]
    assert paper["settings"]["temperature"] == 0.1 and "zero_shot|oneword" in paper["by_strategy"]
    # the paper's own procedure (sampling + parsing, enumerated) heads the tables, the first-token estimate next
    assert list(ev.tables)[:2] == ["table2_paper_parsed_T0.1", "table2_paper_T0.1"]
    assert (out / "tables" / "table2_paper_T0.1.md").is_file()
    # at T = 1, top-p 1, the sampled path equals the exact expected counts
    same = _run(long_tiny_lm, tmp_path / "t1", strategies=["zero_shot"], per_cell={"zero_shot": 1},
                paper_temperature=1.0)
    for key, kinds in same.summary["by_strategy"].items():
        for kind, versions in kinds.items():
            if kind.startswith("_"):
                continue
            exact = versions["expected"]["pooled"]
            sampled = same.summary["paper_equivalent"]["by_strategy"][key][kind]["expected"]["pooled"]
            for metric in ("acc_amb", "acc_dis", "bias_amb", "bias_dis"):
                a, b = exact[metric], sampled[metric]
                assert (a != a and b != b) or abs(a - b) < 1e-5, (key, kind, metric, a, b)


def test_mass_distribution_and_answering_only(long_tiny_lm, shared_data, tmp_path):
    ev = _run(long_tiny_lm, tmp_path / "run", strategies=["zero_shot"], per_cell={"zero_shot": 1}, mass_floor=0.0)
    mass = ev.summary["mass"]["zero_shot|labels"]
    assert mass["floor"] == 0.0 and mass["n_below_floor"] == 0 and mass["n"] > 0
    # floor 0: every item answers, so the answering-only summary equals the full one
    full = ev.summary["by_strategy"]["zero_shot|labels"]["explicit"]["expected"]["pooled"]
    kept = ev.summary["answering_only"]["zero_shot|labels"]["explicit"]["expected"]["pooled"]
    assert full["acc_amb"] == kept["acc_amb"] and full["n_amb"] == kept["n_amb"]
