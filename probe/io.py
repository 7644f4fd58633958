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
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from probe.errors import InputError, ProbeError
# re-exported: every layer takes them from probe.io
from probe.fs import (OutputLock, check_links, check_lock_free, check_locks, check_output,  # noqa: F401
                      check_owned_dir, check_parents, json_has, naming, open_append)


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
        check_output(self.path)  # no link, directory or device at the path; nothing under /proc, /sys, /dev
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # one writer per output: a second process is refused before it reads or appends anything
        self._lock = OutputLock(self.path.with_name(self.path.name + ".lock"), str(self.path))
        self._lock.__enter__()
        try:
            self.records, good = read_records(self.path)
            check_records(self.path, key=key, read=(self.records, good))  # another file's lines: refused, untouched
            if self.path.exists() and self.path.stat().st_size != good:
                with open_append(self.path) as f:  # drop the torn tail so appends stay line-aligned
                    f.truncate(good)
            self._drop_duplicates()
            self.done: set[str] = {str(r[key]) for r in self.records if key in r}
            self._fh: Any = None  # opened at the first record: an error before it leaves no empty file
            self._closed = False
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise

    def _drop_duplicates(self) -> None:
        """A record id on two lines (two writers at once, or a hand edit): the same record twice is removed
        (the file is rewritten atomically, and said on stderr); two different records under one id are an
        error naming both lines, the file untouched."""
        first: dict[str, int] = {}
        dup: list[int] = []
        for n, rec in enumerate(self.records):
            if self.key not in rec:
                continue
            rid = str(rec[self.key])
            if rid not in first:
                first[rid] = n
                continue
            if dumps(rec) != dumps(self.records[first[rid]]):
                raise InputError(self.path, n + 1, self.key, f"duplicate record id {rid!r} (first on line "
                                 f"{first[rid] + 1}) with a different record; keep one of the two lines, or move "
                                 "the file away to start over")
            dup.append(n)
        if not dup:
            return
        ids = sorted({str(self.records[n][self.key]) for n in dup})
        drop = set(dup)
        self.records = [r for n, r in enumerate(self.records) if n not in drop]
        write_atomic(self.path, "".join(dumps(r) + "\n" for r in self.records))

        print(f"probe: {self.path}: removed {len(dup)} duplicate record line(s) (the same record twice; ids "
              f"{', '.join(map(repr, ids[:3]))}{', ...' if len(ids) > 3 else ''})", file=sys.stderr)

    def write_many(self, records: Iterable[dict]) -> None:
        """Append the records whose id is not written yet, durably (flushed and synced) before returning.

        A write that fails (a full disk) is undone: the file goes back to its previous length (and is removed
        if this write created it), so a resume finds whole records only and an error leaves no empty file.
        """
        new: dict[str, dict] = {}
        for rec in records:
            rid = str(rec[self.key])
            if rid not in self.done and rid not in new:
                new[rid] = rec
        if not new:
            return
        text = "".join(dumps(rec) + "\n" for rec in new.values())
        existed = self.path.exists()
        size = self.path.stat().st_size if existed else 0
        try:
            with naming(self.path):
                if self._fh is None:
                    self._fh = open_append(self.path)
                self._fh.write(text)
                self._fh.flush()
                os.fsync(self._fh.fileno())
        except BaseException:
            self._undo(existed, size)
            raise
        self.done.update(new)
        self.records.extend(new.values())

    def _undo(self, existed: bool, size: int) -> None:
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass  # what it still buffered is cut below
            self._fh = None
        try:
            if existed:
                os.truncate(self.path, size)
            else:
                self.path.unlink(missing_ok=True)
        except OSError:
            pass  # a torn tail is dropped by the next resume

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._fh is not None:
                self._fh.close()
            self._lock.__exit__(None, None, None)

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_atomic(path: str | Path, text: str) -> None:
    """Write a whole file so readers see the old or the new content, never half; never over a link, a
    directory or a device, nor under /proc, /sys or /dev (:func:`probe.fs.check_output`)."""
    path = check_output(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with naming(path), os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # as open() would create it (mkstemp makes 0600)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def check_records(path: str | Path, task: str | None = None, key: str = "id", hint: str = "",
                  read: tuple[list[dict], int] | None = None) -> None:
    """``path`` may take probe's records (of ``task``, when given): absent, empty, or a file whose every line is
    a probe record (a JSON object with ``key``, ``task`` and ``kind``, ``task`` the one given). A torn last line,
    what a crash leaves, is allowed. Anything else (the user's own file, another command's or task's records, a
    link, a directory) is an :class:`InputError` naming the file and the line, the file untouched: a run never
    appends to or truncates a file that is not its own. ``hint``: what the refusal adds (e.g. ``--overwrite``);
    ``read``: :func:`read_records` of ``path`` when the caller has it.
    """
    path = check_output(path)
    if not path.exists():
        return
    fix = hint or "choose another output, or move the file away"
    records, good = read if read is not None else read_records(path)
    if not records:
        with open(path, "rb") as f:
            head = f.read(4096)
        torn = not head or (head.startswith(b'{"') and b"\n" not in head)  # empty, or a first record cut off
        if not torn:
            raise InputError(path, None, None, f"exists and is not a probe records file; {fix}")
    for n, rec in enumerate(records, start=1):
        missing = [k for k in (key, "task", "kind") if k not in rec]
        if key not in rec or (task is not None and missing):
            raise InputError(path, n, None, f"not a probe record (no {missing[0]!r} field): this file is not "
                             f"probe's output; {fix}")
        if task is not None and rec["task"] != task:
            raise InputError(path, n, "task", f"holds records of {rec['task']!r}, not of {task!r}: another "
                             f"command's or task's output; {fix}")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json_atomic(path: str | Path, obj: Any) -> None:
    write_atomic(path, json.dumps(_clean(obj), ensure_ascii=False, indent=2, sort_keys=True, allow_nan=False) + "\n")


