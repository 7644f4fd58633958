"""The steps of the representations study on an ImplicitBBQ run, and :func:`run_representations`.

Each step reads the run (:class:`probe.studies.analyze.TaskRun`: its records,
items, requests and Runner), writes its files into the output directory and
returns what goes into ``summary.json``. Activations come from the run's store
(``probe run ... --capture``) where it holds them; other positions (spans of
the item's context, question, background) are captured by re-scoring the
run's requests through its Runner, in memory.
"""

from __future__ import annotations

import dataclasses
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from probe.activations.scoring_capture import CaptureSpec, layer_count
from probe.analysis.patching import patch_logprobs
from probe.analysis.plots import markdown_table, plot_lens, plot_patching, plot_probes
from probe.analysis.probes import LinearProbe, parse_key, probe_sweep, transfer
from probe.analysis.steering import mean_difference, steering_table
from probe.analysis.tasks.lens import lens_from_residuals
from probe.errors import ProbeError
from probe.io import write_json_atomic
from probe.runs.record import records_to_frame
from probe.studies.analyze import as_run
from probe.tasks import available, get

STEPS = ("probes", "lens", "patching", "steering")


@dataclass(frozen=True)
class Settings:
    """What the study computes (``probe analyze representations`` options)."""

    positions: tuple[str, ...] = ("last", "mean:context")  # where the probes read
    layer_stride: int = 2  # probe every n-th layer (and always the last)
    n_splits: int = 5
    n_shuffles: int = 1
    n_boot: int = 500
    lens_items: int = 60
    patch_pairs: int = 3  # per pair kind and dimension (ambiguous contexts)
    patch_positions: tuple[str, ...] = ("last", "span:question")
    steer_alphas: tuple[float, ...] = (-1.0, -0.5, 0.5)  # multiples of the median residual norm
    steer_layer: Any = "best"  # "best": the most accurate consistency probe at 'last'; or a layer
    steer_items: int = 96
    seed: int = 0
    steps: tuple[str, ...] = STEPS

    def __post_init__(self) -> None:
        for k in ("positions", "patch_positions", "steer_alphas", "steps"):
            object.__setattr__(self, k, tuple(getattr(self, k)))
        unknown = sorted(set(self.steps) - set(STEPS))
        if unknown:
            raise ValueError(f"unknown step(s) {unknown}; steps: {', '.join(STEPS)}")
        if self.layer_stride < 1:
            raise ValueError("layer_stride must be >= 1")


def _log(text: str) -> None:
    print(text, file=sys.stderr)


def item_of(run: Any) -> dict[str, Any]:
    """Record id -> its ImplicitBBQ item (the run's pool, by the record's ``item_id``)."""
    pool = {it.id: it for it in getattr(run.items, "pool", run.items)}
    return {rid: pool[iid] for rid, iid in zip(run.records["id"], run.records["item_id"]) if iid in pool}


def spans(run: Any) -> dict[str, dict]:
    """``fields`` (the item's context, question and background per request id) and ``search_from`` (where
    the item's text starts in the prompt) for a :class:`probe.activations.CaptureSpec`."""
    items = item_of(run)
    fields, search = {}, {}
    for r in run.requests:
        it = items[r.id]
        fields[r.id] = {"context": it.context, "question": it.question, "background": it.background or ""}
        search[r.id] = max(r.prompt.find(it.background or it.context), 0)
    return {"fields": fields, "search_from": search}


def capture(run: Any, keys: list[str]) -> dict[str, np.ndarray]:
    """``{key: [n_records, d_model]}``: 'last' from the run (its store, else re-captured); span and mean
    positions re-captured through the run's Runner with the item's context, question and background as fields."""

    last = [k for k in keys if k.endswith("@last")]
    out = dict(run.activations(last)) if last else {}
    other = [k for k in keys if k not in out]
    if other:
        spec = CaptureSpec.parse(other, **spans(run))
        run.runner.score(run.requests, None, task=run.task.name, progress=False, capture=spec)
        acts, run.runner.activations = run.runner.activations, None
        run._put(acts.ids, acts.arrays)
        out.update({k: run._acts[k] for k in other})
    return out


