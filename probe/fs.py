"""File-system safety below every layer: the one gate before every write, a lock that cannot be turned against
its user, checks of the folders above an output, and OS errors that name their file.

:func:`check_output` is what every write passes first (:func:`probe.io.write_atomic`, :class:`probe.io.RecordWriter`,
and each command's checks before a model loads): nothing is written through a symbolic link, over a directory or a
device, or under ``/proc``, ``/sys`` or ``/dev``. :class:`OutputLock` is the one writer per output
(``<output>.lock``, ``DIR/.probe.lock``); :func:`check_parents` refuses an output under a plain file or a symbolic
link loop before anything is written; :func:`naming` makes a full disk's error say which file it stopped.
:mod:`probe.io` re-exports them.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from pathlib import Path
from typing import Any, Iterable, Iterator

from probe.errors import InputError, ProbeError

__all__ = ["OutputLock", "check_lock_free", "check_links", "check_locks", "check_output", "check_owned_dir",
           "check_parents", "json_has", "naming", "open_append"]


@contextlib.contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """An OS error raised inside names ``path`` when it names no file: a full disk or a file-size limit met
    while writing, flushing or syncing says which file it stopped.

    >>> try:
    ...     with naming("out.jsonl"):
    ...         raise OSError(28, "No space left on device")
    ... except OSError as exc:
    ...     exc.filename
    'out.jsonl'
    """
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


def check_parents(path: str | Path, what: str | Path | None = None) -> None:
    """An :class:`InputError` when a folder above ``path`` is a plain file (``--output afile/out.jsonl``) or a
    symbolic link loop (which ``Path.exists`` reports as absent)."""
    for parent in Path(path).parents:
        try:
            st = os.stat(parent)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise InputError(what or path, None, None, f"cannot write here: {parent} is a symbolic link loop") \
                    from None
            continue  # absent: created later, or a folder above it says more
        if not stat.S_ISDIR(st.st_mode):
            raise InputError(what or path, None, None, f"cannot write here: {parent} is a file, not a directory")
        return


#: trees where a write reaches the kernel or a device, never a file a run can resume: refused up front
NOT_STORAGE = ("/proc", "/sys", "/dev")
#: ... except the memory-backed file systems under ``/dev``, which are storage
_STORAGE_UNDER_DEV = ("/dev/shm",)


def _under(path: Path, roots: tuple[str, ...]) -> str | None:
    return next((r for r in roots if path == Path(r) or Path(r) in path.parents), None)


def _not_storage(path: Path) -> str | None:
    """The tree of :data:`NOT_STORAGE` that ``path`` lies in, as spelled or once its links are resolved."""
    spelled = Path(os.path.abspath(path))
    try:
        real = path.resolve()
    except (OSError, RuntimeError):  # a link loop: check_parents names it
        real = spelled
    for p in (spelled, real):
        root = _under(p, NOT_STORAGE)
        if root is not None and _under(p, _STORAGE_UNDER_DEV) is None:
            return root
    return None


def check_output(path: str | Path, what: str | Path | None = None, *, folder: bool = False) -> Path:
    """The one gate before probe writes ``path`` (a file; with ``folder``, a directory it writes into): returns
    ``path``, or raises an :class:`InputError` naming it, with nothing written or followed, when

    - it lies under ``/proc``, ``/sys`` or ``/dev`` (``/dev/null`` included; ``/dev/shm`` is storage);
    - a folder above it is a plain file or a symbolic link loop (:func:`check_parents`);
    - a symbolic link is there (written through, it would overwrite or create a file elsewhere; removed, it
      would lose the user's link): refused as the lock path's is, dangling or not;
    - a directory is there where a file goes, a file where a directory goes, or a device, pipe or socket.

    :func:`probe.io.write_atomic` and :class:`probe.io.RecordWriter` call it before every write; each command
    calls it on its outputs before any model loads.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> os.symlink("/etc/hostname", os.path.join(d, "out.jsonl"))
    >>> try:
    ...     check_output(os.path.join(d, "out.jsonl"))
    ... except InputError as exc:
    ...     "symbolic link" in str(exc)
    True
    """
    path = Path(path)
    root = _not_storage(path)
    if root is not None:
        raise InputError(what or path, None, None, f"cannot write under {root} (the kernel's or a device's files, "
                         "not storage); choose an output on a disk")
    check_parents(path, what)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise InputError(what or path, None, None, f"cannot write here: {exc.strerror}") from None
    _refuse_over(path, st, what, folder)
    return path


def _refuse_over(path: Path, st: os.stat_result, what: str | Path | None, folder: bool) -> None:
    """An :class:`InputError` when what is at ``path`` (its ``lstat``: ``st``) is not what an output may replace."""
    where = path if what is None or str(what) == str(path) else f"{what} ({path})"
    if stat.S_ISLNK(st.st_mode):
        raise InputError(where, None, None, f"is a symbolic link (to {os.readlink(path)}); probe never writes "
                         "through a link at an output path. Remove the link if you did not make it, or choose "
                         "another output")
    if folder and not stat.S_ISDIR(st.st_mode):
        raise InputError(where, None, None, "exists and is not a directory; give a directory as the output")
    if not folder and stat.S_ISDIR(st.st_mode):
        raise InputError(where, None, None, "output path exists and is a directory, not a file")
    if not folder and not stat.S_ISREG(st.st_mode):
        raise InputError(where, None, None, "exists and is not a plain file (a device, pipe or socket); "
                         "choose an output file on a disk")


def check_links(folder: str | Path, prefix: str = "", recursive: bool = False) -> None:
    """Refuse, before anything is written, a symbolic link in ``folder`` (names starting with ``prefix``;
    with ``recursive``, anywhere below it, links never followed): every file there is one a run may write
    (records, sidecars, reports, shards), and probe never writes through a link. Absent: nothing to check."""
    try:
        entries = list(os.scandir(folder))
    except OSError:  # absent or not a folder: check_output says which
        return
    for entry in sorted(entries, key=lambda e: e.name):
        if not entry.name.startswith(prefix):
            continue
        if entry.is_symlink():
            _refuse_over(Path(entry.path), os.lstat(entry.path), None, False)
        elif recursive and entry.is_dir(follow_symlinks=False):
            check_links(entry.path, recursive=True)


def check_owned_dir(out: str | Path, writes: Iterable[str], ours: Any, what: str) -> Path:
    """``out`` may take a command's files ``writes`` (names at its top; a folder among them is checked below
    too): absent, or a directory where none of them is there or ``ours(out)`` says probe wrote them. Refused
    with one line, nothing written, before any model loads: a file, a link or a path under /proc, /sys or /dev
    at ``out``; a link at one of ``writes``; one of them present in a folder that is not ``what``.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "report.md").write_text("my notes")
    >>> try:
    ...     check_owned_dir(d, ["report.md"], lambda out: False, "a probe report")
    ... except InputError as exc:
    ...     "not a probe report" in str(exc)
    True
    """
    out = check_output(out, folder=True)
    if not out.exists():
        return out
    present = []
    for name in writes:
        path = check_output(out / name, folder=(out / name).is_dir() and not (out / name).is_symlink())
        if path.is_dir():
            check_links(path, recursive=True)
        if path.exists():
            present.append(name)
    if present and not ours(out):
        shown = ", ".join(present[:3]) + (", ..." if len(present) > 3 else "")
        raise InputError(out, None, None, f"holds {shown} but is not {what}: probe would overwrite them. Choose "
                         "a new output directory, or move those files away")
    return out


def json_has(path: str | Path, *keys: str) -> bool:
    """Whether ``path`` is a plain file holding a JSON object with every one of ``keys`` (a probe file's mark).

    >>> json_has("/nonexistent.json", "task")
    False
    """
    path = Path(path)
    try:
        if path.is_symlink() or not path.is_file():
            return False
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and all(k in obj for k in keys)


def open_append(path: str | Path) -> Any:
    """``path`` opened for appending text (created if absent), never through a symbolic link (``O_NOFOLLOW``:
    a link planted after the checks fails the open instead of being followed)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            check_output(path)
        raise
    return os.fdopen(fd, "a", encoding="utf-8")


def _lock_key(path: Path) -> str:
    """The key of a lock in this process: its folder resolved (two spellings of one folder are one lock) and its
    own name as is (a link at the lock path is never followed, not even to find a lock this process holds)."""
    try:
        return str(path.parent.resolve() / path.name)
    except (OSError, RuntimeError):  # a symbolic link loop: the lock itself refuses it with one line
        return os.path.abspath(path)


#: ``O_NOFOLLOW`` where the OS has it: opening a lock path that is a symbolic link fails instead of following it
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class OutputLock:
    """An exclusive OS lock on ``path`` (``fcntl.flock`` on the file itself), held while the context is open.

    A second process that asks for the same lock is refused at once with a :class:`ProbeError` naming the
    holder's pid (written into the file). Within one process the lock is re-entrant (the command, the
    task run and the runner may each take it). The file is removed when the last holder lets go.

    The file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW``: a symbolic link, a hard link or anything but
    a plain file at the lock path (someone with write access to a shared output folder could otherwise make
    the run truncate a file elsewhere) is refused with one line and left alone. A lock file left by a killed
    process holds no lock: it is locked, removed and created afresh, never written through. Nothing is left
    behind when taking the lock fails (a full disk while writing the pid).
    """

    _held: dict[str, list] = {}  # resolved path -> [fd, depth] in this process

    def __init__(self, path: str | Path, what: str | None = None) -> None:
        self.path = Path(path)
        self.what = what or str(self.path)

    def __enter__(self) -> "OutputLock":
        key = _lock_key(self.path)
        held = self._held.get(key)
        if held is not None:
            held[1] += 1
            return self
        try:
            import fcntl
        except ImportError:  # pragma: no cover - no POSIX locks (Windows): run without one
            self._held[key] = [None, 1]
            return self
        check_parents(self.path, self.what)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(100):  # each round loses only to another process creating or removing the file meanwhile
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
            except FileExistsError:
                self._take_over_stale(fcntl)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # another process opened our new file as a stale one and locked it first: its file now
                busy = self._busy(fd)
                os.close(fd)
                raise busy from None
            try:
                if not self._is_at_path(fd):  # removed meanwhile by a holder letting go: create it again
                    os.close(fd)
                    continue
                with naming(self.path):
                    os.write(fd, f"{os.getpid()}\n".encode())
            except BaseException:
                self._drop(fd)
                raise
            self._held[key] = [fd, 1]
            return self
        raise ProbeError(f"cannot take the lock {self.path}: it keeps changing (another process?); try again")

    def _take_over_stale(self, fcntl: Any) -> None:
        """The lock path exists: refuse it when it is held or not a plain file; a stale lock is removed."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return  # removed meanwhile: create it
        self._check_plain(st)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK | _NOFOLLOW)
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # made a link since the lstat
                self._check_plain(os.lstat(self.path))
            raise
        try:
            st = os.fstat(fd)
            self._check_plain(st)
            if not self._is_at_path(fd):
                return  # replaced meanwhile: look again
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise self._busy(fd) from None
            # no process holds it: left by one that was killed. Removed while locked, so a process that
            # opened it meanwhile finds it gone and starts over; ours is then created afresh with O_EXCL
            try:
                os.unlink(self.path)
            except OSError as exc:
                raise ProbeError(f"{self.path} is a stale lock file (no process holds it) that cannot be removed "
                                 f"({exc.strerror}); remove it, then run again") from None
        finally:
            os.close(fd)

    def _check_plain(self, st: os.stat_result) -> None:
        _refuse_unsafe(self.path, st)

    def _is_at_path(self, fd: int) -> bool:
        """The open file ``fd`` is the one at the lock path now (not removed or replaced meanwhile)."""
        try:
            here = os.lstat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)

    def _busy(self, fd: int) -> ProbeError:
        os.lseek(fd, 0, os.SEEK_SET)
        holder = os.read(fd, 64).decode("ascii", "replace").strip() or "unknown"
        return ProbeError(f"{self.what} is being written by another probe process (pid {holder}); wait for it "
                          "to finish, or choose another output")

    def _drop(self, fd: int) -> None:
        """Undo a lock file this process created and locked (writing the pid failed): remove it, then close."""
        try:
            if self._is_at_path(fd):
                os.unlink(self.path)
        except OSError:
            pass
        try:
            os.close(fd)
        except OSError:
            pass

    def __exit__(self, *exc: object) -> None:
        key = _lock_key(self.path)
        held = self._held[key]
        held[1] -= 1
        if held[1]:
            return
        del self._held[key]
        if held[0] is not None:
            try:
                if self._is_at_path(held[0]):  # while still locked: a waiting process then locks a fresh file
                    os.unlink(self.path)
            except OSError:
                pass
            os.close(held[0])


def _refuse_unsafe(path: Path, st: os.stat_result) -> None:
    """A :class:`ProbeError` when the lock path ``path`` (its ``lstat`` is ``st``) is a link or not a plain file."""
    if stat.S_ISLNK(st.st_mode):
        raise ProbeError(f"refusing the lock file {path}: it is a symbolic link (a run never writes "
                         "through a link placed at its lock path); remove it if you did not make it, or choose "
                         "another output")
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        what = "a hard link to another file" if stat.S_ISREG(st.st_mode) else "not a plain file"
        raise ProbeError(f"refusing the lock file {path}: it is {what}; remove it if you did not make it, "
                         "or choose another output")


def check_locks(folder: str | Path, prefix: str = "") -> None:
    """Refuse up front, before any model loads or data set is built, a lock file in ``folder`` (a name that
    starts with ``prefix`` and ends in ``.lock`` or holds ``.lock.``: ``<output>.lock`` and a shard's with the
    prefix ``<output>.``; every lock of a run directory with none) that is a
    symbolic link, a hard link or not a plain file; :class:`OutputLock` refuses the same when it is taken, this
    only says it before a minute of loading. A plain lock file (held, or stale) is left to the lock itself."""
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix) and (n.endswith(".lock") or ".lock." in n)]
    except OSError:  # absent, not a folder, or unreadable: the output's own checks say which
        return
    for name in sorted(names):
        path = Path(folder) / name
        try:
            _refuse_unsafe(path, os.lstat(path))
        except FileNotFoundError:
            continue


def check_lock_free(path: str | Path, what: str | None = None) -> None:
    """Refuse up front, before any model loads, this run's own lock when another process holds it (its pid
    named, as :class:`OutputLock` says it once taken); absent, stale, or held by this process: nothing to say.
    A link or non-file there is refused as :func:`check_locks` does. Call it only in the process that will take
    the lock (not a launcher's rank above 0, whose rank 0 holds it)."""
    path = Path(path)
    if _lock_key(path) in OutputLock._held:
        return
    try:
        import fcntl
        st = os.lstat(path)
    except (ImportError, OSError):  # no POSIX locks, or no lock file: nothing to check
        return
    _refuse_unsafe(path, st)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
    except OSError:
        return
    try:
        try:  # a shared lock only asks; the holder's exclusive one refuses it
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            raise OutputLock(path, what)._busy(fd) from None
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def file_stamp(path: str | Path) -> tuple:
    """``(path, size, mtime_ns)``, or ``(path, None)`` for a file that is not there: what a reading kept in
    memory checks before it is used again (it is re-read when a stamp differs)."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        return (str(path.resolve()), None)
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)
