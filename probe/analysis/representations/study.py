"""The steps of the representations analysis and :func:`run_representations`, which runs them in order.

Each step writes its files into ``config.output_dir`` (see the package docstring)
and returns what goes into ``summary.json``.
"""

from __future__ import annotations

import dataclasses
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from probe.analysis.representations.config import RepresentationsConfig
from probe.analysis.representations.items import (all_items, consistency, first_group, lexical_key, patching_pairs,
                                                  sample_items)
from probe.analysis.representations.report import markdown_table, plot_lens, plot_patching, plot_probes


def _log(text: str) -> None:
    print(text, file=sys.stderr)


def run_probes(cfg: RepresentationsConfig, acts: Any, out: Path) -> Any:
    """Per-layer linear probes for group (per dimension), framing and stereotype-consistency, with
    controls; explicit->implicit transfer of the group probes. Writes probes.csv, transfer.csv, plots;
    returns the probe table (DataFrame)."""
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
        _log(f"  probes: group/{dim} {time.time() - t0:.0f}s")
        for k in keys:
            r = transfer(acts[k][mask], y_group[mask], groups[mask], kind[mask], "explicit", "implicit",
                         n_splits=cfg.n_splits, n_boot=cfg.n_boot, seed=cfg.seed)
            transfers.append({**parse_key(k), "dimension": dim, **r.to_dict()})
    frames.append(probe_sweep(acts.arrays, kind, groups, keys, control_keys=ctrl, **kw)
                  .assign(task="framing", dimension="all"))
    ok = np.isfinite(y_cons)
    # Unknown answers have no consistency label: probe only when enough answered items of both kinds remain
    if ok.sum() >= 20 and len(np.unique(y_cons[ok])) == 2:
        frames.append(probe_sweep(acts.arrays, y_cons, groups, keys, mask=ok, control_keys=ctrl, **kw)
                      .assign(task="consistency", dimension="all"))
    table = pd.concat(frames, ignore_index=True)
    table.to_csv(out / "probes.csv", index=False)
    pd.DataFrame(transfers).to_csv(out / "transfer.csv", index=False)
    plot_probes(table, pd.DataFrame(transfers), out)
    return table


def run_lens(cfg: RepresentationsConfig, lm: Any, items: list, out: Path) -> dict:
    """Logit lens of the option labels on the first ``lens_items`` items; writes lens.png."""
    from probe.analysis.logit_lens import logit_lens

    sub = items[: cfg.lens_items]
    res = logit_lens(lm.model, lm.tokenizer, sub, batch_size=cfg.batch_size)
    stereo = np.array([res.probs[i, :, it.fields["target_index"]] for i, it in enumerate(sub)])
    unknown = np.array([res.probs[i, :, it.fields["unknown_index"]] for i, it in enumerate(sub)])
    plot_lens(stereo, unknown, res.label_mass, out)
    return {"n_items": len(sub), "p_target_by_layer": stereo.mean(0).round(4).tolist(),
            "p_unknown_by_layer": unknown.mean(0).round(4).tolist()}


def run_patching(cfg: RepresentationsConfig, lm: Any, items: list, out: Path) -> dict:
    """Explicit<->implicit and group-swap patching (change in log P(stereotyped label) per layer and
    position); writes patching.npz and patching.png. ``items``: all ImplicitBBQ ``BBQItem``s."""
    from probe.activations.items import bbq_to_item
    from probe.analysis.patching import patch_pairs

    def conv(it: Any) -> Any:
        return bbq_to_item(it.to_dict(), lm.tokenizer, strategy=cfg.strategy)

    results, summary = {}, {}
    for name, pairs in patching_pairs(cfg, items).items():
        triples = []
        for tgt, src in pairs:
            t = conv(tgt)
            triples.append((t, conv(src), t.labels[tgt.target_index]))
        eff = patch_pairs(lm.model, lm.tokenizer, triples, cfg.patch_positions)
        results[name] = eff
        summary[name] = {"n_pairs": len(triples), "mean_effect_by_layer": eff.mean(0).round(4).tolist()}
        _log(f"  patching: {name} {len(triples)} pairs")
    np.savez(out / "patching.npz", **{k.replace(" ", "_").replace("->", "_to_"): v for k, v in results.items()})
    plot_patching(results, cfg.patch_positions, out)
    return summary