def run_probes(s: Settings, run: Any, n_layers: int, out: Path) -> Any:
    """Per-layer linear probes for group (per dimension), framing and stereotype-consistency, with controls;
    explicit->implicit transfer of the group probes. Writes probes.csv, transfer.csv and plots."""

    recs = run.records.to_dict("records")
    items = item_of(run)
    its = [items[r["id"]] for r in recs]
    groups = np.array([r["template_id"] for r in recs])
    labels = run.task.analyses.representation_labels()
    ctrl = np.array([labels.lexical_key(it) for it in its])
    dims = np.array([r["category"] for r in recs])
    kind = np.array([r[labels.framing] for r in recs])
    y_group = np.array([labels.group(it) for it in its])
    y_cons = np.array([labels.consistency(r) for r in recs])
    layers = sorted(set(range(0, n_layers, s.layer_stride)) | {n_layers - 1})
    keys = [f"blocks.{i}.hook_resid_post@{p}" for p in s.positions for i in layers]
    arrays = capture(run, keys)
    kw = dict(n_splits=s.n_splits, n_shuffles=s.n_shuffles, n_boot=s.n_boot, seed=s.seed)
    frames, transfers = [], []
    for dim in sorted(set(dims)):
        mask = dims == dim
        t0 = time.time()
        frames.append(probe_sweep(arrays, y_group, groups, keys, mask=mask, control_keys=ctrl, **kw)
                      .assign(task="group", dimension=dim))
        _log(f"  probes: group/{dim} {time.time() - t0:.0f}s")
        for k in keys:
            r = transfer(arrays[k][mask], y_group[mask], groups[mask], kind[mask], *labels.transfer,
                         n_splits=s.n_splits, n_boot=s.n_boot, seed=s.seed)
            transfers.append({**parse_key(k), "dimension": dim, **r.to_dict()})
    frames.append(probe_sweep(arrays, kind, groups, keys, control_keys=ctrl, **kw)
                  .assign(task="framing", dimension="all"))
    ok = np.isfinite(y_cons)
    # Unknown answers have no consistency label: probe only when enough answered items of both kinds remain
    if ok.sum() >= 20 and len(np.unique(y_cons[ok])) == 2:
        frames.append(probe_sweep(arrays, y_cons, groups, keys, mask=ok, control_keys=ctrl, **kw)
                      .assign(task="consistency", dimension="all"))
    table = pd.concat(frames, ignore_index=True)
    table.to_csv(out / "probes.csv", index=False)
    pd.DataFrame(transfers).to_csv(out / "transfer.csv", index=False)
    plot_probes(table, pd.DataFrame(transfers), out)
    return table


