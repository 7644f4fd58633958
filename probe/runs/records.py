"""Append-only JSONL records that survive crashes, and atomic whole-file writes.

A run appends one JSON line per scored item and fsyncs after each batch. On
resume the file is read back; a last line cut short by a crash (no trailing
newline, or not valid JSON) is dropped and its item is redone. Nothing already
recorded is ever rewritten.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> with RecordWriter(d / "records.jsonl") as w:
...     w.write_many([{"id": "a", "x": 1}])
>>> with RecordWriter(d / "records.jsonl") as w:
...     sorted(w.done)
['a']
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from probe.errors import InputError
from probe.io import dumps, read_records

__all__ = ["RecordWriter"]


class RecordWriter:
    """Crash-safe appender of JSON records keyed by ``id`` (see module doc)."""

    def __init__(self, path: str | Path, key: str = "id") -> None:
        self.path = Path(path)
        self.key = key
        if self.path.exists() and not self.path.is_file():
            raise InputError(self.path, None, None, "output path exists and is not a file (a directory?)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records, good = read_records(self.path)
        if self.path.exists() and self.path.stat().st_size != good:
            with open(self.path, "r+b") as f:  # drop the torn tail so appends stay line-aligned
                f.truncate(good)
        self.done: set[str] = {str(r[key]) for r in self.records if key in r}
        self._fh = open(self.path, "a", encoding="utf-8")

    def write_many(self, records: Iterable[dict]) -> None:
        lines = []
        for rec in records:
            rid = str(rec[self.key])
            if rid in self.done:
                continue
            self.done.add(rid)
            self.records.append(rec)
            lines.append(dumps(rec) + "\n")
        if lines:
            self._fh.write("".join(lines))
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
