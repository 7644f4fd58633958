"""Where does a model turn an implicit cue into a group identity and a stereotyped answer?

    python -m experiments.representations --config configs/representations.yaml [--output-dir DIR]

Steps (each resumable or cheap to redo; outputs in ``output_dir``):

1. ``items.jsonl``: a stratified ImplicitBBQ sample (``per_dimension`` items per
   dimension, half explicit, half implicit, balanced over ambiguous/disambiguated
   x negative/non-negative), built by :mod:`probe.data.implicitbbq`.
2. ``acts/``: one scoring pass records the label log-probs and ``resid_post`` of
   every layer at the configured positions (``probe activations``).
3. ``probes.csv`` + ``probe_<task>.png``: per-layer linear probes (grouped CV by
   template, control task, shuffled labels, bootstrap CIs) for the group
   signalled, explicit vs implicit framing and stereotype-consistency of the
   chosen answer; ``transfer.csv``: group probes trained on explicit, tested on implicit.
4. ``lens.png``: logit lens of the option labels over layers.
5. ``patching.npz`` + ``patching.png``: explicit<->implicit and group-swap patching,
   change in the stereotyped option's log-probability per layer and position.
6. ``steering.csv``/``.md``: bias scores before/after adding a direction.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from probe.errors import InputError, ProbeError


@dataclass(frozen=True)
class RepresentationsConfig:
    """Experiment settings (YAML keys; unknown keys are rejected)."""

    model: str = "smollm2"
    device: str = "cpu"
    dtype: str = "float32"
    threads: int | None = 1
    output_dir: str = "runs/representations"
    dimensions: tuple[str, ...] = ("age", "religion", "ses")
    per_dimension: int = 400
    strategy: str = "zero_shot"
    positions: tuple[str, ...] = ("last", "mean:context", "span:question", "mean:background")
    probe_positions: tuple[str, ...] = ("last", "mean:context")
    probe_layer_stride: int = 2
    batch_size: int = 8
    n_splits: int = 5
    n_shuffles: int = 1
    n_boot: int = 500
    lens_items: int = 60
    patch_pairs_per_dimension: int = 6
    patch_positions: tuple[str, ...] = ("last", "span:question")
    steer_alphas: tuple[float, ...] = (-1.0, -0.5, 0.5)
    steer_layer: Any = "best"
    steer_items: int = 96
    seed: int = 0
    steps: tuple[str, ...] = ("items", "activations", "probes", "lens", "patching", "steering")

    def __post_init__(self) -> None:
        for k in ("dimensions", "positions", "probe_positions", "patch_positions", "steer_alphas", "steps"):
            object.__setattr__(self, k, tuple(getattr(self, k)))
        missing = set(self.probe_positions) - set(self.positions)
        if missing:
            raise ValueError(f"probe_positions {sorted(missing)} are not in positions")


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> RepresentationsConfig:
    from probe.config import load_config as load

    return load(path, RepresentationsConfig, overrides)


# --- labels derived from BBQ item fields ---------------------------------------------------------

def first_group(meta: dict) -> str:
    """The group of the person described first: slot 1 (explicit) or Person A's cue (implicit)."""
    m = meta["metadata"]
    if meta["context_kind"] == "explicit":
        return m["group1"]
    return m["group1"] if m.get("person1") == "Person A" else m["group2"]


def lexical_key(meta: dict) -> str:
    """The surface words that carry the identity (group words or cue phrases): the control-task key."""
    m = meta["metadata"]
    if meta["context_kind"] == "explicit":
        return f"{m.get('name1')}|{m.get('name2')}"
    return f"{m.get('cue1')}|{m.get('cue2')}"


def consistency(rec: dict) -> float:
    """1 if the chosen answer is stereotype-consistent, 0 if not, NaN if it is Unknown."""
    m, p = rec["meta"], rec.get("pred_index")
    if p is None or p == m["unknown_index"]:
        return float("nan")
    other = 3 - m["target_index"] - m["unknown_index"]
    return float(p == (m["target_index"] if m["question_polarity"] == "neg" else other))


# --- steps ---------------------------------------------------------------------------------------

