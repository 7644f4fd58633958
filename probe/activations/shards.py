"""Capture under ``--shard I/N``: one job of an array records its chunks into its own store.

A run's activations are stored one safetensors shard per chunk (the Runner's
chunks, :func:`probe.runs.chunks.group_chunks`). Shard ``I`` of ``N`` records
chunks ``k`` with ``k % N == I`` (as it scores them) into the store
``<output>.rank{I}-of-{N}`` beside ``<output>`` (a full store: manifest, items,
shards) plus ``shard.json`` (the shard, every chunk's ids in order, ``complete``
once done). A later run without ``--shard`` folds a complete set into
``<output>`` chunk by chunk in one-process order, so the store is the one a
single process writes (same items table, same safetensors files), and deletes
the shard stores; an unfinished set is refused, naming it.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Sequence


import numpy as np

from probe.activations.store import ActivationWriter, load
from probe.errors import ProbeError
from probe.io import write_json_atomic

MARKER = "shard.json"


def shard_store(output: Path, index: int, count: int) -> Path:
    """``<output>.rank{index}-of-{count}``."""
    output = Path(output)
    return output.with_name(f"{output.name}.rank{index}-of-{count}")


def shard_stores(output: Path) -> dict[int, dict[int, tuple[Path, dict]]]:
    """``{N: {I: (store, marker)}}`` of the shard stores beside ``output``."""
    output = Path(output)
    found: dict[int, dict[int, tuple[Path, dict]]] = {}
    if not output.parent.is_dir():
        return found
    pattern = re.compile(re.escape(output.name) + r"\.rank(\d+)-of-(\d+)")
    for p in output.parent.iterdir():
        m = pattern.fullmatch(p.name)
        if m and (p / MARKER).is_file():
            try:
                marker = json.loads((p / MARKER).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ProbeError(f"{p / MARKER} is unreadable ({exc}); delete {p} to record that shard again") from None
            found.setdefault(int(m.group(2)), {})[int(m.group(1))] = (p, marker)
    return found


def write_marker(store: Path, marker: dict) -> None:
    write_json_atomic(Path(store) / MARKER, marker)


def fold_stores(output: Path, head: dict, chunks: Sequence[Sequence[str]], shard_size: int | None = None) -> int:
    """Fold every complete set of shard stores into the store ``output``; return the items added.

    ``head``: the manifest this run writes (shard stores with another manifest, but for ``extra``, are
    refused); ``chunks``: this run's ids, chunk by chunk, in order (a set made from another input or
    chunking is refused); ``shard_size``: the rows per safetensors file of the one-process writer
    (default the longest chunk), so a chunk longer than it (a group kept whole) is split as it splits it."""

    sets = shard_stores(output)
    waiting = [f"{i}/{n}" for n, members in sorted(sets.items()) for i in range(n)
               if i not in members or not members[i][1].get("complete")]
    if waiting:
        raise ProbeError(f"{output}: activation shard(s) {', '.join(waiting)} are not finished (still running, "
                         f"failed, or never started). Run them (the same command with --shard I/N), or delete "
                         f"their stores ({Path(output).name}.rankI-of-N) to record their items here")
    added = 0
    for count, members in sorted(sets.items()):
        for index, (store, marker) in sorted(members.items()):
            if marker.get("chunks") != [list(c) for c in chunks]:
                raise ProbeError(f"{store} was recorded from another input or with another chunk size; "
                                 "refusing to merge it")
            manifest = json.loads((store / "manifest.json").read_text(encoding="utf-8"))
            diff = sorted(k for k in set(manifest) | set(head) if k != "extra" and manifest.get(k) != head.get(k))
            if diff:
                raise ProbeError(f"{store} was recorded by another model or setting (differs in {', '.join(diff)}); "
                                 "refusing to merge it")
        loaded = {i: load(store) for i, (store, _) in members.items()}
        rows = {i: {rid: k for k, rid in enumerate(acts.ids)} for i, acts in loaded.items()}
        size = shard_size or max([len(c) for c in chunks] + [1])
        with ActivationWriter(output, head, shard_size=size) as writer:
            for k, chunk in enumerate(chunks):
                acts, where = loaded[k % count], rows[k % count]
                part = [rid for rid in chunk if rid not in writer.done and rid in where]
                if not part:
                    continue
                idx = np.array([where[rid] for rid in part])
                recs = [{key: v for key, v in acts.records[j].items() if key not in ("shard", "row")} for j in idx]
                writer.add(recs, {key: acts.arrays[key][idx] for key in writer.keys})
                writer.flush()
                added += len(part)
        for store, _ in members.values():
            shutil.rmtree(store)
    return added


def shard_marker(index: int, count: int, chunks: Sequence[Sequence[str]], complete: bool) -> dict[str, Any]:
    return {"format": 2, "shard": [index, count], "chunks": [list(c) for c in chunks], "complete": complete}


class ShardStoreWriter:
    """The store of shard ``index`` of ``count`` (``<output>.rank{index}-of-{count}``), marked unfinished
    until :meth:`complete`; otherwise an :class:`~probe.activations.store.ActivationWriter`."""

    def __init__(self, output: Path, head: dict, index: int, count: int, chunks: Sequence[Sequence[str]],
                 shard_size: int | None = None) -> None:

        self.path = shard_store(output, index, count)
        self.marker = (index, count, [list(c) for c in chunks])
        self.writer = ActivationWriter(self.path, head, shard_size=shard_size or max([len(c) for c in chunks] + [1]))
        write_marker(self.path, shard_marker(*self.marker, complete=False))

    @property
    def done(self) -> set[str]:
        return self.writer.done

    @property
    def keys(self) -> list[str]:
        return self.writer.keys

    def add(self, records: Sequence[dict], arrays: dict) -> None:
        self.writer.add(records, arrays)

    def flush(self) -> None:
        self.writer.flush()

    def complete(self) -> None:
        """Every chunk of this shard is stored: the set may be folded once the others are too."""
        self.writer.flush()
        write_marker(self.path, shard_marker(*self.marker, complete=True))

    def close(self) -> None:
        self.writer.close()
