"""Generic I/O every layer may use: JSONL reading with file/line/field errors, canonical
JSON, crash-tolerant record reading and appending (:class:`RecordWriter`), atomic whole-file
writes and file hashing.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "x.json"
>>> write_json_atomic(p, {"b": float("nan"), "a": 1})
>>> p.read_text().split()
['{', '"a":', '1,', '"b":', 'null', '}']
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from probe.errors import InputError, ProbeError


def dumps(obj: Any) -> str:
    """Canonical JSON for records: stable key order, no NaN tokens (``null`` instead)."""
    return json.dumps(_clean(obj), ensure_ascii=False, sort_keys=True, allow_nan=False)


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        return _clean(obj.item())
    return obj


def read_records(path: str | Path) -> tuple[list[dict], int]:
    """Read complete records; return them and the byte offset where complete data ends.

    A final line without a newline or with invalid JSON is treated as a torn
    write and excluded. An invalid line anywhere else is corruption: error.
    """
    path = Path(path)
    if not path.exists():
        return [], 0
    data = path.read_bytes()
    records: list[dict] = []
    offset = 0
    lines = data.split(b"\n")
    for i, raw in enumerate(lines):
        is_last = i == len(lines) - 1
        if is_last:  # bytes after the final newline: a torn write (or nothing)
            break
        end = offset + len(raw) + 1
        try:
            rec = json.loads(raw.decode("utf-8"))
            if not isinstance(rec, dict):
                raise ValueError("not an object")
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            if i == len(lines) - 2 and not lines[-1]:
                break  # last complete-looking line is corrupt: treat as torn
            raise InputError(path, i + 1, None, f"corrupt record ({exc}); move the file away to start over") from exc
        records.append(rec)
        offset = end
    return records, offset


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


def write_atomic(path: str | Path, text: str) -> None:
    """Write a whole file so readers see the old or the new content, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str | Path, obj: Any) -> None:
    write_atomic(path, json.dumps(_clean(obj), ensure_ascii=False, indent=2, sort_keys=True, allow_nan=False) + "\n")


def iter_jsonl(path: str | Path, required: tuple[str, ...] = ()) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, object)`` from a JSONL file with errors naming file, line and field."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, None, "file does not exist")
    if not path.is_file():
        raise InputError(path, None, None, "not a file (a directory?)")
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(path, n, None, f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(path, n, None, f"invalid JSON ({exc.msg} at column {exc.colno})") from None
            except ValueError as exc:  # e.g. an integer over Python's 4300-digit limit
                raise InputError(path, n, None, f"invalid JSON ({exc})") from None
            except RecursionError:  # json recurses per nesting level; hostile input can exhaust the stack
                raise InputError(path, n, None, "invalid JSON (nested too deeply)") from None
            if not isinstance(obj, dict):
                raise InputError(path, n, None, f"expected a JSON object, got {type(obj).__name__}")
            for key in required:
                if key not in obj:
                    raise InputError(path, n, key, "missing required field")
            yield n, obj


def file_sha256(path: str | Path) -> str:
    """sha256 (hex) of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def stable_hash(*parts: object) -> int:
    """A process-independent integer hash (Python's ``hash`` is salted per process).

    >>> stable_hash("a", 1) == stable_hash("a", 1)
    True
    """
    return int(hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:12], 16)


def flatten_meta(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record dict with its ``meta`` mapping flattened into top-level keys (a key that clashes with a
    record field is prefixed ``meta.``): one row of a records frame.

    >>> flatten_meta({"id": "a", "kind": "label", "meta": {"category": "age", "kind": "mcq"}})
    {'id': 'a', 'kind': 'label', 'category': 'age', 'meta.kind': 'mcq'}
    """
    obj = dict(record)
    for k, v in (obj.pop("meta", None) or {}).items():
        obj[f"meta.{k}" if k in obj else k] = v
    return obj


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_name(text: Any, max_len: int = 80) -> str:
    """``text`` as a file name / HTML ``id``: letters, digits, ``_ . -`` only, never starting with a dot.

    A name already of that form (and at most ``max_len`` long) is kept as is; any other gets the
    slug of its allowed characters and a short hash of the original, so two different names never
    meet and nothing from data can name a path (``..``, ``/``) or break out of an attribute.

    >>> safe_name("hbb_table1")
    'hbb_table1'
    >>> safe_name("../../x")[:2], len(safe_name("../../x"))
    ('x_', 10)
    >>> safe_name('"><img src=x>') == safe_name('"><img src=x>') and "<" not in safe_name('"><img src=x>')
    True
    """
    raw = str(text)
    slug = _UNSAFE.sub("_", raw).strip("._-")[:max_len]
    if slug == raw and slug:
        return slug
    tag = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{slug}_{tag}" if slug else tag


def inside(root: str | Path, path: str | Path) -> Path:
    """``path`` if it resolves inside ``root`` (symlinks followed), else :class:`probe.errors.ProbeError`.

    >>> inside("/tmp/out", "/tmp/out/tables/a.md").name
    'a.md'
    """
    base = Path(root).resolve()
    target = Path(path).resolve()
    if target != base and base not in target.parents:
        raise ProbeError(f"refusing to write {path}: it lies outside the output directory {root}")
    return Path(path)