def sample_items(cfg: RepresentationsConfig, out: Path) -> Path:
    from probe.data.implicitbbq import build_implicitbbq

    path = out / "items.jsonl"
    if path.exists():
        return path
    items = build_implicitbbq(cfg.dimensions)
    rng = random.Random(cfg.seed)
    chosen = []
    for dim in cfg.dimensions:
        cells = {}
        for it in items:
            if it.category == dim and it.context_kind in ("explicit", "implicit"):
                cells.setdefault((it.context_kind, it.context_condition, it.question_polarity), []).append(it)
        per_cell = cfg.per_dimension // max(len(cells), 1)
        for key in sorted(cells):
            pool = sorted(cells[key], key=lambda x: x.id)
            chosen += rng.sample(pool, min(per_cell, len(pool)))
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(it.to_json() + "\n" for it in chosen), encoding="utf-8")
    (out / "all_items.count").write_text(str(len(items)))
    return path


def run_probes(cfg: RepresentationsConfig, acts, out: Path) -> "Any":
    import pandas as pd

    from probe.analysis.probes import parse_key, probe_sweep, transfer

    recs = acts.records
    meta = [r["meta"] for r in recs]
    groups = np.array([m["template_id"] for m in meta])
    ctrl = np.array([lexical_key(m) for m in meta])
    dims = np.array([m["category"] for m in meta])
    kind = np.array([m["context_kind"] for m in meta])
    y_group = np.array([first_group(m) for m in meta])
    y_cons = np.array([consistency(r) for r in recs])
    n_layers = max(parse_key(k)["layer"] for k in acts.keys()) + 1
    layers = sorted(set(range(0, n_layers, cfg.probe_layer_stride)) | {n_layers - 1})
    keys = [f"blocks.{i}.hook_resid_post@{p}" for p in cfg.probe_positions for i in layers]
    kw = dict(n_splits=cfg.n_splits, n_shuffles=cfg.n_shuffles, n_boot=cfg.n_boot, seed=cfg.seed)
    frames, transfers = [], []
    for dim in cfg.dimensions:
        mask = dims == dim
        t0 = time.time()
        df = probe_sweep(acts.arrays, y_group, groups, keys, mask=mask, control_keys=ctrl, **kw)
        frames.append(df.assign(task="group", dimension=dim))
        print(f"  probes: group/{dim} {time.time() - t0:.0f}s", file=sys.stderr)
        for k in keys:
            r = transfer(acts[k][mask], y_group[mask], groups[mask], kind[mask], "explicit", "implicit",
                         n_splits=cfg.n_splits, n_boot=cfg.n_boot, seed=cfg.seed)
            transfers.append({**parse_key(k), "dimension": dim, **r.to_dict()})
    frames.append(probe_sweep(acts.arrays, kind, groups, keys, control_keys=ctrl, **kw)
                  .assign(task="framing", dimension="all"))
    ok = np.isfinite(y_cons)
    if ok.sum() >= 20 and len(np.unique(y_cons[ok])) == 2:
        frames.append(probe_sweep(acts.arrays, y_cons, groups, keys, mask=ok, control_keys=ctrl, **kw)
                      .assign(task="consistency", dimension="all"))
    table = pd.concat(frames, ignore_index=True)
    table.to_csv(out / "probes.csv", index=False)
    pd.DataFrame(transfers).to_csv(out / "transfer.csv", index=False)
    plot_probes(table, pd.DataFrame(transfers), out)
    return table


def plot_probes(table, transfers, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def run_lens(cfg: RepresentationsConfig, lm, items: list, out: Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from probe.analysis.logit_lens import logit_lens

    sub = items[: cfg.lens_items]
    res = logit_lens(lm.model, lm.tokenizer, sub, batch_size=cfg.batch_size)
    stereo = np.array([res.probs[i, :, it.fields["target_index"]] for i, it in enumerate(sub)])
    unknown = np.array([res.probs[i, :, it.fields["unknown_index"]] for i, it in enumerate(sub)])
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.2))
    ax[0].plot(stereo.mean(0), label="stereotyped target")
    ax[0].plot(unknown.mean(0), label="Unknown")
    ax[0].set(xlabel="layer", ylabel="P(label) among labels", title="logit lens: option labels")
    ax[0].legend(fontsize=8)
    ax[1].plot(res.label_mass.mean(0))
    ax[1].set(xlabel="layer", ylabel="label mass", title="probability on the labels at all", yscale="log")
    fig.tight_layout()
    fig.savefig(out / "lens.png", dpi=110)
    plt.close(fig)
    return {"n_items": len(sub), "p_target_by_layer": stereo.mean(0).round(4).tolist(),
            "p_unknown_by_layer": unknown.mean(0).round(4).tolist()}


