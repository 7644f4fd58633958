"""Summary, Table 2 / Tables 5-7 layouts and the Figure-3 plot from synthetic records."""

import pytest

from probe.tasks.implicitbbq.tables import figure3, summarize, table2, tables_per_dimension, to_markdown, write_reports


def _records():
    recs = []
    for dim, p_target in (("age", 0.8), ("ses", 0.2)):
        for kind in ("explicit", "implicit", "nochar"):
            for i in range(6):
                for cond in ("ambig", "disambig"):
                    for pol in ("neg", "nonneg"):
                        # implicit: probability mass on the target; explicit: mostly Unknown
                        probs = [p_target, 0.1, 0.9 - p_target] if kind == "implicit" else [0.05, 0.05, 0.9]
                        recs.append(dict(strategy="zero_shot", answer_format="oneword", dimension=dim,
                                         context_kind=kind, context_condition=cond, question_polarity=pol,
                                         label=2 if cond == "ambig" else 0, target_index=0, unknown_index=2,
                                         probs=probs, mass=0.5, setting=f"{kind}_{cond}_{pol}"))
    return recs


def test_summary_macro_is_mean_over_dimensions():
    s = summarize(_records(), n_boot=50)
    imp = s["zero_shot|oneword"]["implicit"]["expected"]
    per = imp["by_dimension"]
    assert imp["macro"]["acc_amb"] == pytest.approx((per["age"]["acc_amb"] + per["ses"]["acc_amb"]) / 2)
    assert per["age"]["acc_amb"] == pytest.approx(0.1)  # Unknown mass 0.9 - 0.8
    lo, hi = imp["macro"]["acc_amb_ci"]
    assert lo <= imp["macro"]["acc_amb"] <= hi
    assert s["zero_shot|oneword"]["_mass"]["mean"] == pytest.approx(0.5)


def test_tables_and_plot(tmp_path):
    s = summarize(_records(), n_boot=20)
    t2 = table2(s, "expected", "m")
    assert list(t2["Strategy/format"]) == ["zero_shot/oneword"]
    assert t2.loc[0, "Neutral Amb"] == "—" and t2.loc[0, "NoChar Amb"].startswith("0.90")
    md = to_markdown(t2)
    assert md.splitlines()[0].count("|") == len(t2.columns) + 1
    tk = tables_per_dimension(s, "zero_shot|oneword")
    assert list(tk["Dim."]) == ["age", "age", "ses", "ses"] and list(tk[""]) == ["E", "I", "E", "I"]
    figure3(s, "zero_shot|oneword", tmp_path / "f.png", model="m")
    assert (tmp_path / "f.png").stat().st_size > 1000
    write_reports(_records(), tmp_path / "out", n_boot=10)
    assert (tmp_path / "out" / "tables" / "table2_argmax.csv").is_file()


def test_report_captions_name_the_cluster_unit(tmp_path):
    """Issue #23: every ImplicitBBQ caption with a CI says it is clustered and by which unit."""
    from probe.tasks.implicitbbq.sections import implicitbbq_section
    from probe.reports.compare.runs import Run
    from probe.tasks.implicitbbq.summary import CI_UNIT

    summary = {"by_strategy": summarize(_records(), n_boot=20), "ci": {"unit": CI_UNIT}}
    run = Run(path=tmp_path, task="implicitbbq", model="m", config={"n_boot": 20}, summary=summary,
              provenance={}, label="m")
    items = implicitbbq_section([run], tmp_path)
    with_ci = [it for it in items if "CI" in it.caption and "No CIs" not in it.caption]
    assert len(with_ci) >= 4  # Table 2 with CIs (expected, argmax), Tables 5-7, the bias figure
    for it in with_ci:
        assert "cluster bootstrap" in it.caption and CI_UNIT in it.caption, (it.name, it.caption)
        assert "over items" not in it.caption
    old = Run(path=tmp_path, task="implicitbbq", model="m", config={"n_boot": 20},
              summary={"by_strategy": summary["by_strategy"]}, provenance={}, label="m")
    caps = [it.caption for it in implicitbbq_section([old], tmp_path) if "CI" in it.caption]
    assert any("no cluster unit in the summary" in c for c in caps)  # an old summary is not called clustered
