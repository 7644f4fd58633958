"""Activations on disk: safetensors shards plus a JSONL metadata table keyed by item id.

Layout of a store directory::

    manifest.json           model, hooks, positions, d_model, keys (written once, checked on resume)
    items.jsonl             one line per item: id, shard, row, label log-probs, metadata
    shards/00000.safetensors  {"{hook}@{position}": float32 [rows, d_model], ...}

Writes are crash-safe and resumable: a shard is written atomically (temporary
file, then rename) *before* its items are appended to ``items.jsonl``, so an
item listed there always has its rows on disk. A shard whose items never made
it into the table (a crash in between) is ignored and its items are redone.
Memory is bounded by ``shard_size`` rows per key.

>>> import tempfile, numpy as np
>>> d = tempfile.mkdtemp()
>>> with ActivationWriter(d, {"keys": ["blocks.0.hook_resid_post@last"]}, shard_size=2) as w:
...     w.add([{"id": "a"}, {"id": "b"}, {"id": "c"}],
...           {"blocks.0.hook_resid_post@last": np.arange(6, dtype=np.float32).reshape(3, 2)})
>>> acts = load(d)
>>> acts.ids, acts["blocks.0.hook_resid_post@last"][2].tolist()
(['a', 'b', 'c'], [4.0, 5.0])
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
from safetensors.numpy import load_file, save_file

from probe.errors import InputError, ProbeError
from probe.io import RecordWriter
from probe.io import read_records, write_json_atomic

MANIFEST, TABLE, SHARDS = "manifest.json", "items.jsonl", "shards"


class ActivationWriter:
    """Buffer rows per key and flush them as shards of ``shard_size`` items.

    ``manifest`` must hold ``keys`` (the ``{hook}@{position}`` names); on
    resume it must equal the stored manifest in every field but ``extra``.
    ``done`` is the set of item ids already stored (skip them).
    """

    def __init__(self, directory: str | Path, manifest: Mapping[str, Any], shard_size: int = 512) -> None:
        self.dir = Path(directory)
        self.keys: list[str] = list(manifest["keys"])
        self.shard_size = int(shard_size)
        (self.dir / SHARDS).mkdir(parents=True, exist_ok=True)
        path = self.dir / MANIFEST
        if path.exists():
            old = json.loads(path.read_text(encoding="utf-8"))
            diff = sorted(k for k in set(old) | set(manifest) if k != "extra" and old.get(k) != manifest.get(k))
            if diff:
                raise ProbeError(f"{self.dir} holds activations from a different run (differs in {', '.join(diff)}); "
                                 "use another --output directory")
        else:
            write_json_atomic(path, dict(manifest))
        self._table = RecordWriter(self.dir / TABLE)
        self.done: set[str] = set(self._table.done)
        # Never overwrite a shard, even an orphan from a crash: its rows belong to no listed item.
        self._next = 1 + max((int(p.stem) for p in (self.dir / SHARDS).glob("*.safetensors")), default=-1)
        self._recs: list[dict] = []
        self._rows: dict[str, list[np.ndarray]] = {k: [] for k in self.keys}

    def add(self, records: Sequence[Mapping[str, Any]], arrays: Mapping[str, np.ndarray]) -> None:
        """Queue one batch: ``records[i]`` (with an ``id``) goes with row ``i`` of every array."""
        missing = set(self.keys) - set(arrays)
        if missing:
            raise ValueError(f"batch lacks keys {sorted(missing)}")
        n = len(records)
        for k in self.keys:
            a = np.asarray(arrays[k], dtype=np.float32)
            if a.ndim != 2 or a.shape[0] != n:
                raise ValueError(f"{k}: expected [{n}, d] rows, got shape {a.shape}")
            self._rows[k].append(a)
        self._recs.extend(dict(r) for r in records)
        while len(self._recs) >= self.shard_size:
            self._flush(self.shard_size)

    def _flush(self, n: int) -> None:
        if not self._recs:
            return
        # per key: the chunks' [rows, d_model] blocks -> one [shard rows, d_model] array
        stacked = {k: np.concatenate(v, axis=0) for k, v in self._rows.items()}
        shard = f"{self._next:05d}"
        target = self.dir / SHARDS / f"{shard}.safetensors"
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
        os.close(fd)
        save_file({k: np.ascontiguousarray(v[:n]) for k, v in stacked.items()}, tmp)
        os.replace(tmp, target)
        self._next += 1
        recs, self._recs = self._recs[:n], self._recs[n:]
        self._table.write_many([{**r, "shard": shard, "row": i} for i, r in enumerate(recs)])
        self.done.update(str(r["id"]) for r in recs)
        self._rows = {k: [v[n:]] for k, v in stacked.items()}

    def flush(self) -> None:
        """Write everything queued as one shard now (a run does so per chunk, before its records)."""
        self._flush(len(self._recs))

    def close(self) -> None:
        self._flush(len(self._recs))
        self._table.close()

    def __enter__(self) -> "ActivationWriter":
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        # On an error keep what is complete; the buffered partial shard is redone on resume.
        if exc_type is None:
            self.close()
        else:
            self._table.close()


@dataclass(frozen=True)
class Activations:
    """What :func:`load` returns. Unpacks as ``ids, arrays = load(d)``.

    ``arrays`` maps ``"{hook}@{position}"`` to float32 ``[n_items, d_model]``
    in the order of ``ids``; ``records`` are the metadata rows (same order);
    ``manifest`` is the run's manifest.
    """

    ids: list[str]
    arrays: dict[str, np.ndarray]
    records: list[dict] = field(repr=False)
    manifest: dict = field(repr=False)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.ids, self.arrays))

    def __getitem__(self, key: str) -> np.ndarray:
        return self.arrays[key]

    def keys(self) -> list[str]:
        return list(self.arrays)

    def frame(self):
        """The metadata table as a pandas DataFrame (one row per item, same order as ``ids``);
        the item fields under ``meta`` become columns of their own (unless a column has that name)."""

        rows = []
        for r in self.records:
            row = {k: v for k, v in r.items() if k != "meta"}
            for k, v in (r.get("meta") or {}).items():
                row.setdefault(k, v)
            rows.append(row)
        return pd.DataFrame(rows)


def load(directory: str | Path, keys: Sequence[str] | None = None) -> Activations:
    """Read a store written by ``probe activations``, or the ``activations/`` store of a run directory
    (``probe run TASK --capture ...``); only ``keys`` when given.

    Items come in the order they were written (a run's: its record ids). Raises
    :class:`ProbeError` when the directory is not a store, :class:`InputError`
    when a listed row is missing.
    """
    d = Path(directory)
    if not (d / MANIFEST).exists() and (d / "activations" / MANIFEST).exists():
        d = d / "activations"
    if not (d / MANIFEST).exists():
        raise ProbeError(f"{d} is not an activation store (no {MANIFEST})")
    manifest = json.loads((d / MANIFEST).read_text(encoding="utf-8"))
    want = list(keys) if keys is not None else list(manifest["keys"])
    unknown = set(want) - set(manifest["keys"])
    if unknown:
        raise ProbeError(f"{d}: no activations named {sorted(unknown)}; stored: {manifest['keys']}")
    records, _ = read_records(d / TABLE)
    by_shard: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_shard.setdefault(r["shard"], []).append(i)
    arrays: dict[str, np.ndarray] = {}
    for shard, rows in by_shard.items():
        path = d / SHARDS / f"{shard}.safetensors"
        if not path.exists():
            raise InputError(d / TABLE, rows[0] + 1, "shard", f"shard {shard} is missing")
        data = load_file(str(path))
        idx = np.array([records[i]["row"] for i in rows])
        for k in want:
            block = data[k][idx]
            if k not in arrays:
                arrays[k] = np.empty((len(records), block.shape[1]), np.float32)
            arrays[k][rows] = block
    for k in want:  # an empty store still has every key
        arrays.setdefault(k, np.empty((0, int(manifest.get("d_model", 0))), np.float32))
    return Activations([str(r["id"]) for r in records], arrays, records, manifest)