def _pairs(cfg: RepresentationsConfig, all_items: list) -> dict[str, list]:
    """(target, source) BBQItem pairs: explicit<->implicit (same template row, groups, condition,
    polarity) and group swap (same implicit context, Person A's and B's groups exchanged)."""
    rng = random.Random(cfg.seed)
    key = lambda it: (it.template_id, it.metadata.get("row"), it.metadata.get("group1"), it.metadata.get("group2"),
                      it.context_condition, it.question_polarity)
    explicit = {}
    for it in all_items:
        if it.context_kind == "explicit":
            explicit.setdefault(key(it), it)
    out: dict[str, list] = {"explicit->implicit": [], "implicit->explicit": [], "group swap": []}
    by_ctx: dict[tuple, dict[str, Any]] = {}
    for it in all_items:
        if it.context_kind == "implicit":
            v = it.id.rsplit("-", 3)[1]  # ...-c{k}-{cond}-{pol}
            by_ctx.setdefault((it.metadata["context_id"], it.context_condition, it.question_polarity), {})[v] = it
    for dim in cfg.dimensions:
        imp = sorted((it for it in all_items if it.category == dim and it.context_kind == "implicit"
                      and it.context_condition == "ambig" and key(it) in explicit), key=lambda x: x.id)
        for it in rng.sample(imp, min(cfg.patch_pairs_per_dimension, len(imp))):
            out["explicit->implicit"].append((it, explicit[key(it)]))
            out["implicit->explicit"].append((explicit[key(it)], it))
        swaps = sorted((v for v in by_ctx.values() if "c0" in v and "c1" in v
                        and v["c0"].category == dim and v["c0"].context_condition == "ambig"),
                       key=lambda v: v["c0"].id)
        for v in rng.sample(swaps, min(cfg.patch_pairs_per_dimension, len(swaps))):
            out["group swap"].append((v["c0"], v["c1"]))
    return out


