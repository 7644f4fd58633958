"""Tables in the layouts of iso/cmp paper's Tables 2-7 (Markdown and CSV) and the iso-vs-cmp PG plot.

Input: a combined summary of one or more ``cmp_iso`` runs
(:func:`probe.tasks.cmp_iso.model_tables.combine_summaries` / ``combine_runs``; its
``results`` rows: model x setting x benchmark x mode with ``iso``/``cmp`` PG,
CI, neutral share, consistency and the cmp-vs-iso test; ``comparisons``:
randomization tests between settings; ``variants``: per-variant spread).
Numbers read back from ``summary.json`` may be ``None`` (NaN in JSON); they show as "–".

Tables (rows = models, columns = benchmarks, ``∗`` = p < alpha):

- ``table2_<setting>``: PG per benchmark as ``iso | cmp``; ∗ on cmp when the
  cmp-vs-iso test is significant (the paper's Table 2 marks cmp PG this way; we
  show the iso value beside it). Table 3 of the paper is this table for the
  direct setting.
- ``table4_<setting>``: neutral option share (%) ``iso | cmp`` (neutral settings).
- ``table5_<setting>``: |PG_cmp| x 100, the "deviation from the 0% equilibrium",
  ``w/o | w/`` neutral option; ∗ when the two differ significantly.
- ``table6_<setting>``: target consistency x 100 across the two option orders
  (cmp; 50 random, 0 position bias, 100 fixed target): the share of pairs whose
  two orders prefer the same target. CoT settings: as the paper, on the pairs
  whose generations for both orders claim randomness (Table H.2 keywords;
  ``cmp.claimed_random``); direct settings have no generations: all pairs.
- ``table7_<setting>``: PG_cmp x 100 under the "answer randomly" instruction.
- ``variants``: PG spread over prompt variations; ``label_mass``: mean
  probability mass on the labels.

Each table exists per estimator (:func:`table_modes`): exact expected counts
(no suffix), argmax (``_argmax``) and, when the run computed it, the
paper-equivalent estimate under the authors' sampling (``_paper``: T = 0.7,
top-p = 0.9 by default; the settings are named in the title and caption).

Every table of PG values carries a caption (``df.attrs["caption"]``, written
under the Markdown table) saying what a positive PG means on each of its
benchmarks (:data:`probe.tasks.cmp_iso.data.PG_POSITIVE`).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd

from probe.tasks.cmp_iso.data import BENCHMARK_TITLES, PG_POSITIVE
from probe.io import write_atomic
from probe.reports.headline import phrase
from probe.tasks.cmp_iso.metrics import PAPER_MODE
from probe.tasks.cmp_iso.terms import TERMS

STAR = "∗"


def _fmt(x: float, digits: int = 2, star: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    s = f"{x:.{digits}f}"
    return f"{s} {STAR}" if star else s


def _scaled(x: float | None, factor: float) -> float:
    """``x * factor``; NaN for a missing value (``None``: NaN read back from JSON)."""
    return math.nan if x is None else x * factor


def _rows(summary: dict, setting: str, mode: str) -> dict[tuple[str, str], dict]:
    return {(r["model"], r["benchmark"]): r for r in summary["results"] if r["setting"] == setting and r["mode"] == mode}


def _frame(summary: dict, cells: dict[tuple[str, str, str], str], subcols: tuple[str, ...]) -> pd.DataFrame:
    """Models x (benchmark[, sub-column]) frame from ``cells[(model, benchmark, sub)]``."""
    benches = [b for b in summary["benchmarks"] if any(k[1] == b for k in cells)]
    cols = [(BENCHMARK_TITLES.get(b, b), s) for b in benches for s in subcols] if subcols != ("",) else \
        [BENCHMARK_TITLES.get(b, b) for b in benches]
    data = []
    for m in summary["models"]:
        data.append([cells.get((m, b, s), "–") for b in benches for s in subcols])
    df = pd.DataFrame(data, index=pd.Index(summary["models"], name="Model"), columns=cols)
    if subcols != ("",) and cols:  # no cells (e.g. no paper-equivalent row for this setting): an empty frame
        df.columns = pd.MultiIndex.from_tuples(cols)
    return df


def table2(summary: dict, setting: str, mode: str = "expected") -> pd.DataFrame:
    """PG iso | cmp per benchmark; ∗ on cmp: cmp differs significantly from iso."""
    cells = {}
    for (m, b), r in _rows(summary, setting, mode).items():
        test = r.get("cmp_vs_iso") or {}
        cells[(m, b, "iso")] = _fmt(r["iso"]["pg"])
        cells[(m, b, "cmp")] = _fmt(r["cmp"]["pg"], star=bool(test.get("significant")))
    return _frame(summary, cells, ("iso", "cmp"))


def table4(summary: dict, setting: str, mode: str = "expected") -> pd.DataFrame:
    """Neutral-option share (%) iso | cmp."""
    cells = {}
    for (m, b), r in _rows(summary, setting, mode).items():
        for par in ("iso", "cmp"):
            v = r[par]["neutral_share"]
            cells[(m, b, par)] = _fmt(v * 100 if v is not None and not math.isnan(v) else math.nan, 1)
    return _frame(summary, cells, ("iso", "cmp"))


def table5(summary: dict, setting: str, neutral_setting: str, mode: str = "expected") -> pd.DataFrame:
    """|PG_cmp| x 100 without | with the neutral option; ∗: the two differ (randomization test)."""
    tests = {(c["model"], c["benchmark"]): c for c in summary.get("comparisons", [])
             if c["a"] == setting and c["b"] == neutral_setting and c["mode"] == mode and c["paradigm"] == "cmp"}
    cells = {}
    for sub, s in (("w/o", setting), ("w/", neutral_setting)):
        for (m, b), r in _rows(summary, s, mode).items():
            star = sub == "w/" and bool(tests.get((m, b), {}).get("significant"))
            pg = r["cmp"]["pg"]
            cells[(m, b, sub)] = _fmt(_scaled(None if pg is None else abs(pg), 100), 1, star)
    return _frame(summary, cells, ("w/o", "w/"))


def table6(summary: dict, setting: str, mode: str = "expected") -> pd.DataFrame:
    """Target consistency x 100 across the two option orders (cmp); CoT: on the pairs claiming randomness."""
    cells = {(m, b, ""): _fmt(r["cmp"]["claimed_random"]["consistency"], 1) if r["cmp"].get("claimed_random")
             else _fmt(_scaled(r["cmp"].get("consistency", math.nan), 100), 1)
             for (m, b), r in _rows(summary, setting, mode).items()}
    return _frame(summary, cells, ("",))


def table7(summary: dict, setting: str, mode: str = "expected") -> pd.DataFrame:
    """PG_cmp x 100 (for the "answer randomly" setting); ∗ as in table 2."""
    cells = {}
    for (m, b), r in _rows(summary, setting, mode).items():
        test = r.get("cmp_vs_iso") or {}
        cells[(m, b, "")] = _fmt(_scaled(r["cmp"]["pg"], 100), 1, bool(test.get("significant")))
    return _frame(summary, cells, ("",))


def label_mass_table(summary: dict, setting: str, mode: str = "expected") -> pd.DataFrame:
    """Mean probability on the labels (paper mode: the chance that one sample is a label token)."""
    cells = {}
    for (m, b), r in _rows(summary, setting, "expected" if mode == "argmax" else mode).items():
        for par in ("iso", "cmp"):
            cells[(m, b, par)] = _fmt(r["label_mass"][par], 3)
    return _frame(summary, cells, ("iso", "cmp"))


def variants_table(summary: dict) -> pd.DataFrame:
    rows = [{"model": v["model"], "setting": v["setting"], "benchmark": BENCHMARK_TITLES.get(v["benchmark"], v["benchmark"]),
             "paradigm": v["paradigm"], "mode": v["mode"], "n_variants": len(v["per_variant"]),
             "mean": v["mean"], "std": v["std"], "iqr": v["iqr"], "min": v["min"], "max": v["max"]}
            for v in summary.get("variants", [])]
    return pd.DataFrame(rows)


def sign_caption(benchmarks: list[str], absolute: bool = False) -> str:
    """What a positive PG means on each benchmark (PG = mean of p_t - p_t'; t as in iso/cmp paper, Table 1)."""
    lead = ("|PG| drops the sign; with its sign, PG > 0 means" if absolute else "PG > 0 means")
    return lead + " -- " + "; ".join(f"{BENCHMARK_TITLES.get(b, b)}: {PG_POSITIVE[b]}"
                                      for b in benchmarks if b in PG_POSITIVE) + "."


def _captioned(df: pd.DataFrame, summary: dict, absolute: bool = False) -> pd.DataFrame:
    df.attrs["caption"] = sign_caption(list(summary["benchmarks"]), absolute)
    return df


def to_markdown(df: pd.DataFrame, title: str = "") -> str:
    """A GitHub Markdown table (two-level columns flattened as ``Bench iso``), then its caption if any."""
    cols = [" ".join(str(x) for x in c if x) if isinstance(c, tuple) else str(c) for c in df.columns]
    index_name = df.index.name or ""
    lines = [f"**{title}**\n" if title else ""]
    lines.append("| " + " | ".join([index_name] * (index_name != "") + cols) + " |")
    lines.append("|" + "---|" * (len(cols) + (index_name != "")))
    for idx, row in df.iterrows():
        vals = [_cell(v) for v in row.tolist()]
        lines.append("| " + " | ".join(([str(idx)] if index_name else []) + vals) + " |")
    caption = df.attrs.get("caption")
    if caption:
        lines.append(f"\n{caption}")
    return "\n".join(lines).lstrip("\n") + "\n"


def _cell(v: object) -> str:
    return _fmt(v, 3) if isinstance(v, float) else str(v)


def mode_title(summary: dict, mode: str) -> str:
    """How a table names its estimator: ``expected``, ``argmax``, or the paper sampling's settings."""
    if mode != PAPER_MODE:
        return mode
    spec = (summary.get("paper_equivalent") or {}).get("settings") or {}
    t, p = spec.get("temperature", math.nan), spec.get("top_p", math.nan)
    return f"paper-equivalent: T = {t:g}, top-p = {p:g}"


def table_modes(summary: dict) -> list[tuple[str, str]]:
    """(mode, file-name suffix) of every estimator the summary holds rows for."""
    modes = [("expected", ""), ("argmax", "_argmax")]
    if any(r.get("mode") == PAPER_MODE for r in summary.get("results", [])):
        modes.append((PAPER_MODE, "_paper"))
    return modes


def build_tables(summary: dict, mode: str = "expected") -> dict[str, tuple[str, pd.DataFrame]]:
    """All tables the summary supports: name -> (title, frame)."""
    out = _build_tables(summary, mode, mode_title(summary, mode))
    if mode == PAPER_MODE:  # the estimator named under every table, before what the PG sign means
        lead = (f"Paper-equivalent estimate ({mode_title(summary, mode)}, the authors' sampling): expected counts "
                "under the tempered, nucleus-cut label distribution, renormalised over the labels.")
        for _, df in out.values():
            df.attrs["caption"] = lead + (" " + df.attrs["caption"] if df.attrs.get("caption") else "")
    return out


def _words(setting: str) -> str:
    """A setting key as the paper names it: ``direct+neutral`` -> ``direct answer, with a neutral option``."""

    return phrase(setting, TERMS)


def _build_tables(summary: dict, mode: str, label: str) -> dict[str, tuple[str, pd.DataFrame]]:
    settings = set(summary["settings"])
    out: dict[str, tuple[str, pd.DataFrame]] = {}
    for s in sorted(settings):
        if "+v" in s:
            continue
        w = _words(s)  # the setting in the paper's words, for titles (keys stay as they are)
        out[f"table2_{s}"] = (f"PG ({w}, {label}); ∗: cmp vs iso p < {summary['alpha']}",
                              _captioned(table2(summary, s, mode), summary))
        pairs = "pairs claiming randomness" if s.split("+")[0] == "cot" else "all pairs"
        out[f"table6_{s}"] = (f"Target consistency x100 across option orders, cmp, {pairs} ({w}, {label})",
                              table6(summary, s, mode))
        out[f"label_mass_{s}"] = (f"Mean label mass ({w}, {label})", label_mass_table(summary, s, mode))
        if "neutral" in s.split("+"):
            out[f"table4_{s}"] = (f"Neutral option share % ({w}, {label})", table4(summary, s, mode))
            base = "+".join(p for p in s.split("+") if p != "neutral")
            if base in settings:
                out[f"table5_{base}"] = (f"|PG_cmp| x100 without / with neutral option ({_words(base)}, {label}); ∗: differ",
                                         _captioned(table5(summary, base, s, mode), summary, absolute=True))
        if "random" in s.split("+"):
            out[f"table7_{s}"] = (f"PG_cmp x100 under 'answer randomly' ({w}, {label})",
                                  _captioned(table7(summary, s, mode), summary))
    if summary.get("variants"):
        out["variants"] = ("PG over prompt variations (every estimator)", _captioned(variants_table(summary), summary))
    return out


def plot_pg(summary: dict, setting: str, path: str | Path, mode: str = "expected") -> None:
    """iso vs cmp PG per benchmark and model with 95% bootstrap CIs; filled = cmp vs iso significant."""

    matplotlib.use("Agg")

    rows = _rows(summary, setting, mode)
    benches = [b for b in summary["benchmarks"] if any(k[1] == b for k in rows)]
    models = summary["models"]
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(benches)), 4))
    width = 0.8 / max(1, 2 * len(models))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    extent: list[float] = []  # |PG| + CI half-widths, for the y range
    for mi, m in enumerate(models):
        for pi, par in enumerate(("iso", "cmp")):
            xs, ys, lo, hi, filled = [], [], [], [], []
            for bi, b in enumerate(benches):
                r = rows.get((m, b))
                if r is None or not r[par]["n_pairs"]:
                    continue
                xs.append(bi - 0.4 + width * (2 * mi + pi + 0.5))
                ys.append(r[par]["pg"])
                ci = r[par]["ci"]
                lo.append(r[par]["pg"] - ci[0] if ci[0] is not None else 0)
                hi.append(ci[1] - r[par]["pg"] if ci[1] is not None else 0)
                filled.append(bool((r.get("cmp_vs_iso") or {}).get("significant")))
                extent.append(abs(ys[-1]) + max(lo[-1], hi[-1], 0))
            c = colors[mi % len(colors)]
            marker = "o" if par == "cmp" else "s"
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="none", ecolor=c, alpha=0.7, capsize=2)
            for x, y, f in zip(xs, ys, filled):
                ax.plot(x, y, marker, color=c, markerfacecolor=c if f else "white")
            ax.plot([], [], marker, color=c, label=f"{m} {par}")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(range(len(benches)), [BENCHMARK_TITLES.get(b, b) for b in benches], rotation=20)
    ax.set_ylabel("Parity Gap (PG)")
    # PG lives in [-1, 1] but small models sit near 0: zoom to the data, keep 0 in view
    span = min(1.05, 1.15 * max(extent + [0.05]))
    ax.set_ylim(-span, span)
    ax.set_title(f"iso vs cmp PG ({_words(setting)}, {mode})\n95% bootstrap CIs; filled: cmp vs iso p < {summary['alpha']}",
                 fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(summary: dict, out_dir: str | Path) -> list[Path]:
    """Write ``tables/<name>.md|csv`` (expected and argmax) and the PG plots; return the paths."""
    out = Path(out_dir)
    written = []
    for mode, suffix in table_modes(summary):
        for name, (title, df) in build_tables(summary, mode).items():
            if mode != "expected" and name.startswith("variants") or mode == "argmax" and name.startswith("label_mass"):
                continue
            md, csv = out / "tables" / f"{name}{suffix}.md", out / "tables" / f"{name}{suffix}.csv"
            write_atomic(md, to_markdown(df, title))
            write_atomic(csv, df.to_csv())
            written += [md, csv]
    plain = [s for s in summary["settings"] if "+v" not in s]
    for i, s in enumerate(plain):
        p = out / ("pg_iso_vs_cmp.png" if i == 0 else f"pg_iso_vs_cmp_{s}.png")
        plot_pg(summary, s, p)
        written.append(p)
    return written
