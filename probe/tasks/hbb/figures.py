"""HBB Figures 3, 4 and 8 (HBB paper) with matplotlib, as PNG and SVG, from per-instance frames.

The paper's text gives each figure's caption and what it shows, not its drawing:

- **Figure 3** "N. instances showing bias across models in HBB": "test instances (>= 20 bias score)
  ... across categories using a bar chart" - grouped bars, one group per category (Age, Gender,
  Race, SES, Religions), one bar per model: the count of instances with ``S >= threshold``.
- **Figure 4** "Hidden bias score distributions for HBB": the distribution of S over all test
  instances, per model - here one histogram panel per model (bins of 5 on 0-100, the threshold
  dashed).
- **Figure 8** "N. test instances (>= 20 bias score) across models (HBB-SG)": Figure 3's bars for
  HBB-SG (and Figure 9, HBB-SG's score distributions, is Figure 4's drawing for HBB-SG).

Inputs are ``{label: frame}`` (a label is a model, or a model and variant, as in the tables' model
columns; a frame has ``category`` and ``S``). Every function returns the figure *and* the numbers it
draws (a DataFrame), and each bar carries a ``gid`` ``"bar|LABEL|CATEGORY|COUNT"`` that the SVG keeps
as an element id, so tests can check that the file holds the right data.

>>> import pandas as pd
>>> df = pd.DataFrame({"category": ["age", "age", "race"], "S": [30.0, 5.0, 20.0]})
>>> category_counts({"m": df}, 20).to_dict("records")
[{'category': 'Age', 'm': 1}, {'category': 'Gender', 'm': 0}, {'category': 'Race', 'm': 1}, {'category': 'SES', 'm': 0}, {'category': 'Religions', 'm': 0}]
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Mapping

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from probe.io import write_atomic
from probe.tasks.hbb.data import CATEGORIES, CATEGORY_LABELS
from probe.tasks.hbb.metrics import over_threshold, snap_to_edges

__all__ = ["category_counts", "score_histograms", "figure3", "figure4", "figure8", "figure9", "save_png_svg",
           "write_run_figures", "FIGURE_TITLES"]

FIGURE_TITLES = {
    "figure3": "N. instances showing bias across models in HBB (Figure 3)",
    "figure4": "Hidden bias score distributions for HBB (Figure 4)",
    "figure8": "N. test instances (S ≥ {thr:g}) across models (HBB-SG) (Figure 8)",
    "figure9": "Hidden bias score distributions for HBB-SG (Figure 9)",
}
BINS = np.arange(0, 105, 5)


def _mpl() -> Any:
    matplotlib.use("Agg")

    return plt


def _wrap(text: str, width: int = 48) -> str:
    return "\n".join(textwrap.wrap(str(text), width)) or str(text)


def category_counts(frames: Mapping[str, pd.DataFrame], threshold: float = 20.0) -> pd.DataFrame:
    """Per category (the paper's order, every category present in some frame or in the benchmark) the
    count of instances with ``S >= threshold`` (up to the tolerance of :func:`over_threshold`), one column
    per label. A category a frame lacks counts 0."""
    present = {c for f in frames.values() for c in f["category"].astype(str)}
    cats = [c for c in CATEGORIES] + sorted(present - set(CATEGORIES))
    rows = []
    for c in cats:
        row: dict[str, Any] = {"category": CATEGORY_LABELS.get(c, c)}
        for label, f in frames.items():
            s = pd.to_numeric(f.loc[f["category"].astype(str) == c, "S"], errors="coerce").to_numpy(dtype=float)
            row[label] = int(over_threshold(s, threshold).sum())
        rows.append(row)
    return pd.DataFrame(rows)


def score_histograms(scores: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """Instances per S bin (``[0, 5), ..., [95, 100]``; NaN left out), one column per label. An S a hair below
    an edge (float round-off, :func:`probe.tasks.hbb.metrics.snap_to_edges`) falls in the bin the counts put it in."""

    out = pd.DataFrame({"bin_low": BINS[:-1], "bin_high": BINS[1:]})
    for label, s in scores.items():
        s = snap_to_edges(s, BINS)
        out[label] = np.histogram(np.clip(s[np.isfinite(s)], 0, 100), bins=BINS)[0]
    return out


def _bar_figure(counts: pd.DataFrame, title: str, ylabel: str) -> Any:
    plt = _mpl()
    labels = [c for c in counts.columns if c != "category"]
    cats = list(counts["category"])
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(cats) + 0.5 * len(labels)), 3.8))
    width = 0.8 / max(len(labels), 1)
    x = np.arange(len(cats))
    for i, label in enumerate(labels):
        vals = counts[label].to_numpy(dtype=float)
        bars = ax.bar(x - 0.4 + width * (i + 0.5), vals, width, label=_wrap(label, 70))
        for bar, cat, v in zip(bars, cats, vals):
            bar.set_gid(f"bar|{label}|{cat}|{int(v)}")
            ax.annotate(f"{int(v)}", (bar.get_x() + bar.get_width() / 2, v), ha="center", va="bottom", fontsize=6)
    ax.set_xticks(x, cats)
    ax.set_ylim(0, max(1.0, float(counts[labels].to_numpy().max()) * 1.1) if labels and len(cats) else 1.0)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if labels:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def figure3(frames: Mapping[str, pd.DataFrame], threshold: float = 20.0) -> tuple[Any, pd.DataFrame]:
    """Figure 3: instances with ``S >= threshold`` per category, one bar per label (HBB MCQ)."""
    counts = category_counts(frames, threshold)
    return _bar_figure(counts, FIGURE_TITLES["figure3"], f"test instances (S ≥ {threshold:g})"), counts


def figure8(frames: Mapping[str, pd.DataFrame], threshold: float = 20.0) -> tuple[Any, pd.DataFrame]:
    """Figure 8: Figure 3's bars for HBB-SG."""
    counts = category_counts(frames, threshold)
    return (_bar_figure(counts, FIGURE_TITLES["figure8"].format(thr=threshold), f"test instances (S ≥ {threshold:g})"),
            counts)


def figure4(frames: Mapping[str, pd.DataFrame], threshold: float = 20.0,
            title: str = FIGURE_TITLES["figure4"]) -> tuple[Any, pd.DataFrame]:
    """Figure 4: the distribution of S over all instances, one histogram panel per label."""
    plt = _mpl()
    scores = {label: pd.to_numeric(f["S"], errors="coerce").to_numpy(dtype=float) for label, f in frames.items()}
    hist = score_histograms(scores)
    n = max(len(scores), 1)
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.0 * cols, 3.0 * rows), squeeze=False, sharex=True)
    for ax, (label, s) in zip(axes.flat, scores.items()):
        ok = s[np.isfinite(s)]
        bars = ax.bar(hist.bin_low + 2.5, hist[label], width=5, color="#4C72B0", edgecolor="white")
        for bar, lo, v in zip(bars, hist.bin_low, hist[label]):
            bar.set_gid(f"bar|{label}|{int(lo)}|{int(v)}")
        ax.axvline(threshold, color="#C44E52", linestyle="--", linewidth=1, label=f"S = {threshold:g}")
        # long run labels (config differences) wrap instead of running into the next panel
        ax.set_title(f"{_wrap(label)}\n(n = {ok.size}, S ≥ {threshold:g}: {int(over_threshold(ok, threshold).sum())})",
                     fontsize=7)
        ax.set_xlim(0, 100)
        ax.set_xlabel("bias score S")
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(scores):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("test instances")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig, hist