#: the longest JSONL line read by default (bytes, newline excluded): a longer one is refused before it is parsed,
#: so a hostile file costs bounded memory; commands that read a user's file raise it with ``--max-line-bytes``
MAX_LINE_BYTES = 8 * 1024 * 1024


def read_jsonl(path: str | Path, required: tuple[str, ...] = (), max_line_bytes: int | None = None) -> list[dict]:
    """The objects of a JSONL file, in order (blank lines skipped), with :func:`iter_jsonl`'s checks: an error
    names the file, the line and the field. For a reader that names a line in its own errors, iterate
    :func:`iter_jsonl` (it yields the line numbers too).

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "items.jsonl")
    >>> _ = open(path, "w").write('{"id": "a"}\\n\\n{"id": "b"}\\n')
    >>> [obj["id"] for obj in read_jsonl(path, required=("id",))]
    ['a', 'b']
    """
    return [obj for _, obj in iter_jsonl(path, required, max_line_bytes)]


def iter_jsonl(path: str | Path, required: tuple[str, ...] = (),
               max_line_bytes: int | None = None) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, object)`` from a JSONL file with errors naming file, line and field
    (:func:`read_jsonl`: the objects alone).

    A line over ``max_line_bytes`` (default :data:`MAX_LINE_BYTES`) is an error naming the line and the limit;
    no more than the limit is read into memory.
    """
    path = Path(path)
    limit = MAX_LINE_BYTES if max_line_bytes is None else int(max_line_bytes)
    if not path.exists():
        raise InputError(path, None, None, "file does not exist")
    if not path.is_file():
        raise InputError(path, None, None, "not a file (a directory?)")
    with open(path, "rb") as f:
        for n, raw in enumerate(iter(lambda: f.readline(limit + 1), b""), start=1):
            if len(raw) > limit and not (len(raw) == limit + 1 and raw.endswith(b"\n")):
                raise InputError(path, n, None, f"the line is longer than the limit of {limit:,} bytes (read no "
                                 "further; raise the limit with --max-line-bytes)")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(path, n, None, f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
            if n == 1 and text.startswith("\ufeff"):
                text = text[1:]  # a UTF-8 byte order mark (Windows editors): not part of the data
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
            if "\\u" in text and re.search(r"\\u[dD][89a-fA-F]", text):
                _check_text(obj, path, n, None)
            for key in required:
                if key not in obj:
                    raise InputError(path, n, key, "missing required field")
            yield n, obj


def _check_text(obj: Any, path: Path, line: int, field: str | None) -> None:
    """Every string in ``obj`` is valid Unicode text (JSON's ``\\ud800`` escapes can give lone surrogates,
    which no tokenizer or file encoding takes): an :class:`InputError` naming the field otherwise."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InputError(path, line, field, f"not valid Unicode text (a lone surrogate "
                             f"{obj[exc.start]!r} at character {exc.start})") from None
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _check_text(k, path, line, field)
            _check_text(v, path, line, field if field is not None else str(k))
    elif isinstance(obj, list):
        for v in obj:
            _check_text(v, path, line, field)


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


_UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]+")


def safe_name(text: Any, max_len: int = 80) -> str:
    """``text`` as a file name / HTML ``id``: letters, digits, ``_ . + -`` only, never starting with a dot.

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


_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def slug(text: str) -> str:
    """``text`` as a readable name part: each run of characters other than letters, digits and ``. _ -``
    becomes ``_``, with ``_`` trimmed at the ends; no hash, so the name reads back.

    For names we choose (a model name in a run directory, a label in a table name). Text from data
    that must never name a path or two different texts that must never meet: :func:`safe_name`.

    >>> slug("HuggingFaceTB/SmolLM2-135M-Instruct")
    'HuggingFaceTB_SmolLM2-135M-Instruct'
    >>> slug("base (T=0.8)")
    'base_T_0.8'
    """
    return _SLUG.sub("_", str(text)).strip("_")


_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


def no_markup(text: str) -> str:
    """Markdown text with no raw HTML: every ``<`` that could open a tag gets Markdown's backslash escape
    (``\\<``, shown as ``<``; an HTML entity would read ``&lt;`` in a terminal or a text editor); a ``<``
    before a space or digit (``S < 20``) is left alone.

    >>> print(no_markup('model "><img src=x onerror=alert(1)> at S < 20'))
    model ">\\<img src=x onerror=alert(1)> at S < 20
    """
    return _TAG_START.sub(r"\\<", text)


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