def run_patching(cfg: RepresentationsConfig, lm, all_items: list, out: Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from probe.activations.items import bbq_to_item
    from probe.analysis.patching import patch_pairs

    conv = lambda it: bbq_to_item(it.to_dict(), lm.tokenizer, strategy=cfg.strategy)
    results, summary = {}, {}
    for name, pairs in _pairs(cfg, all_items).items():
        triples = []
        for tgt, src in pairs:
            t = conv(tgt)
            triples.append((t, conv(src), t.labels[tgt.target_index]))
        eff = patch_pairs(lm.model, lm.tokenizer, triples, cfg.patch_positions)
        results[name] = eff
        summary[name] = {"n_pairs": len(triples), "mean_effect_by_layer": eff.mean(0).round(4).tolist()}
        print(f"  patching: {name} {len(triples)} pairs", file=sys.stderr)
    np.savez(out / "patching.npz", **{k.replace(" ", "_").replace("->", "_to_"): v for k, v in results.items()})
    fig, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), 4), squeeze=False)
    lim = max(float(np.abs(v.mean(0)).max()) for v in results.values() if v.size) or 1.0
    for ax, (name, eff) in zip(axes[0], results.items()):
        im = ax.imshow(eff.mean(0), aspect="auto", cmap="RdBu_r", vmin=-lim, vmax=lim, origin="lower")
        ax.set(title=f"{name} (n={len(eff)})", xlabel="position", ylabel="layer")
        ax.set_xticks(range(len(cfg.patch_positions)), cfg.patch_positions, fontsize=8)
    fig.colorbar(im, ax=axes[0].tolist(), label="change in log P(stereotyped label)")
    fig.savefig(out / "patching.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return summary


def run_steering(cfg: RepresentationsConfig, lm, acts, items: list, table, out: Path) -> list[dict]:
    import pandas as pd

    from probe.activations.extract import HFBackend, score_items
    from probe.analysis.probes import LinearProbe
    from probe.analysis.steering import mean_difference, steering_table
    from probe.metrics.bbq import bbq_metrics

    recs = acts.records
    y = np.array([consistency(r) for r in recs])
    if cfg.steer_layer == "best" and table is not None and (table.task == "consistency").any():
        sub = table[(table.task == "consistency") & (table.position == "last")]
        layer = int(sub.sort_values("accuracy").iloc[-1]["layer"])
    else:
        layer = int(cfg.steer_layer) if cfg.steer_layer != "best" else len(acts.keys()) // (2 * len(cfg.positions))
    X = acts[f"blocks.{layer}.hook_resid_post@last"]
    templates = sorted({r["meta"]["template_id"] for r in recs})
    rng = random.Random(cfg.seed)
    train_t = set(rng.sample(templates, len(templates) // 2))  # directions from half the templates,
    train = np.array([r["meta"]["template_id"] in train_t for r in recs]) & np.isfinite(y)  # scored on the rest
    scale = float(np.median(np.linalg.norm(X, axis=1)))
    directions = {"mean difference": mean_difference(X[train], y[train], 1.0),
                  "probe": LinearProbe().fit(X[train], y[train]).direction()}
    test_items = [it for it in items if it.fields["template_id"] not in train_t][: cfg.steer_items]
    backend = HFBackend(lm.model)
    by_id = {it.id: it for it in test_items}

    def rescore() -> dict:
        rows = []
        for r in score_items(backend, lm.tokenizer, test_items, cfg.batch_size):
            m = by_id[r["id"]].fields
            rows.append({**{k: m[k] for k in ("context_condition", "question_polarity", "label", "target_index",
                                               "unknown_index")}, "probs": r["label_probs"]})
        res = bbq_metrics(rows)["expected"]
        return {k: res[k] for k in ("acc_amb", "acc_dis", "bias_amb", "bias_dis")}

    table_rows = []
    baseline = rescore()
    for name, d in directions.items():
        alphas = cfg.steer_alphas if name == "mean difference" else cfg.steer_alphas[:1] + cfg.steer_alphas[-1:]
        for row in steering_table(lm.model, layer, d, [a * scale for a in alphas], rescore, baseline):
            table_rows.append({"direction": name, "alpha_over_norm": row["alpha"] / scale, **row})
        print(f"  steering: {name} done", file=sys.stderr)
    df = pd.DataFrame(table_rows)
    df.to_csv(out / "steering.csv", index=False)
    (out / "steering.md").write_text(markdown_table(df.round(4)), encoding="utf-8")
    return table_rows


def markdown_table(df) -> str:
    """A pipe table (pandas' ``to_markdown`` needs the optional ``tabulate``)."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/representations.yaml")
    ap.add_argument("--output-dir", default=None)
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config, {"output_dir": args.output_dir} if args.output_dir else None)
        return run(cfg)
    except ProbeError as exc:
        print(f"probe: error: {exc}", file=sys.stderr)
        return 1


def run(cfg: RepresentationsConfig) -> int:
    import torch

    from probe.activations import load
    from probe.activations.items import read_items
    from probe.commands.activations import record_activations
    from probe.data.items import BBQItem
    from probe.models import load_model
    from probe.runs.provenance import provenance
    from probe.io import write_json_atomic

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t = time.time()
    items_path = sample_items(cfg, out)
    lm = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
    timings["items_and_model"] = time.time() - t
    summary: dict[str, Any] = {"config": dataclasses.asdict(cfg)}
    t = time.time()
    summary["activations"] = record_activations(
        lm, str(items_path), str(out / "acts"), "all", ["resid_post"], list(cfg.positions),
        strategy=cfg.strategy, batch_size=cfg.batch_size, progress=True)
    timings["activations"] = time.time() - t
    acts = load(out / "acts")
    summary["n_items"] = {d: sum(r["meta"]["category"] == d for r in acts.records) for d in cfg.dimensions}
    items = list(read_items(items_path, lm.tokenizer, strategy=cfg.strategy))
    table = None
    for step, fn in (("probes", lambda: run_probes(cfg, acts, out)),
                     ("lens", lambda: run_lens(cfg, lm, items, out)),
                     ("patching", lambda: run_patching(cfg, lm, [BBQItem.from_json(x) for x in
                                                                 _all_item_lines(cfg)], out)),
                     ("steering", lambda: run_steering(cfg, lm, acts, items, table, out))):
        if step not in cfg.steps:
            continue
        t = time.time()
        res = fn()
        timings[step] = time.time() - t
        if step == "probes":
            table = res
            summary["probes_best"] = (res.sort_values("accuracy").groupby(["task", "dimension", "position"]).tail(1)
                                      [["task", "dimension", "position", "layer", "accuracy", "control_accuracy",
                                        "shuffled_accuracy", "majority"]].to_dict("records"))
        else:
            summary[step] = res
        print(f"step {step}: {timings[step]:.0f}s", file=sys.stderr)
    summary["timings_s"] = {k: round(v, 1) for k, v in timings.items()}
    write_json_atomic(out / "summary.json", summary)
    write_json_atomic(out / "provenance.json", provenance(lm, config=dataclasses.asdict(cfg), data_files=[items_path]))
    print(json.dumps({k: summary[k] for k in ("n_items", "timings_s")}, indent=2))
    return 0


def _all_item_lines(cfg: RepresentationsConfig) -> list[str]:
    from probe.data.implicitbbq import build_implicitbbq

    return [it.to_json() for it in build_implicitbbq(cfg.dimensions)]


if __name__ == "__main__":
    sys.exit(main())
