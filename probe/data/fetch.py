"""What a benchmark data set is (:class:`DatasetSpec`) and ``probe data fetch``: download (or copy), verify, store.

Real benchmark data is never shipped with probe. Each task declares the data
sets it reads (a ``datasets`` module in its folder; :func:`probe.tasks.data_sets`
lists them all by name). ``fetch(spec)`` downloads a data set's files from its
public source into ``probe.paths.cache_dir()/data/NAME``;
``fetch(spec, source=PATH_OR_URL)`` takes them from a local directory, a
``file://`` URL, or another base URL instead. A local source may use either our
layout (``templates/Age.csv``) or the upstream one (``templates/new_templates -
Age.csv``), and may be the data set directory itself or its parent.

Verification: every required file is present and parses (CSV with pandas, JSONL
line by line, JSON); the sha256 of every stored file is written to
``MANIFEST.json`` with the source, so a later ``verify`` detects changed files.

The public URLs in the tasks' specs were looked up in the projects' repositories;
the branch names (``main``/``master``) are the ones those repositories use today and
may move; where a paper cites an anonymous review link, the source is the authors'
repository as found by name (its task's spec says so).

A data set of one file may also be fetched from that file itself: a local path, a
``file://`` URL or a full URL ending in the file's name or ``.csv``/``.json``. A data
set of several files may name another data set that one file given for it is stored
as (:attr:`DatasetSpec.single_file`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import shutil
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from probe.errors import InputError, ProbeError
from probe.paths import cache_dir

__all__ = ["DataFile", "DatasetSpec", "fetch", "verify", "sha256_of"]


@dataclass(frozen=True)
class DataFile:
    """One file of a data set: where it lives locally and upstream."""

    name: str  # path under the data set directory (our layout)
    remote: str  # path under the source's base URL (upstream layout)
    required: bool = True
    kind: str = "csv"  # csv | jsonl | json | text (text: not parsed)
    # the data set's own reader, run after the kind's check: raises InputError/ProbeError on a bad file
    check: Callable[[Path], Any] | None = None


@dataclass(frozen=True)
class DatasetSpec:
    """One data set: where it comes from, its license and its files.

    ``single_file``: the data set that one file given for this one (``--from FILE``) is stored as
    (None: a single file is accepted only when the data set has one file); ``note(path)``: a line
    ``probe data fetch`` prints after storing it (e.g. whether runs find an optional file there).
    """

    name: str
    description: str
    base_url: str
    homepage: str
    license: str
    files: tuple[DataFile, ...]
    single_file: "DatasetSpec | None" = None
    note: Callable[[Path], str] | None = None


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_parse(path: Path, kind: str, check: Callable[[Path], Any] | None = None) -> None:
    """Raise InputError naming the file (and line) if it does not parse as ``kind`` (then ``check``)."""
    if kind == "csv":
        import pandas as pd

        try:
            df = pd.read_csv(path, dtype=str, keep_default_na=False)
        except Exception as exc:  # pandas raises several parser error types
            raise InputError(path, None, None, f"not a readable CSV ({exc})") from None
        if df.shape[1] < 2:
            raise InputError(path, None, None, "CSV has fewer than 2 columns")
    elif kind == "jsonl":
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise InputError(path, n, None, f"not valid JSON ({exc.msg})") from None
    elif kind == "json":
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise InputError(path, exc.lineno, None, f"not valid JSON ({exc.msg})") from None
    if check is not None:
        check(path)


def verify(spec: DatasetSpec, directory: str | Path) -> dict[str, str]:
    """Check a stored data set: required files present and parseable, hashes as in ``MANIFEST.json``.

    Returns {file: sha256}. Raises :class:`ProbeError` / :class:`InputError` on a problem.
    """
    name = spec.name
    directory = Path(directory)
    manifest_path = directory / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else None
    hashes = {}
    for f in spec.files:
        p = directory / f.name
        if not p.is_file():
            if f.required:
                raise ProbeError(f"data set {name!r}: required file {f.name} missing in {directory}")
            continue
        _check_parse(p, f.kind, f.check)
        hashes[f.name] = sha256_of(p)
        if manifest is not None and manifest["files"].get(f.name) not in (None, hashes[f.name]):
            raise ProbeError(f"data set {name!r}: {f.name} changed since it was fetched (sha256 mismatch)")
    return hashes


def _local_dir(source: str) -> Path | None:
    if source.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(source).path))
    if "://" not in source:
        return Path(source).expanduser()
    return None


def _is_file_source(spec: DatasetSpec, source: str) -> bool:
    """Whether ``source`` names one file rather than a directory or base URL."""
    local = _local_dir(source)
    if local is not None:
        return local.is_file()
    tail = urllib.parse.urlparse(source).path.rsplit("/", 1)[-1]
    return tail.endswith((".csv", ".json", ".jsonl")) or any(tail == Path(f.remote).name for f in spec.files)


def _fetch_one_file(spec: DatasetSpec, source: str, dst: Path, timeout: float) -> list[str]:
    """Copy or download the single file ``source`` as the spec's only file."""
    (f,) = spec.files
    target = dst / f.name
    target.parent.mkdir(parents=True, exist_ok=True)
    local = _local_dir(source)
    if local is not None:
        shutil.copyfile(local, target)
        return [f.name]
    try:
        with urllib.request.urlopen(source, timeout=timeout) as resp, open(target, "wb") as out:
            shutil.copyfileobj(resp, out)
    except OSError as exc:
        target.unlink(missing_ok=True)
        raise ProbeError(f"could not download {source} ({exc}). Without internet, pass --from a local copy "
                         "(the file, or a file:// URL)") from None
    return [f.name]