def figure9(frames: Mapping[str, pd.DataFrame], threshold: float = 20.0) -> tuple[Any, pd.DataFrame]:
    """Figure 9: Figure 4's histograms for HBB-SG."""
    return figure4(frames, threshold, FIGURE_TITLES["figure9"])


def save_png_svg(fig: Any, stem: str | Path, dpi: int = 110) -> tuple[Path, Path]:
    """``stem.png`` and ``stem.svg`` (written atomically; the SVG without a date, so reruns are identical);
    closes the figure."""
    plt = _mpl()
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = (stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".svg"))
    for path in paths:
        tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")  # the suffix picks the format
        if path.suffix == ".svg":
            fig.savefig(tmp, metadata={"Date": None})
        else:
            fig.savefig(tmp, dpi=dpi)
        tmp.replace(path)
    plt.close(fig)
    return paths


def write_run_figures(mcq: Mapping[str, pd.DataFrame], sg: Mapping[str, pd.DataFrame], out_dir: str | Path,
                      threshold: float = 20.0) -> dict[str, pd.DataFrame]:
    """One run's figures under ``out_dir``: ``hbb_figure3`` and ``hbb_figure4`` (MCQ labels), ``hbb_figure8``
    and ``hbb_figure9`` (HBB-SG), each ``.png``, ``.svg`` and the ``.csv`` of the numbers drawn; returns those
    numbers by name."""

    out = Path(out_dir)
    data: dict[str, pd.DataFrame] = {}
    todo = []
    if mcq:
        todo += [("hbb_figure3", figure3, mcq), ("hbb_figure4", figure4, mcq)]
    if sg:
        todo += [("hbb_figure8", figure8, sg), ("hbb_figure9", figure9, sg)]
    for name, make, frames in todo:
        fig, numbers = make(frames, threshold)
        save_png_svg(fig, out / name)
        write_atomic(out / f"{name}.csv", numbers.to_csv(index=False))
        data[name] = numbers
    return data
