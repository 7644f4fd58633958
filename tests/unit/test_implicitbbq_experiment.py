"""experiments/implicitbbq: config validation and the stratified, paired sample."""

from collections import Counter

import pytest

from experiments.implicitbbq import ImplicitBBQConfig, load_config, stratified_sample, unit_key
from probe.data.items import BBQItem
from probe.errors import InputError


def test_config_rejects_unknown_keys(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("model: smollm2\nper_cel: {zero_shot: 1}\n")
    with pytest.raises(InputError, match="unknown key"):
        load_config(p)


def test_config_validates_strategies(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("strategies: [zero_shot, sampling]\nper_cell: {zero_shot: 1, sampling: 1}\n")
    with pytest.raises(InputError, match="unknown strategies"):
        load_config(p)
    p.write_text("strategies: [zero_shot, safety]\nper_cell: {zero_shot: 1}\n")
    with pytest.raises(InputError, match="per_cell has no entry"):
        load_config(p)


def test_shipped_configs_load():
    for name in ("configs/implicitbbq.yaml", "configs/implicitbbq_quick.yaml"):
        cfg = load_config(name)
        assert isinstance(cfg, ImplicitBBQConfig) and cfg.model == "smollm2"


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
                            id=f"ibbq-{dim}-{kind[:3]}-u{u}-{cond}-{pol}", source="t", category=dim, context="c",
                            question="q", options=("a", "b", "U"), label=2 if cond == "ambig" else 0,
                            target_index=0, unknown_index=2, question_polarity=pol, context_condition=cond,
                            context_kind=kind, setting=setting))
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
