"""The task run an analysis reads: :class:`TaskRun`, from a run directory or by running the task."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence


import numpy as np

from probe.activations import load as load_activations
from probe.activations.hooks import discover
from probe.activations.store import MANIFEST
from probe.errors import ProbeError
from probe.io import read_records
from probe.runs.record import records_to_frame
from probe.runs.runner import RunOptions, Runner, load
from probe.runs.task_run import run_task
from probe.tasks import get

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


#: run options a re-score keeps from the run (batching and precision: the same passes, the same numbers);
#: never trust_remote_code: a run directory is data, and remote code runs only when the caller asks for it
_KEPT = ("device", "dtype", "load_in_8bit", "load_in_4bit", "device_map", "batch_size", "token_budget", "chunk_size")


@dataclass
class TaskRun:
    """A task's run, ready for analyses: its task, config, items, requests, records and a Runner.

    ``records`` holds one row per request, in request order (``meta`` flattened).
    """

    task: Any
    config: Any
    items: Any
    requests: list
    records: "pd.DataFrame"
    runner: Runner
    output: Path | None = None
    _acts: dict = field(default_factory=dict, repr=False)

    # -- what the task says ----------------------------------------------------
    def units(self) -> list[str]:
        """The cluster unit of every record (the task's ``analyses.units``)."""
        units = list(self.task.analyses.units(self.config, self.records, self.items))
        if len(units) != len(self.records):
            raise ProbeError(f"task {self.task.name!r}: analyses.units gave {len(units)} units for "
                             f"{len(self.records)} records")
        return units

    def metrics(self, records: "pd.DataFrame | None" = None) -> dict[str, dict[str, float]]:
        """The task's headline metrics (``reporting.headline_metrics`` of its own ``aggregate``) of ``records``."""
        frame = self.records if records is None else records
        return dict(self.task.reporting.headline_metrics(self.config, self.task.aggregate(self.config, frame, self.items).summary))

    def field(self, name: str) -> list[Any]:
        """A record field (a column of :attr:`records`) by name; an error lists the fields there are."""
        if name not in self.records.columns:
            cols = ", ".join(c for c in self.records.columns if not str(c).startswith("meta."))
            raise ProbeError(f"task {self.task.name!r}: records have no field {name!r}; fields: {cols}")
        return list(self.records[name])

    # -- the one forward path --------------------------------------------------
    def rescore(self) -> "pd.DataFrame":
        """Score the run's requests again (in memory, same batching; under any hook the caller holds)."""

        recs = self.runner.score(self.requests, None, task=self.task.name, progress=False,
                                 sampling=self.task.paper.sampling(self.config))
        return records_to_frame(recs)

    def activations(self, keys: Sequence[str]) -> dict[str, "np.ndarray"]:
        """``{key: float32 [n_records, d_model]}`` in record order: from the run's store when it holds the key,
        else captured by re-scoring the requests with the Runner (kept for the next call)."""

        keys = list(dict.fromkeys(keys))
        need = [k for k in keys if k not in self._acts]
        store = self.output / "activations" if self.output is not None else None
        if need and store is not None and (store / MANIFEST).is_file():
            stored = json.loads((store / MANIFEST).read_text(encoding="utf-8")).get("keys", [])
            have = [k for k in need if k in stored]
            if have:
                acts = load_activations(store, keys=have)
                if set(acts.ids) >= set(self.records["id"]):  # else (a store cut short) capture them anew
                    self._put(acts.ids, acts.arrays)
                    need = [k for k in need if k not in self._acts]
        if need:
            # perplexity requests take only 'last' (their text's end), not the answer position the analyses
            # read: left out, their rows stay NaN (analyses drop NaN rows)
            todo = [r for r in self.requests if r.kind in ("label", "continuation")]
            if not todo:
                raise ProbeError(f"task {self.task.name!r}: no label or continuation requests to capture")
            self.runner.score(todo, None, task=self.task.name, progress=False, capture=need)
            acts = self.runner.activations
            self.runner.activations = None
            self._put(acts.ids, acts.arrays, partial=len(todo) < len(self.requests))
        return {k: self._acts[k] for k in keys}

    def _put(self, ids: Sequence[str], arrays: Mapping[str, "np.ndarray"], partial: bool = False) -> None:
        index = {i: n for n, i in enumerate(ids)}
        missing = [i for i in self.records["id"] if i not in index]
        if missing and not partial:
            raise ProbeError(f"activations lack {len(missing)} record(s), e.g. {missing[:3]}")
        rows = [index.get(i, -1) for i in self.records["id"]]
        for k, v in arrays.items():
            out = np.full((len(rows), v.shape[1]), np.nan, np.float32)
            have = [n for n, r in enumerate(rows) if r >= 0]
            out[have] = v[[rows[n] for n in have]]
            self._acts[k] = out

    def close(self) -> None:
        self.runner.close()

    def __enter__(self) -> "TaskRun":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_run(run_dir: str | Path, model: Any = None, options: RunOptions | None = None,
             threads: int | None = None) -> TaskRun:
    """A :class:`TaskRun` from a run directory of ``probe run TASK``.

    ``model``: default the run's own (``provenance.json``); ``options``: default the run's batching and
    precision, without capture and without a score cache (a steered pass must not read cached scores).
    """

    d = Path(run_dir)
    prov_path = d / "provenance.json"
    if not prov_path.is_file():
        raise ProbeError(f"{d}: not a finished run directory (no provenance.json); run `probe run TASK --output {d}`")
    prov = json.loads(prov_path.read_text(encoding="utf-8"))
    cfg = prov.get("config") or {}
    if "task" not in cfg:
        raise ProbeError(f"{prov_path}: no config.task; was it written by `probe run TASK`?")
    task = get(cfg["task"])
    config = task.make_config(cfg.get("task_config") or {}, source=f"{prov_path} config.task_config")
    if options is None:
        kept = {k: v for k, v in (cfg.get("run_options") or {}).items() if k in _KEPT}
        options = RunOptions(**kept, progress=False, threads=threads)
    if model is None:
        info = prov.get("model") or {}
        model = info.get("source") or info.get("name")
        if not model:
            raise ProbeError(f"{prov_path}: no model recorded; pass --model")
    runner = Runner(load(model, options), options)
    try:
        items = task.selection.select(config, task.items(config), cfg.get("limit"))
        requests = task.requests(config, items, runner.lm.tokenizer, _generations(d))
        frame = records_to_frame(d)
        if "model" in frame and len(frame) and str(frame["model"].iloc[0]) != runner.model_id:
            raise ProbeError(f"{d}: the records were scored by model {frame['model'].iloc[0]}, not by "
                             f"{runner.model_id} ({model}); pass the run's model")
        by_id = {str(i): n for n, i in enumerate(frame["id"])}
        missing = [r.id for r in requests if r.id not in by_id]
        if missing:
            raise ProbeError(f"{d}: {len(missing)} request(s) have no record (an unfinished run?), e.g. "
                             f"{missing[:3]}; finish it with `probe run` first")
        records = frame.iloc[[by_id[r.id] for r in requests]].reset_index(drop=True)
    except BaseException:
        runner.close()
        raise
    return TaskRun(task, config, items, list(requests), records, runner, d)


def run_for(task: str, model: Any, config: Mapping[str, Any] | Any = None, limit: int | None = None,
            output: str | Path | None = None, options: RunOptions | None = None,
            capture: Sequence[str] = ()) -> TaskRun:
    """Score ``task`` on ``model`` through the Runner (``probe run``; resumes ``output``) and return its
    :class:`TaskRun`; ``capture`` keys are stored with it."""

    t = get(task)
    cfg = config if dataclasses.is_dataclass(config) else t.make_config(dict(config or {}))
    options = options or RunOptions(progress=False)
    runner = Runner(load(model, dataclasses.replace(options, capture=tuple(capture))),
                    dataclasses.replace(options, capture=tuple(capture)))
    try:
        ev = run_task(t, cfg, runner.lm, output=output, limit=limit, runner=runner)
        runner.options = dataclasses.replace(options, capture=(), score_cache=None)
        if runner.scorer.cache is not None:  # steered passes must not read or write cached scores
            runner.scorer.cache.close()
            runner.scorer.cache = None
        items = t.selection.select(cfg, t.items(cfg), limit)
        if output is None and t.paper.generation_requests(cfg, items, runner.lm.tokenizer):
            raise ProbeError(f"task {task!r} generates before scoring: give an output directory to keep the "
                             "generations the analyses re-score")
        requests = t.requests(cfg, items, runner.lm.tokenizer, _generations(Path(output)) if output else None)
        run = TaskRun(t, cfg, items, list(requests), ev.records, runner, Path(output) if output else None)
        if ev.activations is not None and output is None:
            run._put(ev.activations.ids, ev.activations.arrays)
        return run
    except BaseException:
        runner.close()
        raise


def _generations(run_dir: Path) -> dict[str, str] | None:
    """``{id: text}`` of a run's ``generations.jsonl`` (chain-of-thought), None without one."""

    path = run_dir / "generations.jsonl"
    return {str(r["id"]): r["text"] for r in read_records(path)[0]} if path.is_file() else None


def as_run(run: "TaskRun | str | Path", **kwargs: Any) -> TaskRun:
    return run if isinstance(run, TaskRun) else open_run(run, **kwargs)


def resid_key(layer: int, position: str = "last", hook: str = "resid_post") -> str:
    return f"blocks.{layer}.hook_{hook}@{position}"


def n_layers(run: TaskRun) -> int:
    return discover(run.runner.lm.model).n_layers


def check_layer(run: TaskRun, layer: int) -> int:
    n = n_layers(run)
    if not -n <= layer < n:
        raise ProbeError(f"layer {layer} is out of range: the model has {n} layers (0..{n - 1})")
    return layer % n