def steering_layer(cfg: RepresentationsConfig, acts: Any, table: Any) -> int:
    """``steer_layer``, or for "best" the layer of the most accurate consistency probe at ``last``
    (without one: the middle layer)."""
    if cfg.steer_layer == "best" and table is not None and (table.task == "consistency").any():
        sub = table[(table.task == "consistency") & (table.position == "last")]
        return int(sub.sort_values("accuracy").iloc[-1]["layer"])
    return int(cfg.steer_layer) if cfg.steer_layer != "best" else len(acts.keys()) // (2 * len(cfg.positions))


def run_steering(cfg: RepresentationsConfig, lm: Any, acts: Any, items: list, table: Any, out: Path) -> list[dict]:
    """Bias scores before/after steering along the stereotype-consistency direction (mean difference and
    probe), fitted on half of the templates and scored on items of the other half; writes steering.csv/.md."""
    import pandas as pd

    from probe.activations.record import score_items
    from probe.analysis.probes import LinearProbe
    from probe.analysis.steering import mean_difference, steering_table
    from probe.metrics.bbq import bbq_metrics

    recs = acts.records
    y = np.array([consistency(r) for r in recs])
    layer = steering_layer(cfg, acts, table)
    X = acts[f"blocks.{layer}.hook_resid_post@last"]
    templates = sorted({r["meta"]["template_id"] for r in recs})
    rng = random.Random(cfg.seed)
    train_t = set(rng.sample(templates, len(templates) // 2))  # directions from half the templates,
    train = np.array([r["meta"]["template_id"] in train_t for r in recs]) & np.isfinite(y)  # scored on the rest
    scale = float(np.median(np.linalg.norm(X, axis=1)))
    directions = {"mean difference": mean_difference(X[train], y[train], 1.0),
                  "probe": LinearProbe().fit(X[train], y[train]).direction()}
    test_items = [it for it in items if it.fields["template_id"] not in train_t][: cfg.steer_items]
    by_id = {it.id: it for it in test_items}

    def rescore() -> dict:
        rows = []
        for r in score_items(lm, test_items, cfg.batch_size):
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
        _log(f"  steering: {name} done")
    df = pd.DataFrame(table_rows)
    df.to_csv(out / "steering.csv", index=False)
    (out / "steering.md").write_text(markdown_table(df.round(4)), encoding="utf-8")
    return table_rows


def run_representations(config: RepresentationsConfig, *, lm: Any = None,
                        provenance: Callable[..., dict] | None = None) -> Path:
    """Run the configured steps into ``config.output_dir`` and return that directory.

    ``lm``: an already loaded model (default: ``load_model(config.model, device, dtype)``).
    ``provenance``: the function that describes the run for ``provenance.json``
    (``probe.runs.provenance.provenance``, which ``probe analyze representations``
    passes; the analysis layer sits below ``probe.runs``); None writes no provenance.json.
    ``summary.json`` holds the config, the activation counts, items per dimension, each
    step's summary and the timings.
    """
    from probe.activations import load
    from probe.activations.items import read_items
    from probe.activations.record import record_activations
    from probe.io import write_json_atomic

    cfg = config
    if cfg.threads:
        import torch

        torch.set_num_threads(cfg.threads)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t = time.time()
    items_path = sample_items(cfg, out)
    if lm is None:
        from probe.models import load_model

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
                     ("patching", lambda: run_patching(cfg, lm, all_items(cfg), out)),
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
        _log(f"step {step}: {timings[step]:.0f}s")
    summary["timings_s"] = {k: round(v, 1) for k, v in timings.items()}
    write_json_atomic(out / "summary.json", summary)
    if provenance is not None:
        write_json_atomic(out / "provenance.json",
                          provenance(lm, config=dataclasses.asdict(cfg), data_files=[items_path]))
    return out
