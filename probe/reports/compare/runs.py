"""Finished run directories read back: task, model, config, summary; grouped by task and labelled.

A run directory is what :func:`probe.runs.task_run.run_task` writes:
``summary.json`` (the task's numbers, with ``task`` and ``model``),
``provenance.json`` (the model's info, the task config, the limit) and
``records.jsonl``. Runs of the same task and model that differ in their config
(seed, strategy, limit, ...) stay apart: each gets a label naming what differs
(``smollm2 [seed=1]``); runs that differ in nothing are labelled by their
directory name.

>>> r = Run(Path("a"), "bbq", "m", {"seed": 0}, {}, {})
>>> [x.label for x in label_runs([r, Run(Path("b"), "bbq", "m", {"seed": 1}, {}, {})])]
['m [seed=0]', 'm [seed=1]']
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from probe.errors import ProbeError
from probe.io import flatten_meta, read_records as read

__all__ = ["Run", "load_run", "load_runs", "label_runs", "by_task", "read_records"]


@dataclass
class Run:
    """One finished run: where it is, its task and model, its config and its outputs read back."""

    path: Path
    task: str
    model: str
    config: dict[str, Any]  # the task config (provenance ``config.task_config``) plus ``limit``
    summary: dict[str, Any]
    provenance: dict[str, Any]
    label: str = ""
    units: Any = None  # per-unit frame for paired comparisons (set by the caller; see .units)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def params_b(self) -> float:
        """Parameter count in billions from the provenance (NaN when not recorded)."""
        n = (self.provenance.get("model") or {}).get("n_parameters")
        return float(n) / 1e9 if isinstance(n, (int, float)) else math.nan

    @property
    def n_boot(self) -> int | None:
        n = self.config.get("n_boot")
        return int(n) if isinstance(n, (int, float)) else None


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProbeError(f"{path}: not found (is {path.parent} a finished run directory?)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProbeError(f"{path}: cannot read ({exc})") from None
    if not isinstance(data, dict):
        raise ProbeError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def load_run(path: str | Path) -> Run:
    """The run in ``path`` (needs ``summary.json``; ``provenance.json`` when present)."""
    path = Path(path)
    if not path.is_dir():
        raise ProbeError(f"{path}: not a directory (give run directories written by `probe run`)")
    summary = _read_json(path / "summary.json")
    prov = _read_json(path / "provenance.json") if (path / "provenance.json").is_file() else {}
    pconf = prov.get("config") if isinstance(prov.get("config"), dict) else {}
    task = str(summary.get("task") or pconf.get("task") or "")
    if not task:
        raise ProbeError(f"{path}/summary.json names no task (written by an older probe?)")
    model = str(summary.get("model") or (prov.get("model") or {}).get("name") or path.name)
    config = dict(pconf.get("task_config") or {})
    config["limit"] = pconf.get("limit")
    return Run(path, task, model, config, summary, prov)


def load_runs(paths: Iterable[str | Path]) -> list[Run]:
    """Every run in ``paths``, labelled (see :func:`label_runs`); a directory given twice counts once."""
    seen: dict[Path, Run] = {}
    for p in paths:
        key = Path(p).resolve()
        if key not in seen:
            seen[key] = load_run(p)
    if not seen:
        raise ProbeError("no run directories given")
    return label_runs(list(seen.values()))


def _value(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_value(x)}" for k, x in sorted(v.items())) + "}"
    return str(v)


def label_runs(runs: Sequence[Run]) -> list[Run]:
    """Give each run a label unique within its task: the model name, plus what differs between runs
    of the same task and model (config keys, the limit), else the directory name."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.task, r.model), []).append(r)
    for same in groups.values():
        if len(same) == 1:
            same[0].label = same[0].model
            continue
        keys = sorted({k for r in same for k in r.config})
        differ = [k for k in keys if len({_value(r.config.get(k)) for r in same}) > 1]
        for r in same:
            what = ", ".join(f"{k}={_value(r.config.get(k))}" for k in differ)
            r.label = f"{r.model} [{what}]" if what else f"{r.model} [{r.path.name}]"
        labels = [r.label for r in same]
        if len(set(labels)) < len(labels):  # same config and same directory name: number them
            for i, r in enumerate(same, 1):
                r.label = f"{r.model} [run {i}: {r.path}]"
    return list(runs)


def by_task(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """Runs grouped by task (tasks in first-seen order; runs in the order given)."""
    out: dict[str, list[Run]] = {}
    for r in runs:
        out.setdefault(r.task, []).append(r)
    return out


def read_records(path: str | Path) -> list[dict]:
    """``records.jsonl`` of a run as flat dicts (``meta`` keys beside the record fields, as
    :func:`probe.runs.record.records_to_frame` lays them out; a clash is prefixed ``meta.``)."""

    p = Path(path)
    p = p / "records.jsonl" if p.is_dir() else p
    if not p.is_file():
        raise ProbeError(f"{p}: not found (the run has no records)")
    out = []
    for rec in read(p)[0]:
        out.append(flatten_meta(rec))
    return out
