"""Greedy agreement: the label parser's rule, the summary's counts, and a run that decodes after label prompts."""

from __future__ import annotations

import json
import math

import pytest

import probe
from probe.runs.agreement import agreement_rows, agreement_summary, parse_label
from probe.runs.record import Record


@pytest.mark.parametrize("text,labels,want", [
    ("A", ("A", "B", "C"), 0),
    (" B) the doctor", ("A", "B", "C"), 1),
    ("\n**C**", ("A", "B", "C"), 2),
    ("(2)", ("1", "2", "3"), 1),
    ("Answer: A", ("A", "B", "C"), None),      # a word that starts with a label letter is no label
    ("10", ("1", "2", "3"), None),             # "1" must not match "10"
    ("yes, because", ("Yes", "No"), 0),        # case-insensitive only when no exact match
    ("No.", ("No", "Not sure"), 0),            # the longest label that fits the boundary
    ("Not sure", ("No", "Not sure"), 1),
    ("", ("A", "B"), None),
])
def test_parse_label(text, labels, want):
    assert parse_label(text, labels) == want


def _rec(rid: str, pred: int | None, kind: str = "k") -> Record:
    return Record(task="t", id=rid, model="m", kind="label", options=("A", "B"), logprobs=(-1.0, -2.0),
                  probs=(0.7, 0.3), pred_index=pred, mass=0.5, finite=pred is not None, n_prompt_tokens=3,
                  meta={"kind": kind})


def test_agreement_counts_by_kind():
    recs = [_rec("a", 0), _rec("b", 1), _rec("c", 0, "other"), _rec("d", 1, "other")]
    texts = {"a": "A", "b": "A", "c": "maybe", "d": " B"}
    s = agreement_summary(agreement_rows(recs, texts))
    assert s["all"] == {"n": 4, "n_label": 3, "share_label": 0.75, "n_agree": 2, "agreement": 2 / 3}
    assert s["by_kind"]["k"]["agreement"] == 0.5 and s["by_kind"]["other"]["n_label"] == 1
    empty = agreement_summary([])["all"]
    assert empty["n"] == 0 and math.isnan(empty["share_label"]) and math.isnan(empty["agreement"])


def test_run_with_agreement_decodes_after_every_label_prompt(tiny_lm, tmp_path, one_torch_thread):
    from tests.unit.test_task_bbq import GOOD, _row

    root = tmp_path / "bbq" / "data"
    root.mkdir(parents=True)
    rows = [_row(i, pol, cond, lab, GOOD, ["tattoos"]) for i, (pol, cond, lab) in
            enumerate([("neg", "ambig", 1), ("neg", "disambig", 0), ("nonneg", "ambig", 1), ("nonneg", "disambig", 2)])]
    (root / "Physical_appearance.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    e = probe.evaluate(tiny_lm, "bbq", output=out, progress=False, bbq_dir=str(tmp_path / "bbq"), n_boot=0,
                       agreement_tokens=3)
    ag = e.summary["greedy_agreement"]
    assert ag["max_new_tokens"] == 3 and ag["all"]["n"] == 4 == len(e.records)
    assert 0 <= ag["all"]["n_label"] <= 4
    lines = [json.loads(x) for x in (out / "agreement.jsonl").read_text().splitlines()]
    assert sorted(x["id"] for x in lines) == sorted(e.records["id"])
    again = probe.evaluate(tiny_lm, "bbq", output=out, progress=False, bbq_dir=str(tmp_path / "bbq"), n_boot=0,
                           agreement_tokens=3)
    assert json.dumps(again.summary["greedy_agreement"]) == json.dumps(ag)  # resumed from agreement.jsonl
