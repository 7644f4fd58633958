"""Safety checks: untrusted files cannot run code or escape the output directory; NaN scores are never answers.

* the source tree (AST scan of probe/, the whole installed package) reads YAML only with
  ``yaml.safe_load`` and never unpickles (``torch.load`` needs ``weights_only=True``);
* ``trust_remote_code`` is off by default;
* item ids such as ``../../x`` cannot make a writer put files outside its output directory;
* NaN logits give ``finite=False`` results and summaries skip them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probe.cli import main
from probe.errors import ProbeError

GOOD = {"id": "q1", "prompt": "Who has wrinkles?", "options": ["A", "B", "C"]}


def _jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def _score(model_dir: Path, inp: Path, out: Path, *extra: str) -> int:
    return main(["score", "--model", str(model_dir), "--input", str(inp), "--output", str(out), *extra])


# --- 5. security -----------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("probe",)


def _calls(name_pairs: set[tuple[str, str]]):
    """Every call ``module.attr(...)`` in probe/ with (file, line, call source)."""
    import ast

    for d in SOURCE_DIRS:
        for path in sorted((ROOT / d).rglob("*.py")):
            src = path.read_text(encoding="utf-8")
            for node in ast.walk(ast.parse(src, filename=str(path))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and isinstance(node.func.value, ast.Name) and (node.func.value.id, node.func.attr) in name_pairs:
                    yield path.relative_to(ROOT), node.lineno, node, ast.get_source_segment(src, node) or ""


def _kw(node, name: str):
    import ast

    for k in node.keywords:
        if k.arg == name:
            return ast.literal_eval(k.value) if isinstance(k.value, ast.Constant) else ast.unparse(k.value)
    return None


def test_scanner_finds_calls():
    """The scanner must be able to fail: it sees the yaml.safe_load calls that are known to exist."""
    assert len(list(_calls({("yaml", "safe_load")}))) >= 5


def test_yaml_is_loaded_safely():
    bad = [f"{p}:{n}: {s}" for p, n, node, s in _calls({("yaml", "load"), ("yaml", "load_all")})
           if not str(_kw(node, "Loader") or (node.args[1:] and "Safe") or "").count("Safe")]
    bad += [f"{p}:{n}: {s}" for p, n, _, s in _calls({("yaml", "unsafe_load"), ("yaml", "full_load"),
                                                       ("yaml", "unsafe_load_all"), ("yaml", "full_load_all")})]
    assert not bad, "YAML must be read with yaml.safe_load:\n" + "\n".join(bad)


def test_no_unsafe_deserialisation():
    bad = [f"{p}:{n}: {s}" for p, n, node, s in _calls({("torch", "load")}) if _kw(node, "weights_only") is not True]
    bad += [f"{p}:{n}: {s}" for p, n, _, s in _calls({("pickle", "load"), ("pickle", "loads"), ("dill", "load"),
                                                       ("joblib", "load"), ("cloudpickle", "load")})]
    bad += [f"{p}:{n}: {s}" for p, n, node, s in _calls({("np", "load"), ("numpy", "load")})
            if _kw(node, "allow_pickle") not in (None, False)]
    bad += [f"{p}:{n}: {s}" for p, n, _, s in _calls({("builtins", "eval"), ("builtins", "exec")})]
    assert not bad, "unsafe deserialisation:\n" + "\n".join(bad)


def test_no_bare_eval_or_exec():
    import ast

    bad = []
    for d in SOURCE_DIRS:
        for path in sorted((ROOT / d).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("eval", "exec"):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, "eval/exec on data: " + ", ".join(bad)


def test_trust_remote_code_is_off_by_default():
    import inspect

    from probe.cli import build_parser
    from probe.models import load_model

    assert inspect.signature(load_model).parameters["trust_remote_code"].default is False
    args = build_parser().parse_args(["score", "--input", "x", "--output", "y"])
    assert args.trust_remote_code is False
    assert [f"{p}:{n}" for p, n, node, _ in _calls({("AutoModelForCausalLM", "from_pretrained"),
                                                     ("AutoTokenizer", "from_pretrained")})
            if _kw(node, "trust_remote_code") is True] == []


def test_trust_remote_code_reaches_transformers_as_false(tmp_path, monkeypatch):
    """The flag is passed to both from_pretrained calls, as False unless asked; weights as safetensors only."""
    from probe.models import loader

    seen = {}

    def fake(model_dir, torch_dtype, kwargs, name):
        seen.update(kwargs)
        raise loader.ModelLoadError("stop here")

    monkeypatch.setattr(loader, "_from_pretrained", fake)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    with pytest.raises(ProbeError):
        loader.load_model(str(tmp_path / "m"))
    assert seen["trust_remote_code"] is False and seen["use_safetensors"] is True


HOSTILE_IDS = ["../../escape", "/tmp/abs-escape", "..", "a/../../b", "nul\0byte", "C:\\x\\..\\..\\y", "~/home"]


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def test_item_ids_cannot_escape_the_output_of_probe_score(tmp_path, model_dir):
    out_dir = tmp_path / "run"
    inp = _jsonl(tmp_path / "items.jsonl", [{**GOOD, "id": rid} for rid in HOSTILE_IDS])
    before = _files(tmp_path)
    assert _score(model_dir, inp, out_dir / "out.jsonl") == 0
    new = _files(tmp_path) - before
    assert new and all(out_dir in p.parents for p in new), new
    assert {r["id"] for r in map(json.loads, (out_dir / "out.jsonl").read_text().splitlines())} == set(HOSTILE_IDS)
    assert not Path("/tmp/abs-escape").exists()


def test_item_ids_cannot_escape_the_activation_store(tmp_path):
    import numpy as np

    from probe.activations.store import ActivationWriter, load

    out_dir = tmp_path / "acts"
    key = "blocks.0.hook_resid_post@last"
    before = _files(tmp_path)
    with ActivationWriter(out_dir, {"keys": [key]}, shard_size=2) as w:
        w.add([{"id": rid} for rid in HOSTILE_IDS], {key: np.zeros((len(HOSTILE_IDS), 2), dtype=np.float32)})
    new = _files(tmp_path) - before
    assert new and all(out_dir in p.parents for p in new), new
    assert load(out_dir).ids == HOSTILE_IDS


# --- 6. numerical safety ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def nan_lm():
    """A tiny model whose output head is NaN: every logit is NaN."""
    import torch

    from tests.tiny import tiny_lm

    lm = tiny_lm(seed=1)
    with torch.no_grad():
        lm.model.lm_head.weight.fill_(float("nan"))
    return lm


def test_nan_logits_give_non_finite_results(nan_lm):
    import math

    from probe.io import dumps
    from probe.scoring import ContinuationRequest, LabelRequest, PerplexityRequest, Scorer
    from probe.runs.record import Record

    result_record = lambda res: Record.from_result("score", "m", res).to_dict()  # noqa: E731

    lab, cont, ppl = Scorer(nan_lm, batch_size=4).score([
        LabelRequest("l", "Who has wrinkles?", ("A", "B")),
        ContinuationRequest("c", "Who has wrinkles?", ("Person A", "Person B")),
        PerplexityRequest("p", "The cat sat on the mat."),
    ])
    assert (lab.finite, cont.finite, ppl.finite) == (False, False, False)
    assert all(math.isnan(p) for p in lab.probs) and math.isnan(lab.label_mass)
    for res in (lab, cont):
        rec = json.loads(dumps(result_record(res)))
        assert rec["finite"] is False and rec["pred_index"] is None  # never a made-up answer
        assert all(v is None for v in rec["probs"])  # NaN is written as null, the file stays valid JSON
    assert json.loads(dumps(result_record(ppl)))["finite"] is False


def _demo_record(i: int, finite: bool = True) -> dict:
    probs = [0.2, 0.1, 0.7] if finite else [None, None, None]
    return {"id": f"d{i}", "context_kind": "explicit" if i % 2 else "implicit", "dimension": "age",
            "context_condition": "ambig", "question_polarity": "neg", "label": 2, "target_index": 0,
            "unknown_index": 2, "probs": probs, "pred_index": 2 if finite else None,
            "answer_mass": 0.5 if finite else None, "finite": finite}


def test_demo_summary_skips_and_counts_non_finite_records():
    from probe.tasks.demo.task import report_markdown, summarize

    good = [_demo_record(i) for i in range(4)]
    bad = [_demo_record(10 + i, finite=False) for i in range(3)]
    with_bad, clean = summarize(good + bad), summarize(good)
    assert with_bad["n_nonfinite"] == 3 and clean["n_nonfinite"] == 0
    assert with_bad["by_context_kind"] == clean["by_context_kind"]
    assert with_bad["mean_answer_mass"] == clean["mean_answer_mass"] == 0.5
    assert "Skipped 3 item(s)" in report_markdown({**with_bad, "model": "m", "n_items": 7})


def test_demo_summary_of_only_non_finite_records_is_nan_not_zero():
    import math

    from probe.tasks.demo.task import summarize

    s = summarize([_demo_record(1, finite=False)])
    assert s["n_nonfinite"] == 1 and math.isnan(s["mean_answer_mass"])
    assert math.isnan(s["by_context_kind"]["explicit"]["argmax"]["acc_amb"])


def test_bbq_metrics_refuse_nan_probabilities_loudly():
    """probe.tasks.bbq.metrics does not skip: a NaN record is an error naming the field (callers filter ``finite``)."""
    from probe.tasks.bbq.metrics import bbq_metrics

    rec = _demo_record(1)
    with pytest.raises(ValueError, match="probs"):
        bbq_metrics([rec, {**rec, "probs": [float("nan")] * 3, "pred_index": None}])
    with pytest.raises(ValueError, match="pred_index' or 'probs"):
        bbq_metrics([{**rec, "probs": None, "pred_index": None}])
