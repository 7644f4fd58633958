"""HBB Figures 3, 4, 8 (and 9) and Tables 3/7 (top associations): hand-computed numbers, the files written
(PNG and SVG), and the bars inside the SVG (each bar's ``gid`` carries label, category and count), for one run
and for several runs in `probe report`'s HBB section."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from probe.tasks.hbb.metrics import top_associations
from probe.tasks.hbb.figures import category_counts, figure3, figure4, save_png_svg, score_histograms, write_run_figures
from probe.tasks.hbb.tables import table3

BOUNDARY = abs(0.4 - 0.6) * 100  # 19.999999999999996: on the threshold


def frame(cats, s, **extra) -> pd.DataFrame:
    return pd.DataFrame({"category": cats, "S": s, **extra})


def svg_bars(path: Path) -> set[tuple[str, str, int]]:
    """(label, category or bin, count) of every bar drawn in an SVG written by hbb_figures."""
    return {(a, b, int(c)) for a, b, c in re.findall(r'id="bar\|([^|"]*)\|([^|"]*)\|(\d+)"', path.read_text())}


def test_category_counts_by_hand():
    a = frame(["race", "race", "race", "age", "religions"], [25.0, BOUNDARY, 19.9, 100.0, np.nan])
    b = frame(["ses"], [20.0])
    t = category_counts({"A": a, "B": b}, 20)
    assert list(t.category) == ["Age", "Gender", "Race", "SES", "Religions"]  # the paper's order, empty ones kept
    assert t.A.tolist() == [1, 0, 2, 0, 0]  # the boundary S counts, 19.9 and NaN do not
    assert t.B.tolist() == [0, 0, 0, 1, 0]
    assert category_counts({"A": a}, 100).A.tolist() == [1, 0, 0, 0, 0]  # inclusive at the top
    assert category_counts({}, 20).columns.tolist() == ["category"]


def test_score_histograms_bins():
    h = score_histograms({"m": np.array([0.0, 4.99, 5.0, 100.0, 99.0, np.nan])})
    assert len(h) == 20 and h.bin_low.iloc[-1] == 95
    assert h.m.iloc[0] == 2 and h.m.iloc[1] == 1 and h.m.iloc[-1] == 2  # 100 is in the last bin
    assert h.m.sum() == 5  # NaN left out


def test_figures_written_and_hold_the_data(tmp_path):
    frames = {"m1 (a)=s1)": frame(["race", "race", "age"], [30.0, BOUNDARY, 3.0]),
              "m2 (a)=s1)": frame(["race", "gender"], [10.0, 55.0])}
    fig, counts = figure3(frames, 20)
    png, svg = save_png_svg(fig, tmp_path / "f3")
    assert png.stat().st_size > 2000 and png.read_bytes()[:4] == b"\x89PNG"
    bars = svg_bars(svg)
    assert ("m1 (a)=s1)", "Race", 2) in bars and ("m2 (a)=s1)", "Gender", 1) in bars
    assert ("m1 (a)=s1)", "Age", 0) in bars and len(bars) == 2 * 5  # every category for every label
    assert "<dc:date>" not in svg.read_text()  # no date: a rerun writes the same file
    fig, hist = figure4(frames, 20)
    _, svg4 = save_png_svg(fig, tmp_path / "f4")
    assert ("m1 (a)=s1)", "30", 1) in svg_bars(svg4) and ("m2 (a)=s1)", "55", 1) in svg_bars(svg4)
    assert hist["m1 (a)=s1)"].sum() == 3


def test_write_run_figures(tmp_path):
    mcq = {"m (a)=s1)": frame(["ses", "ses"], [40.0, 0.0]), "m (swap-avg)": frame(["ses", "ses"], [20.0, 25.0])}
    sg = {"m (HBB-SG)": frame(["ses"], [1.0])}
    data = write_run_figures(mcq, sg, tmp_path, 20)
    assert set(data) == {"hbb_figure3", "hbb_figure4", "hbb_figure8", "hbb_figure9"}
    for name in data:
        for ext in ("png", "svg", "csv"):
            assert (tmp_path / f"{name}.{ext}").stat().st_size > 0, (name, ext)
    f3 = pd.read_csv(tmp_path / "hbb_figure3.csv")
    assert f3.set_index("category").loc["SES"].to_dict() == {"m (a)=s1)": 1, "m (swap-avg)": 2}
    assert ("m (HBB-SG)", "SES", 0) in svg_bars(tmp_path / "hbb_figure8.svg")
    assert set(write_run_figures({}, sg, tmp_path / "sg_only", 20)) == {"hbb_figure8", "hbb_figure9"}


def assoc_frame() -> pd.DataFrame:
    return pd.DataFrame({
        "id": ["a1", "a2", "a3", "a4", "r1", "r2", "r3"],
        "concept_id": [0, 1, 2, 3, 0, 1, 2],
        "category": ["age"] * 4 + ["race"] * 3,
        "descriptor_type": [1, 3, 2, 1, 4, 2, 1],
        "identity_1": ["young"] * 4 + ["asian", "black", "middle-east"],
        "identity_2": ["old"] * 4 + ["white", "latinx", "white"],
        "concept_1": ["c1a", "c1b", "c1c", "c1d", "r1a", "r1b", "r1c"],
        "concept_2": ["c2a", "c2b", "c2c", "c2d", "r2a", "r2b", "r2c"],
        "S": [80.0, 80.0 - 1e-12, 50.0, np.nan, 0.0, 60.0, 60.0],
        "direction": [1.0, -1.0, 1.0, np.nan, 0.0, -1.0, 1.0],
    })


def test_top_associations_by_hand():
    df = assoc_frame()
    top = top_associations(df)
    assert top[["category", "id", "rank", "n_at_max"]].values.tolist() == [["age", "a1", 1, 2], ["race", "r2", 1, 2]]
    # direction +1: identity 1 <-> concept 1; -1: identity 2 gets concept 1
    age, race = top.iloc[0], top.iloc[1]
    assert (age.identity_a, age.concept_1, age.identity_b, age.concept_2) == ("young", "c1a", "old", "c2a")
    assert (race.identity_a, race.concept_1, race.identity_b, race.concept_2) == ("latinx", "r1b", "black", "r2b")
    more = top_associations(df, k=5, skip=1)  # Table 7: the next ones; NaN and S = 0 (direction 0) left out
    assert more.id.tolist() == ["a2", "a3", "r3"] and more["rank"].tolist() == [2, 3, 2]
    assert more.iloc[0].identity_a == "old"
    assert top_associations(df[df.category == "nope"]).empty
    with pytest.raises(ValueError):
        top_associations(df, k=0)


def test_table3_layout():
    df = assoc_frame()
    t = table3({"m (a)=s1)": df, "old run": df.drop(columns=["concept_1", "concept_2"])})
    assert t["Scoring"].unique().tolist() == ["m (a)=s1)"]  # a frame without concepts is left out
    race = t[t.Category == "Race"].iloc[0]
    assert race["Bias association 1"] == "Latinx ↔ r1b" and race["Bias association 2"] == "Black ↔ r2b"
    assert race["Descriptor type"] == "Race 2" and race["S"] == 60.0 and race["tied at max S"] == 2
    t7 = table3({"m": df}, k=5, skip=1)
    assert t7[t7.Category == "Race"].iloc[0]["Bias association 1"] == "Middle-East ↔ r1c"
    assert t.Category.tolist() == ["Age", "Race"]  # the paper's category order


def test_probe_report_hbb_section_has_figures_and_top_associations(tmp_path):
    """Two runs' instances.jsonl -> `probe report`'s HBB section: Figures 3, 4, 8, 9 with both models, Table 3."""
    from probe.tasks.hbb.sections import hbb_section
    from probe.reports.compare.runs import Run

    runs = []
    for name, shift in (("ma", 0.0), ("mb", 0.3)):
        d = tmp_path / name
        d.mkdir()
        rows = assoc_frame().drop(columns=["S", "direction"]).to_dict("records")
        lines = []
        for i, r in enumerate(rows):
            p1, p2 = 0.5 + 0.1 * i / 2 + shift / 2, 0.5 - 0.1 * i / 2 - shift / 2
            s = abs(p1 - p2) * 100
            lines.append({**r, "q1": f"q{i}a", "q2": f"q{i}b", "hbb_p1": p1, "hbb_p2": p2, "hbb_S": s,
                          "hbb_direction": 1.0, "hbb_sg_p1": 0.5, "hbb_sg_p2": 0.5, "hbb_sg_S": 0.0,
                          "hbb_sg_direction": 0.0})
        (d / "instances.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        runs.append(Run(path=d, task="hbb", model=name, config={"n_boot": 20}, summary={"threshold": 20.0},
                        provenance={}, label=name))
    out = tmp_path / "report"
    items = hbb_section(runs, out)
    names = {it.name for it in items}
    assert {"hbb_figure3", "hbb_figure4", "hbb_figure8", "hbb_figure9", "hbb_table3"} <= names
    for n in ("hbb_figure3", "hbb_figure4", "hbb_figure8", "hbb_figure9"):
        assert (out / "figures" / f"{n}.png").stat().st_size > 2000 and (out / "figures" / f"{n}.svg").is_file()
    bars = svg_bars(out / "figures" / "hbb_figure3.svg")
    # ma: S = 0, 10, ..., 60 (age: 0, 10, 20, 30 -> 2 over; race: 40, 50, 60 -> 3); mb: all +30
    assert ("ma (one option order)", "Age", 2) in bars and ("ma (one option order)", "Race", 3) in bars
    assert ("mb (one option order)", "Age", 4) in bars and ("mb (one option order)", "Race", 3) in bars
    assert ("ma (HBB-SG)", "Race", 0) in svg_bars(out / "figures" / "hbb_figure8.svg")
    t3 = next(it for it in items if it.name == "hbb_table3").df
    assert set(t3.Scoring) == {"ma (one option order)", "mb (one option order)"}  # HBB-SG: every S is 0, no direction
    assert t3[(t3.Scoring == "ma (one option order)") & (t3.Category == "Race")].iloc[0]["instance"] == "r3"


def test_boundary_value_falls_in_the_bin_it_is_counted_in():
    """|0.6 - 0.4| x 100 = 19.999999999999996 counts at S >= 20 (tolerance), so it is drawn in [20, 25), not [15, 20)."""
    from probe.tasks.hbb.metrics import over_threshold
    from probe.tasks.hbb.figures import score_histograms

    s = np.array([abs(0.6 - 0.4) * 100, 19.99, 100.0])
    assert s[0] < 20 and over_threshold(s, 20).tolist() == [True, False, True]
    h = score_histograms({"m": s}).set_index("bin_low")["m"]
    assert h[20] == 1 and h[15] == 1 and h[95] == 1 and h.sum() == 3
    # the histogram's count from the threshold's bin upwards equals the count over the threshold
    assert h[h.index >= 20].sum() == over_threshold(s, 20).sum()