def run_lens(s: Settings, run: Any, n_layers: int, out: Path) -> dict:
    """Logit lens of the option labels on the first ``lens_items`` records, read from their captured
    residuals at the scored position; P(stereotyped target) and P(Unknown) by layer. Writes lens.png."""

    n = min(s.lens_items, len(run.records))
    keys = [f"blocks.{i}.hook_resid_post@last" for i in range(n_layers)]
    acts = capture(run, keys)
    resid = np.stack([acts[k][:n] for k in keys], axis=1)  # n_layers x [n, d_model] -> [n, n_layers, d_model]
    variants = [run.runner.scorer.encode(r).label_variants for r in run.requests[:n]]
    logp = lens_from_residuals(run.runner.lm.model, resid, variants)
    probs = np.exp(logp - logp.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    recs = run.records.iloc[:n].to_dict("records")

    def option(i: int, field: str) -> np.ndarray:  # P(the label(s) naming item option `field`) by layer
        owner = recs[i].get("owner") or list(range(probs.shape[-1]))
        cols = [j for j, o in enumerate(owner) if o == recs[i][field]]
        return probs[i][:, cols].sum(-1)

    stereo = np.array([option(i, "target_index") for i in range(n)])
    unknown = np.array([option(i, "unknown_index") for i in range(n)])
    plot_lens(stereo, unknown, np.exp(logp).sum(-1), out)
    return {"n_items": n, "p_target_by_layer": stereo.mean(0).round(4).tolist(),
            "p_unknown_by_layer": unknown.mean(0).round(4).tolist()}


def patching_pairs(s: Settings, run: Any) -> dict[str, list[tuple[str, str]]]:
    """(source, target) record ids, ``patch_pairs`` of each kind per dimension, ambiguous targets only, from
    the task's own pairs (``explicit->implicit``, ``implicit->explicit``, ``A<->B``)."""
    rng = random.Random(s.seed)
    recs = run.records.set_index("id")
    by_kind: dict[str, dict[str, list[tuple[str, str]]]] = {}
    for src, tgt, kind in run.task.analyses.patch_pairs(run.config, run.records, run.items):
        if recs.loc[tgt, "context_condition"] == "ambig":
            by_kind.setdefault(kind, {}).setdefault(recs.loc[tgt, "category"], []).append((src, tgt))
    out: dict[str, list[tuple[str, str]]] = {}
    for kind, dims in sorted(by_kind.items()):
        for dim, pairs in sorted(dims.items()):
            pairs = sorted(pairs)
            out.setdefault(kind, []).extend(rng.sample(pairs, min(s.patch_pairs, len(pairs))))
    return out


def run_patching(s: Settings, run: Any, out: Path) -> dict:
    """Patching of every layer's residual at ``patch_positions``, source into target, through the scorer:
    the change in log P(stereotyped label) per layer and position. Writes patching.npz and patching.png."""

    req = {r.id: r for r in run.requests}
    recs = run.records.set_index("id", drop=False)
    where = spans(run)
    results, summary = {}, {}
    for kind, pairs in patching_pairs(s, run).items():
        effects = []
        for src, tgt in pairs:
            delta = patch_logprobs(run.runner.lm, req[tgt], req[src], s.patch_positions, scorer=run.runner.scorer,
                                   **where)
            cols = run.task.analyses.representation_labels().stereotyped_labels(recs.loc[tgt].to_dict())
            # log of the stereotyped labels' summed probability: log-sum-exp of clean + change, minus clean
            clean = np.asarray(recs.loc[tgt, "logprobs"], dtype=np.float64)[cols]
            patched = np.logaddexp.reduce(clean + delta[..., cols], axis=-1)
            effects.append(patched - np.logaddexp.reduce(clean))
        eff = np.stack(effects) if effects else np.zeros((0, 0, len(s.patch_positions)), np.float32)
        results[kind] = eff
        summary[kind] = {"n_pairs": len(pairs),
                         "mean_effect_by_layer": eff.mean(0).round(4).tolist() if len(eff) else []}
        _log(f"  patching: {kind} {len(pairs)} pairs")
    if not results:  # a small stratified sample may hold no pair: the other steps still run
        _log("  patching: no record pairs in this run (score more items, e.g. without --limit)")
        return {"n_pairs": 0}
    np.savez(out / "patching.npz", **{k.replace(" ", "_").replace("->", "_to_").replace("<", "_"): v
                                      for k, v in results.items()})
    plot_patching(results, s.patch_positions, out)
    return summary


def steering_layer(s: Settings, table: Any, n_layers: int) -> int:
    """``steer_layer``, or for "best" the layer of the most accurate consistency probe at ``last``
    (without one: the middle layer)."""
    if s.steer_layer == "best" and table is not None and (table.task == "consistency").any():
        sub = table[(table.task == "consistency") & (table.position == "last")]
        if len(sub):
            return int(sub.sort_values("accuracy").iloc[-1]["layer"])
    return int(s.steer_layer) if s.steer_layer != "best" else n_layers // 2


def run_steering(s: Settings, run: Any, table: Any, n_layers: int, out: Path) -> list[dict]:
    """The task's bias metrics before/after steering along the stereotype-consistency direction (mean
    difference and probe), fitted on half of the templates and re-scored on records of the other half
    through the run's Runner; writes steering.csv/.md."""

    recs = run.records.to_dict("records")
    y = np.array([run.task.analyses.representation_labels().consistency(r) for r in recs])
    layer = steering_layer(s, table, n_layers)
    key = f"blocks.{layer}.hook_resid_post@last"
    X = capture(run, [key])[key]
    templates = sorted({r["template_id"] for r in recs})
    rng = random.Random(s.seed)
    train_t = set(rng.sample(templates, len(templates) // 2))  # directions from half the templates,
    train = np.array([r["template_id"] in train_t for r in recs]) & np.isfinite(y)  # scored on the rest
    if len(set(y[train])) < 2:
        raise ProbeError("steering needs stereotype-consistent and -inconsistent answers in the training "
                         "templates; this run has too few (score more items)")
    scale = float(np.median(np.linalg.norm(X, axis=1)))
    directions = {"mean difference": mean_difference(X[train], y[train], 1.0),
                  "probe": LinearProbe().fit(X[train], y[train]).direction()}
    test = [r for r, rec in zip(run.requests, recs) if rec["template_id"] not in train_t][: s.steer_items]

    def rescore() -> dict:
        frame = records_to_frame(run.runner.score(test, None, task=run.task.name, progress=False,
                                                  sampling=run.task.paper.sampling(run.config)))
        return {k: v["value"] for k, v in run.metrics(frame).items() if k.split(".")[-1] in (
            "acc_amb", "acc_dis", "bias_amb", "bias_dis")}

    rows = []
    baseline = rescore()
    for name, d in directions.items():
        alphas = s.steer_alphas if name == "mean difference" else s.steer_alphas[:1] + s.steer_alphas[-1:]
        for row in steering_table(run.runner.lm.model, layer, d, [a * scale for a in alphas], rescore, baseline):
            rows.append({"direction": name, "alpha_over_norm": row["alpha"] / scale, **row})
        _log(f"  steering: {name} done")
    df = pd.DataFrame(rows)
    df.to_csv(out / "steering.csv", index=False)
    (out / "steering.md").write_text(markdown_table(df.round(4)), encoding="utf-8")
    return rows


def run_representations(run: Any, output: str | Path, settings: Settings | None = None,
                        provenance: Callable[..., dict] | None = None) -> Path:
    """Run the study's steps on ``run`` (a :class:`~probe.studies.analyze.TaskRun` of ``implicitbbq`` scored
    with the labelled answer format, or its run directory) into ``output``; returns that directory.

    ``summary.json`` holds the settings, the run, records per dimension, each step's summary and timings;
    ``provenance``: the function describing the analysis for ``provenance.json`` (None: not written).
    """

    s = settings or Settings()
    run = as_run(run)
    if run.task.analyses.representation_labels() is None:  # the task says whether the study applies (no name switch)

        studied = _studied_tasks()
        hint = f": {get(studied[0]).analyses.representation_labels().how_to_run}" if studied else ""
        raise ProbeError(f"the representations study reads a run of a task that labels its items for it "
                         f"({', '.join(studied) or 'none registered'}), not {run.task.name!r}{hint}")
    kinds = set(run.records["kind"])
    if kinds != {"label"}:
        raise ProbeError(f"the representations study reads label records (the labelled answer format); this run "
                         f"has {sorted(kinds)}: score it with --set answer_formats=[labels]")
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    n_layers = layer_count(run.runner.lm.model)
    summary: dict[str, Any] = {"settings": dataclasses.asdict(s), "run": str(run.output) if run.output else None,
                               "n_records": {str(d): int(n) for d, n in run.records["category"].value_counts()
                                             .sort_index().items()}}
    timings: dict[str, float] = {}
    table = None
    for step, fn in (("probes", lambda: run_probes(s, run, n_layers, out)),
                     ("lens", lambda: run_lens(s, run, n_layers, out)),
                     ("patching", lambda: run_patching(s, run, out)),
                     ("steering", lambda: run_steering(s, run, table, n_layers, out))):
        if step not in s.steps:
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
        write_json_atomic(out / "provenance.json", provenance(
            run.runner.lm, config={"analysis": "representations", "run": summary["run"], **summary["settings"]},
            data_files=[]))
    return out


def _studied_tasks() -> list[str]:
    """The registered tasks that label their items for this study (``analyses.representation_labels``)."""

    return [name for name in available() if get(name).analyses.representation_labels() is not None]
