"""Registry of benchmark data sets and ``probe data fetch``: download (or copy), verify, store.

Real benchmark data is never shipped with probe. ``fetch(NAME)`` downloads a data
set's files from its public source into ``probe.paths.cache_dir()/data/NAME``;
``fetch(NAME, source=PATH_OR_URL)`` takes them from a local directory, a
``file://`` URL, or another base URL instead. A local source may use either our
layout (``templates/Age.csv``) or the upstream one (``templates/new_templates -
Age.csv``), and may be the data set directory itself or its parent.

Verification: every required file is present and parses (CSV with pandas, JSONL
line by line, JSON); the sha256 of every stored file is written to
``MANIFEST.json`` with the source, so a later ``verify`` detects changed files.

The public URLs below were looked up in the projects' repositories; the branch
names (``main``/``master``) are the ones those repositories use today and may move.
HBB's and BharatBBQ's sources are the authors' GitHub repositories as found by
name (the papers cite anonymous review links); treat them as best known.

A data set of one file (``crows_pairs``, ``stereoset``, ``hbb_sg``) may also be fetched from
that file itself: a local path, a ``file://`` URL or a full URL ending in the file's name or
``.csv``/``.json``. ``hbb`` fetched from a single file (not a directory) is the HBB-SG variation
set alone (the authors' ``all_data_more_contexts_questions.csv``), stored as data set ``hbb_sg``;
a full ``probe data fetch hbb`` also takes it, when the source has it, as the optional
``hbb/sg_variations.csv``. HBB-SG uses it whenever present (``probe.tasks.hbb.data.authors_variations_path``).
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

from probe.errors import InputError, ProbeError

__all__ = ["DataFile", "DatasetSpec", "REGISTRY", "fetch", "verify", "sha256_of"]


@dataclass(frozen=True)
class DataFile:
    """One file of a data set: where it lives locally and upstream."""

    name: str  # path under the data set directory (our layout)
    remote: str  # path under the source's base URL (upstream layout)
    required: bool = True
    kind: str = "csv"  # csv | jsonl | json | text | hbb_variations (the authors' HBB-SG variation CSV)


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    description: str
    base_url: str
    homepage: str
    license: str
    files: tuple[DataFile, ...]


def _bbq_files() -> tuple[DataFile, ...]:
    cats = ("Age", "Disability_status", "Gender_identity", "Nationality", "Physical_appearance",
            "Race_ethnicity", "Race_x_SES", "Race_x_gender", "Religion", "SES", "Sexual_orientation")
    needed = {"Age", "Gender_identity", "Nationality", "Religion", "SES", "Race_ethnicity"}
    files = [DataFile(f"templates/{c}.csv", f"templates/new_templates - {c}.csv", c in needed) for c in cats]
    files += [DataFile("templates/vocabulary.csv", "templates/vocabulary.csv"),
              DataFile("templates/vocabulary_proper_names.csv", "templates/vocabulary_proper_names.csv"),
              DataFile("templates/Filler_items.csv", "templates/new_templates - Filler_items.csv", False)]
    # Only Age, Nationality and Religion are needed by the tests; the rest are optional.
    files += [DataFile(f"data/{c}.jsonl", f"data/{c}.jsonl", c in ("Age", "Nationality", "Religion"), "jsonl")
              for c in cats]
    files.append(DataFile("LICENSE", "LICENSE", False, "text"))
    return tuple(files)


# probe.tasks.hbb.data.AUTHORS_VARIATIONS_FILE / _REMOTE (not imported: fetch stays free of the builders)
_HBB_SG_FILE = "sg_variations.csv"
_HBB_SG_REMOTE = "Questions/20241207-0945_all_data_more_contexts_questions.csv"

_CMP_ISO = ("bbq_gender", "crows_pairs_gender", "discrim_eval_gen_gender", "dt_toxic_gender", "mmlu",
            "reddit_bias_gender", "stereo_set_gender", "wino_bias_gender")

REGISTRY: dict[str, DatasetSpec] = {
    "bbq": DatasetSpec(
        "bbq", "BBQ (Parrish et al., 2022): templates, vocabulary and generated instances",
        "https://raw.githubusercontent.com/nyu-mll/BBQ/main/", "https://github.com/nyu-mll/BBQ", "CC-BY-4.0",
        _bbq_files()),
    "bharatbbq": DatasetSpec(
        "bharatbbq", "BharatBBQ (Tomar et al., 2025): caste templates and instances",
        "https://raw.githubusercontent.com/sahoonihar/BharatBBQ/main/BharatBBQ_Dataset/",
        "https://github.com/sahoonihar/BharatBBQ", "see the repository",
        (DataFile("Caste_templates.csv", "Templates/Caste.csv"),
         DataFile("Caste_examples.csv", "Examples/Caste_examples.csv"))),
    "crows_pairs": DatasetSpec(
        "crows_pairs", "CrowS-Pairs (Nangia et al., 2020)",
        "https://raw.githubusercontent.com/nyu-mll/crows-pairs/master/data/", "https://github.com/nyu-mll/crows-pairs",
        "CC-BY-SA-4.0", (DataFile("crows_pairs_anonymized.csv", "crows_pairs_anonymized.csv"),)),
    "hbb": DatasetSpec(
        "hbb", "Hidden Bias Benchmark: questions, concepts, descriptors",
        "https://raw.githubusercontent.com/JP-25/Hidden-Bias-Benchmark/main/",
        "https://github.com/JP-25/Hidden-Bias-Benchmark", "see the repository",
        (DataFile("questions.csv", "Questions/20241122-2120_all_data_questions074.csv"),
         DataFile("concepts.csv", "concept_lists/modified_all_concepts074.csv"),
         DataFile("descriptors.json", "data/descriptors.json", kind="json"),
         # HBB-SG's released variations (1,547 concept pairs x 10); optional: the benchmark runs without it
         DataFile(_HBB_SG_FILE, _HBB_SG_REMOTE, required=False, kind="hbb_variations"))),
    "hbb_sg": DatasetSpec(
        "hbb_sg", "Hidden Bias Benchmark: the authors' HBB-SG sentence variations (10 per option and concept pair)",
        "https://raw.githubusercontent.com/JP-25/Hidden-Bias-Benchmark/main/",
        "https://github.com/JP-25/Hidden-Bias-Benchmark", "see the repository",
        (DataFile(_HBB_SG_FILE, _HBB_SG_REMOTE, kind="hbb_variations"),)),
    "stereoset": DatasetSpec(
        "stereoset", "StereoSet (Nadeem et al., 2021): the public dev split, intra- and intersentence",
        "https://raw.githubusercontent.com/moinnadeem/StereoSet/master/data/", "https://github.com/moinnadeem/StereoSet",
        "CC-BY-SA-4.0", (DataFile("dev.json", "dev.json", kind="json"),)),
    "cmp_iso": DatasetSpec(
        "cmp_iso", "To Compare, or Not to Compare: iso/cmp prompts (gender, 8 benchmarks)",
        "https://raw.githubusercontent.com/insait-institute/to_cmp_or_not_to_cmp/main/benchmark_exps/",
        "https://github.com/insait-institute/to_cmp_or_not_to_cmp", "Apache-2.0",
        tuple(DataFile(f"{b}_cot_gen.csv" if b != "mmlu" else "mmlu_cot_gen.csv",
                       f"{b}_cot_gen.csv" if b != "mmlu" else "mmlu_cot_gen.csv") for b in _CMP_ISO)
        + (DataFile("LICENSE", "../LICENSE", False, "text"),)),
}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_parse(path: Path, kind: str) -> None:
    """Raise InputError naming the file (and line) if it does not parse as ``kind``."""
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
    elif kind == "hbb_variations":
        from probe.tasks.hbb.data import load_authors_variations

        load_authors_variations(path)  # columns id, s1, s2; ids integers; no empty template
    elif kind == "json":
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise InputError(path, exc.lineno, None, f"not valid JSON ({exc.msg})") from None


def verify(name: str, directory: str | Path) -> dict[str, str]:
    """Check a stored data set: required files present and parseable, hashes as in ``MANIFEST.json``.

    Returns {file: sha256}. Raises :class:`ProbeError` / :class:`InputError` on a problem.
    """
    spec = _spec(name)
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
        _check_parse(p, f.kind)
        hashes[f.name] = sha256_of(p)
        if manifest is not None and manifest["files"].get(f.name) not in (None, hashes[f.name]):
            raise ProbeError(f"data set {name!r}: {f.name} changed since it was fetched (sha256 mismatch)")
    return hashes


def _spec(name: str) -> DatasetSpec:
    if name not in REGISTRY:
        raise ProbeError(f"unknown data set {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


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


def fetch(name: str, source: str | None = None, dest: str | Path | None = None, force: bool = False,
          timeout: float = 60.0) -> Path:
    """Fetch data set ``name`` into ``dest`` (default: the probe cache) and verify it.

    >>> fetch("crows_pairs", source="../shared/data")  # doctest: +SKIP
    """
    from probe.paths import cache_dir

    spec = _spec(name)
    single = source is not None and _is_file_source(spec, source)
    if single and name == "hbb":  # one file given for HBB: the HBB-SG variation set alone
        name, spec = "hbb_sg", _spec("hbb_sg")
    if single and len(spec.files) != 1:
        raise ProbeError(f"data set {name!r} has {len(spec.files)} files: --from must be a directory or base URL, "
                         f"not the single file {source}")
    dest = Path(dest) if dest is not None else cache_dir() / "data" / name
    if dest.is_dir() and not force and (dest / "MANIFEST.json").is_file():
        verify(name, dest)
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
        hashes = verify(name, tmp)
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