def _copy_from_dir(spec: DatasetSpec, src: Path, dst: Path) -> list[str]:
    if (src / spec.name).is_dir() and not any((src / f.name).exists() for f in spec.files):
        src = src / spec.name  # the parent of the data set directory was given
    if not src.is_dir():
        raise ProbeError(f"source {src} is not a directory")
    got = []
    for f in spec.files:
        for cand in (src / f.name, src / f.remote):
            if cand.is_file():
                (dst / f.name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(cand, dst / f.name)
                got.append(f.name)
                break
    return got


def _download(spec: DatasetSpec, base: str, dst: Path, timeout: float) -> list[str]:
    got = []
    base = base if base.endswith("/") else base + "/"
    for f in spec.files:
        url = urllib.parse.urljoin(base, urllib.parse.quote(f.remote))
        target = dst / f.name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp, open(target, "wb") as out:
                shutil.copyfileobj(resp, out)
            got.append(f.name)
        except OSError as exc:  # URLError/HTTPError are OSErrors
            target.unlink(missing_ok=True)
            if f.required:
                raise ProbeError(f"could not download {url} ({exc}). Without internet, pass "
                                 f"--from a local copy (directory or file:// URL)") from None
    return got


def fetch(spec: DatasetSpec, source: str | None = None, dest: str | Path | None = None, force: bool = False,
          timeout: float = 60.0) -> Path:
    """Fetch data set ``spec`` into ``dest`` (default: the probe cache) and verify it.

    >>> from probe.tasks import data_set
    >>> fetch(data_set("crows_pairs"), source="../shared/data")  # doctest: +SKIP
    """

    single = source is not None and _is_file_source(spec, source)
    if single and spec.single_file is not None:  # one file given: the data set it stands for alone
        spec = spec.single_file
    name = spec.name
    if single and len(spec.files) != 1:
        raise ProbeError(f"data set {name!r} has {len(spec.files)} files: --from must be a directory or base URL, "
                         f"not the single file {source}")
    dest = Path(dest) if dest is not None else cache_dir() / "data" / name
    if dest.is_dir() and not force and (dest / "MANIFEST.json").is_file():
        verify(spec, dest)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{name}."))
    try:
        local = _local_dir(source) if source else None
        if single:
            got = _fetch_one_file(spec, source, tmp, timeout)
        elif local is not None:
            got = _copy_from_dir(spec, local, tmp)
        else:
            got = _download(spec, source or spec.base_url, tmp, timeout)
        if not got:
            raise ProbeError(f"no file of data set {name!r} found at {source or spec.base_url}")
        hashes = verify(spec, tmp)
        manifest = {"name": name, "source": source or spec.base_url, "homepage": spec.homepage,
                    "license": spec.license,
                    "fetched": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "files": hashes}
        (tmp / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
