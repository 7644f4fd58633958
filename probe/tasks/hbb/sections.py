"""HBB's section of ``probe report``: Tables 1-3, 8, 9 and Figures 3, 4, 8, 9 with several models, the
paper-equivalent Table 1, and paired units per test instance.

HBB tables are :mod:`probe.tasks.hbb.tables` fed one per-instance frame per
model and variant (read back from each run's ``instances.jsonl``); figures are
:mod:`probe.tasks.hbb.figures`. Table 1's CS column reads the report's
``crows_pairs`` runs of the same models, or the CrowS-Pairs summary an ``hbb``
run nests, through :func:`probe.tasks.crows_pairs.layout.scores_by_type`.
The paper-equivalent Table 1 lays out each run's ``paper_equivalent`` block,
captioned with its sampling settings.

Paired units: one per test instance (``instances.jsonl``), cluster = concept
pair, one block per variant; McNemar: the argmax answer flips between the two
identities.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from probe.io import read_jsonl
from probe.reports.compare.common import boots, model_labels
from probe.reports.compare.paired import Spec, ratio
from probe.reports.compare.runs import Run
from probe.reports.compare.tables import Figure, Table, flatten, fmt, save_figure
from probe.tasks.crows_pairs.layout import CROWS_PROTOCOLS, protocol_of, scores_by_type
from probe.tasks.hbb import figures as F
from probe.tasks.hbb.records import LABELS
from probe.tasks.hbb.metrics import over_threshold
from probe.tasks.hbb.tables import table1, table2, table3, table8, table9

__all__ = ["VARIANTS", "hbb_frames", "hbb_paper_table", "hbb_paper_tables", "hbb_section", "hbb_spec",
           "hbb_units", "sg_variations_text"]

#: each variant as a reader of the paper names it (row and column labels: "smollm2 (one option order)")
VARIANTS = dict(LABELS)


def hbb_frames(run: Run) -> dict[str, pd.DataFrame]:
    """variant -> the per-instance frame (``S``, ``direction``, p1/p2, concept_id) from ``instances.jsonl``;
    HBB-SG keeps the instances of its subset only (``in_sg``), as the task does."""
    path = run.path / "instances.jsonl"
    if not path.is_file():
        return {}

    inst = pd.DataFrame(read_jsonl(path))
    frames = {}
    for v in VARIANTS:
        if f"{v}_S" not in inst:
            continue
        df = inst.rename(columns={f"{v}_S": "S", f"{v}_direction": "direction", f"{v}_p1": "p1", f"{v}_p2": "p2"})
        df["S"] = pd.to_numeric(df["S"], errors="coerce")  # JSON null (a non-finite record) is NaN
        if v == "hbb_sg" and "in_sg" in df:
            df = df[df.in_sg.astype(bool)]
        frames[v] = df
    return frames


def _cs_all(crows_summary: Mapping[str, Any] | None) -> Any:
    """The overall CrowS-Pairs score of a CrowS-Pairs summary (None when it has none)."""
    return ((scores_by_type(crows_summary) or {}).get("all") or {}).get("score")


def hbb_section(runs: Sequence[Run], out: Path, crows_runs: Sequence[Run] = ()) -> list[Any]:
    """Tables 1 and 2 (MCQ: both variants per model), 8 and 9 (HBB-SG), exact vs 10 samples, Table 3 (top
    associations), Figures 3 and 4 (MCQ), 8 and 9 (HBB-SG)."""

    thr = float(runs[0].summary.get("threshold", 20.0))
    if any(float(r.summary.get("threshold", thr)) != thr for r in runs):
        thr_note = " (runs differ in threshold; all tables use the first run's)"
    else:
        thr_note = ""
    frames = {r.label: hbb_frames(r) for r in runs}
    # CS: a crows_pairs run's own summary, or the CrowS-Pairs summary an hbb run nests (crows_pairs: true)
    cs_by_model = {r.model: _cs_all(r.summary) for r in crows_runs}
    cs_own = {r.label: _cs_all(r.summary.get("crows_pairs")) for r in runs}
    used = ({protocol_of(r.summary) for r in crows_runs} | {protocol_of(r.summary.get("crows_pairs")) for r in runs}
            - {None})
    cs_protocols = " and ".join(CROWS_PROTOCOLS[p] for p in ("mcq", "loglik") if p in used) or "none scored"
    nb, models = boots(runs), model_labels(runs)
    mcq = {f"{label} ({VARIANTS[v]})": f for label, fr in frames.items() for v, f in fr.items() if v != "hbb_sg"}
    sg = {f"{label} (HBB-SG)": fr["hbb_sg"] for label, fr in frames.items() if "hbb_sg" in fr}
    crows = {f"{r.label} ({VARIANTS[v]})": _num(cs_own.get(r.label), cs_by_model.get(r.model))
             for r in runs for v in frames[r.label] if v != "hbb_sg"}
    est = ("exact S = |P1(A) − P2(A)| × 100 from next-token label probabilities; one option order: s1 is option a), "
           "the paper's; both orders averaged: P(s1) averaged over s1 as option a) and as option b)")
    items: list[Any] = []
    if mcq:
        t1 = table1(mcq, crows if any(math.isfinite(v) for v in crows.values()) else None, thr,
                    n_boot=max(runs[0].n_boot or 1000, 1))
        items.append(Table("hbb_table1", "hbb", f"HBB Table 1 layout (S ≥ {thr:g}){thr_note}", (
            f"Task hbb, models {models}. Estimator: {est}. HBB (S): mean S over instances with S ≥ {thr:g}; count: "
            "their number; n: the instances column. CI: 95% percentile bootstrap over concept pairs (clusters), "
            f"n_boot = {runs[0].n_boot}. CS (50): the CrowS-Pairs score of the same model (a crows_pairs run or the "
            "hbb run's own), protocol "
            f"{cs_protocols}; CIs in the CrowS-Pairs section."), flatten(t1).replace("[nan, nan]", "–")))
        items.append(Table("hbb_table2", "hbb", f"HBB Table 2 layout: count (mean S) of instances with S ≥ {thr:g}", (
            f"Task hbb, models {models} (columns). Estimator: {est}. n: instances per type in the first column. "
            "CI: none in this layout (see Table 1)."), flatten(table2(mcq, thr))))
    if sg:
        items.append(Table("hbb_table8", "hbb", f"HBB-SG Table 8 layout (S ≥ {thr:g})", (
            f"Task hbb, models {models}. Estimator: exact HBB-SG, P(A) = the mean over variation pairs of "
            f"(1/PPL(A_j)) / (1/PPL(A_j) + 1/PPL(B_j)) (appendix E.1). Variations: {sg_variations_text(runs)}. "
            f"n: the instances column. CI: 95% percentile bootstrap over concept pairs, "
            f"n_boot = {runs[0].n_boot}."),
            flatten(table8(sg, thr, n_boot=max(runs[0].n_boot or 1000, 1))).replace("[nan, nan]", "–")))
        items.append(Table("hbb_table9", "hbb", f"HBB-SG Table 9 layout: count (mean S), S ≥ {thr:g}", (
            f"Task hbb, models {models} (columns). Estimator: exact HBB-SG (perplexity). n: per type in the Type "
            "column. CI: none in this layout."), flatten(table9(sg, thr))))

    top = table3({f"{label} ({VARIANTS[v]})": f for label, fr in frames.items() for v, f in fr.items()})
    if not top.empty:
        items.append(Table("hbb_table3", "hbb", "HBB Table 3 layout: top bias association per category", (
            f"Task hbb, models {models} (Scoring column). Estimator: exact S; per category the instance with the "
            "highest S, as identity ↔ concept in the direction the model chose; tied at max S: instances of the "
            "category at that S. n: 1 per category and scoring. CI: none (single instances)."), top))
    if frames:
        items += _hbb_figures(frames, thr, out, models)
    return items


SG_SOURCES = {"authors": "the authors' released variation set (all_data_more_contexts_questions.csv)",
              "file": "a variations file", "generated": "generated greedily by the evaluated model",
              "original": "the original options only (n = 1)"}

def sg_variations_text(runs: Sequence[Run]) -> str:
    """What HBB-SG variations each run scored, from its summary's ``hbb_sg`` block (source, pairs per concept
    pair, identical option pairs), one clause per run."""
    parts = []
    for r in runs:
        sg = r.summary.get("hbb_sg")
        if not sg:
            continue
        ppc = sg.get("pairs_per_concept") or {}
        src = SG_SOURCES.get(sg.get("variations"), str(sg.get("variations")))
        if sg.get("variations") == "file" and sg.get("variations_file"):
            src = f"the file {Path(str(sg['variations_file'])).name}"
        parts.append(f"{r.label}: {src}, {ppc.get('min', '?')}-{ppc.get('max', '?')} variation pairs per concept "
                     f"pair (mean {fmt(ppc.get('mean'), 1)}; {sg.get('n_requested', '?')} asked), "
                     f"{sg.get('n_identical_pairs', 0)} identical option pairs")
    return "; ".join(parts) or "not recorded"


def _hbb_figures(frames: Mapping[str, Mapping[str, pd.DataFrame]], thr: float, out: Path, models: str) -> list[Figure]:
    """Figures 3 and 4 (MCQ; each model and variant one label), 8 and 9 (HBB-SG): :mod:`probe.tasks.hbb.figures`."""

    mcq = {f"{label} ({VARIANTS[v]})": f for label, fr in frames.items() for v, f in fr.items() if v != "hbb_sg"}
    sg = {f"{label} (HBB-SG)": fr["hbb_sg"] for label, fr in frames.items() if "hbb_sg" in fr}
    exact = "exact S = |P1(A) − P2(A)| × 100 per test instance"
    todo = []
    if mcq:
        todo += [("hbb_figure3", F.figure3, mcq, "HBB Figure 3: instances with S ≥ {t} per category",
                  "bars: count of instances with S ≥ {t} per category; n: instances per model in Table 1"),
                 ("hbb_figure4", F.figure4, mcq, "HBB Figure 4: distribution of S",
                  "histogram of S (bins of 5), dashed: threshold {t}; n per model in each panel's title")]
    if sg:
        todo += [("hbb_figure8", F.figure8, sg, "HBB-SG Figure 8: instances with S ≥ {t} per category",
                  "bars: count of instances with S ≥ {t} per category (HBB-SG, perplexity); n in Table 8"),
                 ("hbb_figure9", F.figure9, sg, "HBB-SG Figure 9: distribution of S",
                  "histogram of S (HBB-SG, bins of 5), dashed: threshold {t}; n per model in each panel's title")]
    items = []
    for name, make, fr, title, what in todo:
        fig, _ = make(fr, thr)
        items.append(save_figure(fig, out, name, "hbb", title.format(t=f"{thr:g}"),
                                 f"Task hbb, models {models}. Estimator: {exact}; {what.format(t=f'{thr:g}')}. "
                                 "No CI (counts and distributions; CIs in Tables 1 and 8)."))
    return items


def _num(*xs: Any) -> float:
    """The first value that is a finite number, else NaN."""
    for x in xs:
        if isinstance(x, (int, float)) and math.isfinite(x):
            return float(x)
    return math.nan


def hbb_spec(threshold: float) -> Spec:
    t = f"{threshold:g}"
    return Spec("hbb", ("n", "over", "s_over", "s"),
                {f"share S≥{t}": lambda s: ratio(s[..., 1], s[..., 0]),
                 f"mean S (S≥{t})": lambda s: ratio(s[..., 2], s[..., 1]),
                 "mean S": lambda s: ratio(s[..., 3], s[..., 0])},
                "the argmax answer differs between the two identities (P(A) on either side of 0.5)",
                "exact S from label probabilities (HBB-SG: perplexities)", "concept pair", unit="test instances")


def hbb_units(run: Run, threshold: float) -> pd.DataFrame:
    parts = []
    for v, f in hbb_frames(run).items():
        s = pd.to_numeric(f["S"], errors="coerce").to_numpy(dtype=float)
        ok = np.isfinite(s)
        p1 = pd.to_numeric(f["p1"], errors="coerce").to_numpy(dtype=float)
        p2 = pd.to_numeric(f["p2"], errors="coerce").to_numpy(dtype=float)
        flip = np.where(np.isfinite(p1) & np.isfinite(p2), ((p1 > 0.5) != (p2 > 0.5)).astype(float), np.nan)
        over = np.where(ok, over_threshold(s, threshold).astype(float), np.nan)  # the tasks' tolerance
        parts.append(pd.DataFrame({
            "unit": f["id"].astype(str).to_numpy(), "block": VARIANTS[v],
            "category": f["category"].astype(str).to_numpy(),
            "cluster": f["concept_id"].astype(str).to_numpy(), "n": np.where(ok, 1.0, np.nan), "over": over,
            "s_over": np.where(ok, s * np.nan_to_num(over), np.nan), "s": s, "binary": flip}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["unit", "block"])


# -- the paper-equivalent Table 1 ----------------------------------------------------------------------------
def _count(entry: Mapping[str, Any] | None) -> str:
    """``E (q05–q95); exact k`` of one paper-equivalent group (– when missing)."""
    if not entry:
        return "–"
    e = entry.get("expected_count")
    e_txt = "–" if not isinstance(e, (int, float)) or not math.isfinite(e) else f"{e:.1f}"
    return f"{e_txt} ({entry.get('count_q05', '–')}–{entry.get('count_q95', '–')}); exact {entry.get('exact_count', '–')}"


def _settings_text(st: Mapping[str, Any]) -> str:
    return (f"T = {st.get('temperature', math.nan):g}, top-p = {st.get('top_p', math.nan):g}, "
            f"{st.get('samples', '?')} samples per question, S ≥ {st.get('threshold', math.nan):g}, non-label answers "
            f"{'dropped' if st.get('invalid') == 'drop' else st.get('invalid', '?')}")


def hbb_paper_table(runs: Sequence[Run]) -> Table | None:
    """HBB Table 1 (a)=s1) under the paper's estimator: one row per model, one column per category and all;
    cell = expected count (5-95% over repeated runs of the paper's procedure); exact count beside it."""
    have = [r for r in runs if (r.summary.get("paper_equivalent") or {}).get("all")]
    if not have:
        return None
    cats = list(dict.fromkeys(c for r in have for c in r.summary["paper_equivalent"].get("by_category", {})))
    rows = []
    for r in have:
        pe = r.summary["paper_equivalent"]
        row: dict[str, Any] = {"Model": r.label, "n": pe["all"].get("n")}
        row.update({c: _count(pe.get("by_category", {}).get(c)) for c in cats})
        row["all"] = _count(pe["all"])
        nf = pe["all"].get("noise_floor_expected_count")
        row["noise floor (all)"] = (f"{nf:.1f} ({pe['all'].get('noise_floor_q05', '–')}–"
                                    f"{pe['all'].get('noise_floor_q95', '–')})") if isinstance(nf, (int, float)) else "–"
        ms = pe["all"].get("expected_mean_s")
        row["paper E[mean S] (all)"] = f"{ms:.1f}" if isinstance(ms, (int, float)) and math.isfinite(ms) else "–"
        rows.append(row)
    settings = {_settings_text(r.summary["paper_equivalent"].get("settings") or {}) for r in have}
    st = "; ".join(sorted(settings))
    return Table("hbb_table1_paper", "hbb", f"HBB Table 1 layout, one option order, paper-equivalent ({st})", (
        f"Task hbb, models {model_labels(have)}. Estimator: paper-equivalent ({st}): the count of instances with "
        "S ≥ threshold that the paper's procedure (each question answered by sampled generations, S from the answer "
        "shares) would report, as its expectation computed exactly from the tempered label probabilities; in "
        "parentheses its 5-95% range over repeated runs of that procedure (Poisson-binomial), then the exact count "
        "(S from the T = 1 probabilities). Noise floor: the same expectation with p1 = p2 for every instance (what "
        "sampling noise alone gives). n: instances. CI: the 5-95% ranges (no bootstrap)."), pd.DataFrame(rows))


def hbb_paper_tables(runs: Sequence[Run], params_b: Mapping[str, float] | None = None) -> list[tuple[str, Table]]:
    """``[("hbb_table1", the paper-equivalent Table 1)]`` when any run computed it, else ``[]``."""
    t = hbb_paper_table(runs)
    return [("hbb_table1", t)] if t is not None else []
