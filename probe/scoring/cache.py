"""A persistent cache of scores, keyed on what decides a number: the model, its
tokenizer, dtype and device type, and the exact token ids (never strings).

Re-running an evaluation (a new metric, an extra prompt variant, a crashed job)
then costs only the sequences not scored before. A cached value is the
scorer's per-sequence output (:class:`probe.scoring.engine.RowOutput`), stored
bit-exactly (IEEE float64 bytes, so ``-inf``, ``-0.0`` and NaN survive).

>>> import tempfile, pathlib
>>> from probe.scoring.engine import RowOutput
>>> path = pathlib.Path(tempfile.mkdtemp()) / "scores.sqlite"
>>> key = ((1, 5, 7), 3, (8, 9))               # token ids, score_from, label ids
>>> with ScoreCache(path, "model-fingerprint") as cache:
...     cache.put_many({key: RowOutput({8: -0.5, 9: -1.25}, [], True)})
...     cache.get_many([key])[key].label_logprobs
{8: -0.5, 9: -1.25}

Design choices (see ``docs/reliability.md``):

* **Fingerprint** (:func:`probe.models.fingerprint.model_fingerprint`, computed
  by the caller and passed as a value: the engine never loads a model): weights identity (the GGUF's
  sha256; else the sha256 of the weight files in the model directory; else the
  hub commit; else the bytes of the in-memory tensors - fine for test models,
  slow for big ones), the model config, the tokenizer, dtype, quantization,
  attention implementation, device *type* (CPU and CUDA kernels give different
  float noise), the torch and transformers ``major.minor`` versions (a new
  release may change a model's code, e.g. a RoPE fix) and
  :data:`ENGINE_VERSION`. All are cheap after the first hash of a file.
* **Non-finite rows are cached** like any other: NaN/inf logits are a
  deterministic property of model + dtype + ids (all in the key), and ``finite``
  round-trips, so a cached NaN row is reported exactly as a fresh one.
* **Never wrong silently**: every value carries a keyed MAC (BLAKE2b) of its key
  and bytes; the 32-byte secret lives beside the cache in ``<cache>.key``, created
  with user-only permissions (0600) and refused when anyone else may read or write
  it. A damaged value, a value moved to another key, a value rewritten by someone
  without the secret, a file that is not a cache, or a cache of an unknown format
  is a :class:`probe.errors.ProbeError` naming the file.
* **Hooks bypass the cache**: a forward hook (steering, patching, activation
  capture) changes what the forward pass computes without changing the
  weights, so :meth:`ScoreCache.outputs` neither reads nor writes while one is
  registered on the model, nor once a weight was edited in place after its
  first call (a file-loaded model's fingerprint is that of its files).
* Storage is stdlib ``sqlite3`` in WAL mode: atomic commits, many readers and
  one writer at a time across processes (concurrent writers wait). Use a local
  disk: WAL needs shared memory, which network file systems may not provide.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import sqlite3
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from torch.nn.modules import module as mod

from probe.errors import ProbeError
from probe.scoring.engine import RowOutput

#: Bump when the engine's numerics change (cached values of older engines are then not reused).
ENGINE_VERSION = 2  # 2: packed passes (probe.scoring.engine.packed): float rounding differs from the level path
FORMAT = 2  # layout of the sqlite file and of a stored value (2: values carry a keyed MAC)
KEY_BYTES = 32
MAC_BYTES = 16
_CHUNK = 500  # keys per SELECT: under SQLite's bound-parameter limit on every build
_BUSY_MS = 120_000  # how long a writer waits for another process's transaction

CacheKey = tuple[tuple[int, ...], int, tuple[int, ...]]  # (token ids, score_from, label ids)


# -- hooks ---------------------------------------------------------------------
def forward_hooked(model: Any) -> bool:
    """True when a forward (pre-)hook is registered on ``model``, on any submodule, or globally."""

    if any(getattr(mod, g, None) for g in ("_global_forward_hooks", "_global_forward_pre_hooks")):
        return True
    return any(not _recorder(h) for m in model.modules()
               for h in (*m._forward_hooks.values(), *m._forward_pre_hooks.values()))


def _recorder(hook: Any) -> bool:
    """transformers' own output recorders: installed for good on the first ``output_hidden_states=True`` call,
    they only copy outputs while a call asks for them, so they change no score and must not switch the cache off."""
    return getattr(hook, "__module__", "") == "transformers.utils.output_capturing"


# -- the store -------------------------------------------------------------------
@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    writes: int = 0
    bypassed: int = 0  # sequences computed without the cache (hooks on the model)


class ScoreCache:
    """Scores on disk at ``path`` (SQLite, created if missing), for one model ``fingerprint``.

    Several processes may share one file (e.g. shards of one run); one file may
    also hold several models' scores, since the fingerprint is part of every key.
    """

    def __init__(self, path: str | Path, fingerprint: str) -> None:
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.stats = CacheStats()
        self._stamps: dict[int, tuple] = {}  # id(model) -> parameter versions when first seen
        if self.path.exists() and not self.path.is_file():
            raise ProbeError(f"score cache {self.path} exists and is not a file")
        check_is_cache(self.path)  # a user's own file is never written into, nor called "only a cache"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._errors("open"):
            self._db = sqlite3.connect(self.path, timeout=_BUSY_MS / 1000, isolation_level=None)
        try:
            with self._errors("open"):
                self._db.execute(f"PRAGMA busy_timeout={_BUSY_MS}")
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("BEGIN IMMEDIATE")  # schema set-up races with other processes otherwise
                try:
                    self._db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
                    self._db.execute("CREATE TABLE IF NOT EXISTS scores (key BLOB PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID")
                    self._db.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (str(FORMAT),))
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                (found,) = self._db.execute("SELECT value FROM meta WHERE name = 'format'").fetchone()
            if found != str(FORMAT):
                raise ProbeError(f"score cache {self.path} has format {found}, this probe reads format {FORMAT}; "
                                 "use another --score-cache file")
            self._key = self._load_key()
        except BaseException:
            self._db.close()
            raise

    @property
    def key_path(self) -> Path:
        """The cache's secret MAC key: ``<cache>.key``, readable and writable by its owner only."""
        return self.path.with_name(self.path.name + ".key")

    def _load_key(self) -> bytes:
        """Read the MAC key, or create it (0600, atomically: two processes agree on one key) for a new cache."""
        path = self.key_path
        if not path.exists():
            with self._errors("read"):
                has_rows = self._db.execute("SELECT 1 FROM scores LIMIT 1").fetchone() is not None
            if has_rows:
                raise ProbeError(f"score cache {self.path} holds scores but its key file {path} is missing, so no "
                                 "value can be checked; delete the cache (it is only a cache)")
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(secrets.token_bytes(KEY_BYTES))
                    f.flush()
                    os.fsync(f.fileno())
                try:
                    os.link(tmp, path)  # atomic; fails when another process made the key first: use theirs
                except FileExistsError:
                    pass
            except OSError as exc:
                raise ProbeError(f"score cache {self.path}: cannot create its key file {path} ({exc})") from None
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        try:
            st = os.stat(path)
            if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o077):
                raise ProbeError(f"score cache key {path} must belong to you and be readable by you only "
                                 f"(mode {st.st_mode & 0o777:o}); run `chmod 600 {path}` if it is yours, else delete "
                                 "the cache and its key. Share a cache read-only, only from a writer you trust")
            key = path.read_bytes()
        except OSError as exc:
            raise ProbeError(f"score cache {self.path}: cannot read its key file {path} ({exc})") from None
        if len(key) != KEY_BYTES:
            raise ProbeError(f"score cache key {path} is damaged ({len(key)} bytes, expected {KEY_BYTES}); delete "
                             "the cache and its key (they are only a cache)")
        return key

    # -- keys and values ---------------------------------------------------------
    def key_digest(self, key: CacheKey) -> bytes:
        """32-byte row key: sha256 over the fingerprint, the ids, ``score_from`` and the sorted label ids."""
        ids, score_from, label_ids = key
        labels = sorted(label_ids)
        digest = hashlib.sha256(b"probe-score-cache/1\0" + self.fingerprint.encode() + b"\0")
        digest.update(struct.pack(f"<qq{len(ids)}q", score_from, len(ids), *ids))
        digest.update(struct.pack(f"<q{len(labels)}q", len(labels), *labels))
        return digest.digest()

    def _mac(self, digest: bytes, body: bytes) -> bytes:
        return hashlib.blake2b(digest + body, digest_size=MAC_BYTES, key=self._key).digest()

    def _encode(self, digest: bytes, out: RowOutput) -> bytes:
        labels = sorted(out.label_logprobs.items())
        body = struct.pack(f"<BBII{len(labels)}q{len(labels)}d{len(out.token_logprobs)}d",
                           FORMAT, bool(out.finite), len(labels), len(out.token_logprobs),
                           *(k for k, _ in labels), *(v for _, v in labels), *out.token_logprobs)
        return body + self._mac(digest, body)

    def _decode(self, digest: bytes, blob: Any) -> RowOutput:
        blob = bytes(blob) if isinstance(blob, (bytes, memoryview)) else b""
        body, check = blob[:-MAC_BYTES], blob[-MAC_BYTES:]
        try:
            if len(blob) < 10 + MAC_BYTES or not hmac.compare_digest(self._mac(digest, body), check):
                raise ValueError("MAC mismatch: damaged, moved or rewritten without the cache's key")
            fmt, finite, n_labels, n_tokens = struct.unpack_from("<BBII", body)
            if fmt != FORMAT or len(body) != 10 + 16 * n_labels + 8 * n_tokens:
                raise ValueError("bad layout")
            values = struct.unpack_from(f"<{n_labels}q{n_labels}d{n_tokens}d", body, 10)
        except (ValueError, struct.error) as exc:
            raise ProbeError(f"score cache {self.path} holds a damaged value ({exc}); "
                             "delete the file (it is only a cache)") from None
        ids, lps = values[:n_labels], values[n_labels : 2 * n_labels]
        return RowOutput(dict(zip(ids, lps)), list(values[2 * n_labels :]), bool(finite))

    # -- API -----------------------------------------------------------------------------
    def get_many(self, keys: Iterable[CacheKey]) -> dict[CacheKey, RowOutput]:
        """The cached outputs among ``keys`` (missing keys are absent); counts hits and misses."""
        wanted = {self.key_digest(k): k for k in dict.fromkeys(keys)}
        found: dict[CacheKey, RowOutput] = {}
        digests = list(wanted)
        with self._errors("read"):
            for c in range(0, len(digests), _CHUNK):
                part = digests[c : c + _CHUNK]
                marks = ",".join("?" * len(part))
                for digest, blob in self._db.execute(f"SELECT key, value FROM scores WHERE key IN ({marks})", part):
                    found[wanted[digest]] = self._decode(digest, blob)
        self.stats.hits += len(found)
        self.stats.misses += len(wanted) - len(found)
        return found

    def put_many(self, items: dict[CacheKey, RowOutput]) -> None:
        """Store outputs in one transaction (all or nothing). A key already present keeps its first value."""
        rows = []
        for key, out in items.items():
            digest = self.key_digest(key)
            rows.append((digest, self._encode(digest, out)))
        if not rows:
            return
        with self._errors("write"):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR IGNORE INTO scores VALUES (?, ?)", rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        self.stats.writes += len(rows)

    def outputs(
        self,
        encoded: Sequence[Any],
        compute: Callable[[list[Any]], dict[tuple[tuple[int, ...], int], RowOutput]],
        model: Any = None,
    ) -> dict[tuple[tuple[int, ...], int], RowOutput]:
        """Outputs keyed ``(ids, score_from)`` for encoded requests, computing only what is not cached.

        ``encoded``: :class:`probe.scoring.tokens.Encoded` objects; ``compute(todo)``
        runs a subset and returns its outputs keyed ``(ids, score_from)`` (the
        scorer's ``_run``). A request is recomputed whole when any of its
        sequences is missing, and so is every request sharing such a sequence
        (the scorer merges their label ids into one row). Each sequence is stored
        under its own label ids. With ``model`` hooked, the cache is bypassed.
        """
        if model is not None and (forward_hooked(model) or self._weights_edited(model)):
            self.stats.bypassed += sum(len(e.sequences) for e in encoded)
            return compute(list(encoded))
        hit = self.get_many(sequence_key(s) for e in encoded for s in e.sequences)
        missing = {(s.ids, s.score_from) for e in encoded for s in e.sequences if sequence_key(s) not in hit}
        todo = [e for e in encoded if any((s.ids, s.score_from) in missing for s in e.sequences)]
        outputs = compute(todo) if todo else {}
        new = {}
        for e in todo:
            for s in e.sequences:
                out = outputs[(s.ids, s.score_from)]
                labels = {t: out.label_logprobs[t] for t in s.label_ids}
                new[sequence_key(s)] = RowOutput(labels, list(out.token_logprobs), out.finite)
        self.put_many(new)
        for (ids, score_from, _), out in hit.items():
            row = (ids, score_from)
            if row in missing:
                continue
            have = outputs.get(row)
            if have is None:
                outputs[row] = out
            else:  # the same sequence cached under other label ids: one row holds the union
                have.label_logprobs.update(out.label_logprobs)
                have.finite = have.finite and out.finite
        return outputs

    def _weights_edited(self, model: Any) -> bool:
        """True once a parameter of ``model`` was replaced or edited in place since the first call.

        The fingerprint of a model loaded from files is that of the files, so an
        in-place edit (e.g. ablating a weight) would otherwise go unseen.
        """
        stamp = tuple((p.data_ptr(), p._version) for p in model.parameters())
        first = self._stamps.setdefault(id(model), stamp)
        return first != stamp

    def __len__(self) -> int:
        """Rows stored in the file (all fingerprints)."""
        with self._errors("read"):
            return self._db.execute("SELECT COUNT(*) FROM scores").fetchone()[0]

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "ScoreCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Turn sqlite errors into a ProbeError naming the file."""
        try:
            yield
        except sqlite3.Error as exc:
            raise ProbeError(
                f"score cache {self.path}: cannot {what} it ({exc.__class__.__name__}: {exc}); "
                "if it is damaged, delete it (it is only a cache) or choose another --score-cache"
            ) from exc


def check_is_cache(path: Path) -> None:
    """A :class:`ProbeError` when ``path`` holds a file that is not a probe score cache (another SQLite database,
    notes, code): it is left untouched, and the error never suggests deleting it. An empty file, or a database
    with no table yet (another process creating the cache), is fine."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    leave = ("it was left untouched; give --score-cache (or PROBE_SCORE_CACHE) a new file name or an existing "
             "probe score cache")
    with open(path, "rb") as f:
        if f.read(16) != b"SQLite format 3\x00":
            raise ProbeError(f"{path} is not a probe score cache (not an SQLite file); {leave}")
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            db.close()
    except sqlite3.Error:
        return  # unreadable as a database: opening it names the problem
    if tables and ("meta" not in tables or tables - {"meta", "scores"}):
        shown = ", ".join(sorted(tables)[:5])
        raise ProbeError(f"{path} is an SQLite database but not a probe score cache (tables: {shown}); {leave}")


def sequence_key(seq: Any) -> CacheKey:
    """The cache key of a :class:`probe.scoring.tokens.Sequence` (label ids sorted)."""
    return (tuple(seq.ids), int(seq.score_from), tuple(sorted(seq.label_ids)))
