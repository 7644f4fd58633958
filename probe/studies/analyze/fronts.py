"""``steer``, ``probes``, ``lens`` and ``patch`` on a :class:`~probe.studies.analyze.run.TaskRun`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence


import numpy as np
import pandas as pd
from tqdm import tqdm

from probe.analysis.plots import plot_probes
from probe.analysis.probes import probe_sweep
from probe.analysis.tasks.lens import lens_from_residuals, lens_table, plot_lens_table
from probe.analysis.tasks.patch import layer_summary, pair_effects
from probe.analysis.tasks.steer import direction_vector, dose_response, parse_direction, plot_dose_response
from probe.errors import ProbeError
from probe.io import write_atomic, write_json_atomic
from probe.studies.analyze.run import TaskRun, as_run, check_layer, n_layers, resid_key

if TYPE_CHECKING:
    import pandas as pd


# -- steering -------------------------------------------------------------------
def steer(run: "TaskRun | str | Path", layer: int, direction: str, strengths: Sequence[float] = (-4, -2, 0, 2, 4),
          metric: str | None = None, position: str = "last", output: str | Path | None = None,
          progress: bool = False) -> "pd.DataFrame":
    """Dose-response: the task's metric (with its clustered CI) at each steering strength.

    ``direction``: ``mean-diff:FIELD=A,B`` or ``probe:FIELD=A,B`` (:func:`probe.analysis.tasks.parse_direction`),
    read from ``blocks.{layer}.hook_resid_post@{position}`` of the run's records; ``metric``: one of the
    task's ``reporting.headline_metrics`` (default its first). With ``output``: ``steering.csv`` (strength, metric, ci_low,
    ci_high, n, ...), ``steering_all.csv`` (every metric), ``steering.png`` and ``steering.json``.
    """

    run = as_run(run)
    try:
        spec = parse_direction(direction)
        layer = check_layer(run, layer)
        key = resid_key(layer, position)
        X = run.activations([key])[key]
        vec = direction_vector(X, run.field(spec.field), spec)
        known = run.metrics()  # the run's own metrics: a wrong name fails before any re-scoring
        if metric is not None and metric not in known:
            raise ProbeError(f"metric {metric!r} is not among the task's metrics: {', '.join(known)}")
        table, every = dose_response(run.runner.lm.model, layer, vec, list(strengths),
                                     lambda: run.metrics(run.rescore()), metric, progress=progress)
    except ValueError as exc:
        raise ProbeError(str(exc)) from None
    if output is not None:
        out = Path(output)
        write_atomic(out / "steering.csv", table.to_csv(index=False))
        write_atomic(out / "steering_all.csv", every.to_csv(index=False))
        plot_dose_response(table, out / "steering.png",
                           f"{run.task.name}: {spec} at {key}")
        write_json_atomic(out / "steering.json", {
            "task": run.task.name, "model": run.runner.model_id, "layer": layer, "key": key,
            "direction": str(spec), "direction_norm": float(np.linalg.norm(vec)),
            "strength_unit": "the distance between the two groups' means along the direction",
            "metric": str(table["metric_name"].iloc[0]), "n_records": len(run.records),
            "ci": "the task's own bootstrap CI, resampling its cluster unit"})
    return table


def _layers(run: TaskRun, layers: Sequence[int] | None) -> list[int]:
    n = n_layers(run)
    return list(range(n)) if not layers else sorted({check_layer(run, int(x)) for x in layers})


# -- probes ---------------------------------------------------------------------
def probes(run: "TaskRun | str | Path", target: str, layers: Sequence[int] | None = None, position: str = "last",
           control: str | None = None, n_splits: int = 5, n_shuffles: int = 200, n_boot: int = 1000, seed: int = 0,
           output: str | Path | None = None) -> "pd.DataFrame":
    """Per layer: a linear probe for the record field ``target``, cross-validated with folds grouped by the
    task's cluster unit (never split), with a control task (each value of the field ``control``, default
    the unit, gets a random class) and a shuffled-label baseline (:func:`probe.analysis.probes.probe_sweep`).
    With ``output``: ``probes.csv`` and ``probe_{target}.png``."""


    run = as_run(run)
    keys = [resid_key(i, position) for i in _layers(run, layers)]
    values = run.field(target)
    has = np.asarray([v is not None and v == v for v in values])  # records without the field are left out
    y = np.asarray([str(v) for v in values])
    units = np.asarray(run.units())
    ctrl = units if control is None else np.asarray([str(v) for v in run.field(control)])
    try:
        table = probe_sweep(run.activations(keys), y, units, keys, mask=has, control_keys=ctrl, n_splits=n_splits,
                            n_shuffles=n_shuffles, n_boot=n_boot, seed=seed)
    except ValueError as exc:
        raise ProbeError(f"probes for {target!r}: {exc}") from None
    table.insert(0, "target", target)
    if output is not None:
        out = Path(output)
        write_atomic(out / "probes.csv", table.to_csv(index=False))
        plot_probes(table.assign(task=target, dimension=run.task.name), pd.DataFrame(), out)
    return table


# -- logit lens -----------------------------------------------------------------
def lens(run: "TaskRun | str | Path", layers: Sequence[int] | None = None,
         output: str | Path | None = None) -> "pd.DataFrame":
    """Per layer: the option labels' probabilities read through the final norm and unembedding at the scored
    position (the last prompt token) of every label record. With ``output``: ``lens.csv``, ``lens.npz``
    (``ids``, ``layers``, ``logprobs`` [records, layers, labels]) and ``lens.png``."""


    run = as_run(run)
    kinds = set(run.records["kind"])
    if kinds != {"label"}:
        raise ProbeError(f"the logit lens reads option labels at the next token; this run has {sorted(kinds)} "
                         "records (score the labelled answer format, e.g. --set answer_formats=[labels])")
    idx = _layers(run, layers)
    keys = [resid_key(i, "last") for i in idx]
    acts = run.activations(keys)
    resid = np.stack([acts[k] for k in keys], axis=1)  # n_layers x [n, d_model] -> [n, n_layers, d_model]
    variants = [run.runner.scorer.encode(r).label_variants for r in run.requests]
    logp = lens_from_residuals(run.runner.lm.model, resid, variants)
    labels = [str(x) for x in run.requests[0].labels]
    table = lens_table(logp, labels)
    table["layer"] = [idx[i] for i in table["layer"]]
    if output is not None:
        import os

        out = Path(output)
        write_atomic(out / "lens.csv", table.to_csv(index=False))
        tmp = out / "lens.npz.tmp.npz"
        np.savez_compressed(tmp, ids=np.asarray(run.records["id"], dtype=str), layers=np.asarray(idx),
                            logprobs=logp)
        os.replace(tmp, out / "lens.npz")  # atomic: a reader never sees half a file
        plot_lens_table(table, out / "lens.png", f"{run.task.name}: logit lens")
    return table


# -- patching -------------------------------------------------------------------
def patch(run: "TaskRun | str | Path", layers: Sequence[int] | None = None, kinds: Sequence[str] | None = None,
          position: str = "last", max_pairs: int | None = 20, pairs: Sequence[tuple[str, str, str]] | None = None,
          n_boot: int = 1000, seed: int = 0, output: str | Path | None = None,
          progress: bool = False) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """Patch ``blocks.{l}.hook_resid_post@{position}`` from source into target for the task's pairs
    (``analyses.patch_pairs``; ``kinds`` filters them, ``max_pairs`` keeps the first N of each kind), every layer.

    Returns ``(per_pair, per_layer)``: per pair and layer the change of each option's probability
    (``dp_j``, ``dp_target``); per kind and layer the mean effect with a CI resampling the targets' units.
    With ``output``: ``patch.csv`` and ``patch_layers.csv``.
    """


    run = as_run(run)
    idx = _layers(run, layers)
    todo = list(pairs) if pairs is not None else list(run.task.analyses.patch_pairs(run.config, run.records, run.items))
    if kinds:
        todo = [p for p in todo if p[2] in set(kinds)]
    row_of = {rid: n for n, rid in enumerate(run.records["id"])}
    units = run.units()
    if max_pairs is not None:  # max_pairs of each kind, spread over the units (one per unit first) for the CIs
        rank: dict[tuple, int] = {}
        ranked = []
        for n, p in enumerate(todo):
            key = (p[2], units[row_of[p[1]]]) if p[1] in row_of else (p[2], p[1])
            rank[key] = rank.get(key, -1) + 1
            ranked.append((rank[key], n, p))
        count: dict[str, int] = {}
        kept = []
        for _, n, p in sorted(ranked):
            count[p[2]] = count.get(p[2], 0) + 1
            if count[p[2]] <= max_pairs:
                kept.append((n, p))
        todo = [p for _, p in sorted(kept)]
    if not todo:
        raise ProbeError(f"task {run.task.name!r}: no record pairs to patch"
                         + (f" of kind(s) {list(kinds)}" if kinds else "") + " in this run")
    req = {r.id: r for r in run.requests}
    rows, row_units = [], []
    for src, tgt, kind in tqdm(todo, desc="patching", disable=not progress):
        for rid in (src, tgt):
            if rid not in req or req[rid].kind != "label":
                raise ProbeError(f"patching needs label records; {rid!r} is not one in this run")
        rec = run.records.iloc[row_of[tgt]]
        stereo = _stereo(rec)
        for row in pair_effects(run.runner.lm, req[src], req[tgt], list(rec["logprobs"]), idx, position, stereo,
                                scorer=run.runner.scorer):
            rows.append({"source": src, "target": tgt, "kind": kind, **row})
            row_units.append(units[row_of[tgt]])
    table = pd.DataFrame(rows)
    summary = layer_summary(table, row_units, n_boot=n_boot, seed=seed)
    if output is not None:
        out = Path(output)
        write_atomic(out / "patch.csv", table.to_csv(index=False))
        write_atomic(out / "patch_layers.csv", summary.to_csv(index=False))
    return table, summary


def _stereo(rec: Any) -> list[int]:
    """The label indices that score the record's stereotyped answer (``owner[j] == target_index``)."""
    owner, t = rec.get("owner"), rec.get("target_index")
    if owner is None or t is None or not isinstance(owner, (list, tuple)) or t != t:
        return []
    return [j for j, o in enumerate(owner) if o == t]
