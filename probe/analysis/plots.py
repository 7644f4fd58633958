"""Plots and tables of the probe, logit-lens and patching analyses (PNG via matplotlib's Agg backend, pipe tables)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np


def _pyplot() -> Any:
    matplotlib.use("Agg")  # files only: no display needed

    return plt


def plot_probes(table: Any, transfers: Any, out: Path) -> None:
    """``probe_<task>.png``: accuracy per layer with CI, control task, shuffled labels, majority rate and
    (group task) explicit->implicit transfer; one panel per dimension x position."""
    plt = _pyplot()
    for task, sub in table.groupby("task"):
        panels = sorted(sub["dimension"].unique())
        positions = sorted(sub["position"].unique())
        fig, axes = plt.subplots(len(panels), len(positions), figsize=(5 * len(positions), 3.2 * len(panels)),
                                 squeeze=False, sharey=True)
        for i, dim in enumerate(panels):
            for j, pos in enumerate(positions):
                ax, d = axes[i][j], sub[(sub.dimension == dim) & (sub.position == pos)].sort_values("layer")
                ax.plot(d.layer, d.accuracy, "o-", label="probe")
                ax.fill_between(d.layer, d.ci_low, d.ci_high, alpha=0.25)
                ax.plot(d.layer, d.control_accuracy, "s--", label="control task")
                ax.plot(d.layer, d.shuffled_accuracy, "x:", label="shuffled labels")
                ax.plot(d.layer, d.majority, "k-", lw=0.8, label="majority class")
                if task == "group" and len(transfers):
                    t = transfers[(transfers.dimension == dim) & (transfers.position == pos)].sort_values("layer")
                    ax.plot(t.layer, t.accuracy, "^-", label="explicit->implicit transfer")
                ax.set_title(f"{task} / {dim} @ {pos}", fontsize=9)
                ax.set_xlabel("layer")
                ax.set_ylim(0, 1.02)
        axes[0][0].set_ylabel("accuracy (grouped CV)")
        axes[0][-1].legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        fig.savefig(out / f"probe_{task}.png", dpi=110)
        plt.close(fig)


def plot_lens(stereo: Any, unknown: Any, label_mass: Any, out: Path) -> None:
    """``lens.png``: mean P(stereotyped target) and P(Unknown) among the labels, and the label mass, by layer.
    ``stereo``/``unknown``: [items, layers]; ``label_mass``: [items, layers]."""
    plt = _pyplot()
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.2))
    ax[0].plot(stereo.mean(0), label="stereotyped target")
    ax[0].plot(unknown.mean(0), label="Unknown")
    ax[0].set(xlabel="layer", ylabel="P(label) among labels", title="logit lens: option labels")
    ax[0].legend(fontsize=8)
    ax[1].plot(label_mass.mean(0))
    ax[1].set(xlabel="layer", ylabel="label mass", title="probability on the labels at all", yscale="log")
    fig.tight_layout()
    fig.savefig(out / "lens.png", dpi=110)
    plt.close(fig)


def plot_patching(results: Mapping[str, Any], positions: Sequence[str], out: Path) -> None:
    """``patching.png``: mean change in log P(stereotyped label), layer x position, one panel per pair kind."""

    plt = _pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), 4), squeeze=False)
    lim = max(float(np.abs(v.mean(0)).max()) for v in results.values() if v.size) or 1.0
    for ax, (name, eff) in zip(axes[0], results.items()):
        im = ax.imshow(eff.mean(0), aspect="auto", cmap="RdBu_r", vmin=-lim, vmax=lim, origin="lower")
        ax.set(title=f"{name} (n={len(eff)})", xlabel="position", ylabel="layer")
        ax.set_xticks(range(len(positions)), positions, fontsize=8)
    fig.colorbar(im, ax=axes[0].tolist(), label="change in log P(stereotyped label)")
    fig.savefig(out / "patching.png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def markdown_table(df: Any) -> str:
    """A pipe table (pandas' ``to_markdown`` needs the optional ``tabulate``)."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"
