"""Config loading, summary, tables (seed 003 Tables 2-7 layouts), plot and the metrics command."""

from __future__ import annotations

import dataclasses
import json

import pytest

from experiments.cmp_iso import CmpIsoConfig, SettingSpec, build_summary, load_config
from probe.cli import main as cli_main
from probe.errors import InputError
from probe.reports.cmp_iso_tables import build_tables, to_markdown, write_report


def _records(model="m1", n_pairs=12, bias=0.9):
    """cmp strongly prefers t, iso is neutral; a neutral setting with 50% 'C'."""
    recs = []
    for setting, neutral in (("direct", False), ("direct+neutral", True)):
        for cp in range(n_pairs):
            def add(tt, slot, probs):
                recs.append({"id": f"{model}|{setting}|bbq|{cp}|{tt}|{slot}", "model": model, "setting": setting,
                             "benchmark": "bbq", "context_pair_id": cp, "task_type": tt,
                             "target": slot if tt == "iso" else None, "order": slot if tt == "cmp" else None,
                             "probs": probs, "label_mass": 0.5})
            yes = {"Yes": 0.5, "No": 0.5} if not neutral else {"Yes": 0.4, "No": 0.4, "Skip": 0.2}
            add("iso", "t", yes)
            add("iso", "t_prime", yes)
            a, b = (bias, 1 - bias) if not neutral else (bias / 2, (1 - bias) / 2)
            extra = {"C": 0.5} if neutral else {}
            add("cmp", "t_first", {"A": a, "B": b, **extra})
            add("cmp", "t_prime_first", {"A": b, "B": a, **extra})
    return recs


CFG = CmpIsoConfig(models=("m1", "m2"), benchmarks=("bbq",), n_iter=500, n_boot=200,
                   comparisons=(("direct", "direct+neutral"),), params_b={"m1": 1.0, "m2": 2.0})


def test_summary_tables_and_plot(tmp_path):
    recs = _records("m1") + _records("m2", bias=0.6)
    s = build_summary(recs, CFG)
    r = next(x for x in s["results"] if x["model"] == "m1" and x["setting"] == "direct" and x["mode"] == "expected")
    assert r["cmp"]["pg"] == pytest.approx(0.8) and r["iso"]["pg"] == pytest.approx(0.0)
    assert r["cmp_vs_iso"]["significant"]
    tables = build_tables(s)
    assert {"table2_direct", "table4_direct+neutral", "table5_direct", "table6_direct"} <= set(tables)
    md = to_markdown(tables["table2_direct"][1])
    assert "| m1 | 0.00 | 0.80 ∗ |" in md and "| m2 | 0.00 | 0.20 ∗ |" in md
    md4 = to_markdown(tables["table4_direct+neutral"][1])
    assert "| m1 | 20.0 | 50.0 |" in md4
    md5 = to_markdown(tables["table5_direct"][1])
    assert "| m1 | 80.0 | 80.0 |" in md5  # neutral mass removed: same preference among A/B
    comp = [c for c in s["comparisons"] if c["model"] == "m1" and c["paradigm"] == "cmp" and c["mode"] == "expected"]
    assert comp and not comp[0]["significant"]
    written = write_report(s, tmp_path)
    assert (tmp_path / "pg_iso_vs_cmp.png").stat().st_size > 1000
    assert (tmp_path / "tables" / "table2_direct.csv").exists() and len(written) > 10


def test_variants_spread():
    recs = []
    for v, bias in ((0, 0.9), (5, 0.7)):
        for r in _records("m1", n_pairs=6, bias=bias):
            if r["setting"] == "direct":
                name = "direct" if v == 0 else f"direct+v{v}"
                recs.append({**r, "setting": name, "id": r["id"].replace("|direct|", f"|{name}|")})
    s = build_summary(recs, dataclasses.replace(CFG, comparisons=()))
    (v,) = [x for x in s["variants"] if x["paradigm"] == "cmp" and x["mode"] == "expected"]
    assert v["per_variant"] == pytest.approx({"0": 0.8, "5": 0.4})
    assert v["min"] == pytest.approx(0.4) and v["max"] == pytest.approx(0.8)


def test_config_rejects_unknown_keys(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("models: [smollm2]\nsettings:\n  - {reasoning: direct, nuetral: true}\n")
    with pytest.raises(InputError, match="settings\\[0\\].nuetral"):
        load_config(p)
    p.write_text("modles: [smollm2]\n")
    with pytest.raises(InputError, match="modles"):
        load_config(p)
    p.write_text("benchmarks: [bbq, nope]\n")
    with pytest.raises(InputError, match="nope"):
        load_config(p)
    p.write_text("settings:\n  - {reasoning: cot, variants: all}\n")
    cfg = load_config(p)
    assert cfg.settings == (SettingSpec(reasoning="cot", variants=tuple(range(54))),)
    assert len(cfg.expanded_settings()) == 54


def test_shipped_configs_load():
    for name in ("configs/cmp_iso.yaml", "configs/cmp_iso_quick.yaml"):
        assert load_config(name).expanded_settings()


def test_metrics_command(tmp_path, capsys):
    lines = [
        {"context_pair_id": 1, "task_type": "iso", "target": "t", "probs": {"Yes": 0.8, "No": 0.2}},
        {"context_pair_id": 1, "task_type": "iso", "target": "t_prime", "probs": {"Yes": 0.2, "No": 0.8}},
        {"context_pair_id": 1, "task_type": "cmp", "order": "t_first", "answers": ["A", "A", "B", "x", "A"]},
        {"context_pair_id": 1, "task_type": "cmp", "order": "t_prime_first", "answers": ["B", "B", "B", "B", "A"]},
    ]
    f = tmp_path / "in.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert cli_main(["metrics", "cmp-iso", "--input", str(f), "--n-iter", "100", "--n-boot", "50"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["iso"]["pg"] == pytest.approx(0.6)  # .8 / (.8 + .2) -> 2 * .8 - 1
    assert out["cmp"]["pg"] == pytest.approx(0.55)  # (3/4 + 4/5) / 2 = .775
    assert out["n_context_pairs"] == 1 and out["neutral_share"]["cmp"] == 0.0
    f.write_text(json.dumps(lines[0]) + "\n")
    assert cli_main(["metrics", "cmp-iso", "--input", str(f)]) == 1
    assert "--allow-incomplete" in capsys.readouterr().err
    f.write_text(json.dumps({**lines[0], "probs": {"Maybe": 1.0}}) + "\n")
    assert cli_main(["metrics", "cmp-iso", "--input", str(f)]) == 1
    assert "line 1, field 'probs'" in capsys.readouterr().err
