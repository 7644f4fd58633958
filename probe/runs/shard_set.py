"""Independent shards: ``--shard i/N`` scores one share of a run in a process with no process group.

A job array (Slurm ``--array``, submitit, Ray tasks) starts N plain processes,
each with ``--shard i/N`` (``0 <= i < N``) and the same command otherwise. Each
scores exactly the chunks rank ``i`` of an N-process launch would score
(:func:`probe.runs.shard.rank_chunks`: the chunks of a one-process run, dealt
round-robin), into the files

- ``<output>.rank{i}-of-{N}.jsonl``: its records (crash-safe, resumable);
- ``<output>.rank{i}-of-{N}.jsonl.input.json``: the model and request check of
  those records (:func:`probe.runs.resume.check_input`);
- ``<output>.rank{i}-of-{N}.jsonl.shard.json``: the shard manifest: the shard,
  the chunk size, the model fingerprint, every id in one-process record order,
  whether the shard finished (``complete``), and its timing and engine counts.

and then stops (:class:`probe.runs.sharding.ShardPending`, exit status 0). No shard waits for another
and none needs to see the others' files while it runs.

Folding (:func:`fold`: a later run of the same command without ``--shard``, or
``probe merge DIR``) takes every *complete* set (shards ``0..N-1`` of one N,
each marked complete), checks that all were scored by one model with one set of
request digests and one record order (else refuses, naming the files), writes
``<output>.input.json`` and appends the shard records to ``<output>`` in
one-process order: the result is byte-identical to a one-process run with the
same chunk size. Shard files of an unfinished set are never folded: a plain run
refuses (they may still be running) and ``probe merge`` leaves them and says so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from probe.errors import ProbeError
from probe.io import RecordWriter, check_links, check_records, file_sha256, open_append, read_records, write_json_atomic
from probe.runs.chunks import write_chunks
from probe.runs.resume import check_input, input_sidecar
from probe.runs.shard import _read, merge_shards, rank_chunks, record_order, shard_files, shard_path

MANIFEST_FORMAT = 1
MANIFEST_SUFFIX = ".shard.json"
_SPEC = re.compile(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*")  # ASCII digits: \d also takes full-width and other scripts' digits


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based: ``--shard 0/4`` .. ``--shard 3/4``).

    >>> Shard.parse("1/4"), str(Shard(1, 4))
    (Shard(index=1, count=4), '1/4')
    """

    index: int
    count: int

    @classmethod
    def parse(cls, text: Any) -> "Shard":
        if isinstance(text, Shard):
            return text
        m = _SPEC.fullmatch(str(text))
        if not m:
            raise ValueError(f"shard must be I/N with 0 <= I < N (e.g. 0/4), got {text!r}")
        index, count = int(m.group(1)), int(m.group(2))
        if count < 1 or not 0 <= index < count:
            raise ValueError(f"shard {text!r}: need 0 <= I < N (shards of N are 0/N .. {max(count, 1) - 1}/N)")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def manifest_path(shard_file: Path) -> Path:
    """``<output>.rank{i}-of-{N}.jsonl.shard.json``."""
    return shard_file.with_name(shard_file.name + MANIFEST_SUFFIX)


def independent_shards(output: Path) -> list[Path]:
    """Shard files of ``output`` written by ``--shard`` processes (they have a manifest)."""

    return [p for p in shard_files(output) if manifest_path(p).is_file()]


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return data
    except (OSError, ValueError) as exc:
        raise ProbeError(f"{path} is unreadable ({exc}); delete it and its shard files to score that shard again") from None


# --------------------------------------------------------------------------- scoring one shard


def held_records(output: Path, requests: Sequence[Any], runner: Any) -> dict[str, dict]:
    """The records of ``output`` and of its complete shard sets, by id, read without writing anything (other
    shard processes may be reading too); each set's records checked against this run's model and input."""

    by_id = {str(r["id"]): r for r in read_records(output)[0]} if output.is_file() else {}
    for members in shard_sets(output)[0].values():
        for path, _ in members:
            check_input(path, {str(r["id"]) for r in read_records(path)[0]}, requests, runner, write=False)
            for rec in read_records(path)[0]:
                by_id.setdefault(str(rec["id"]), rec)
    return by_id


def score_shard(runner: Any, requests: Sequence[Any], output: Path, shard: Shard,
                make: Callable[[list], Iterable[dict]], chunk: int, progress: bool = True) -> int:
    """Score shard ``shard`` of ``requests`` into its own files; return how many records it added.

    Chunks whose every id ``output`` already holds are skipped (a set folded
    before). The manifest is written before the first record (``complete``
    false) and again after the last (``complete`` true).
    """

    if runner.procs.distributed:
        raise ProbeError(f"--shard {shard} runs one process of a job array, without a process group; under "
                         "accelerate launch / torchrun drop --shard (the launcher shards by itself)")
    output.parent.mkdir(parents=True, exist_ok=True)
    in_output = {str(r["id"]) for r in read_records(output)[0]} if output.is_file() else set()
    if in_output:  # the records already folded in must come from this model and input
        check_input(output, in_output, requests, runner, write=False)
    path = shard_path(output, shard.index, shard.count)
    mine = rank_chunks(requests, chunk, shard.index, shard.count)
    manifest = {"format": MANIFEST_FORMAT, "shard": [shard.index, shard.count], "chunk_size": chunk,
                "model_fingerprint": runner.fingerprint, "model": str(getattr(runner.lm, "name", "")),
                "ids": record_order(requests), "assigned": [str(r.id) for part in mine for r in part]}
    man = manifest_path(path)
    if man.is_file():
        old = _read_json(man)
        for key in ("chunk_size", "model_fingerprint", "ids"):
            if old.get(key) != manifest[key]:
                raise ProbeError(f"{man}: shard {shard} was started with another {key.replace('_', ' ')} "
                                 f"({_brief(old.get(key))} -> {_brief(manifest[key])}); every shard of a set must "
                                 f"run the same command. Delete {path} and its .input.json/.shard.json to start it over")
    earlier = _read_json(man) if man.is_file() else {}  # an interrupted or repeated run of this shard
    scored = 0
    stats_before = _engine_counts(runner)
    with RecordWriter(path) as writer:
        check_input(path, writer.done, requests, runner)
        write_json_atomic(man, {**manifest, "complete": False, "timing": earlier.get("timing", {}),
                                "engine": earlier.get("engine", {})})
        done = in_output | writer.done
        todo = [part for part in mine if any(str(r.id) not in done for r in part)]
        bar = None
        if progress and todo:
            import sys

            from tqdm.auto import tqdm

            bar = tqdm(total=sum(str(r.id) not in done for p in todo for r in p), unit="req",
                       desc=f"shard {shard} -> {path.name}", file=sys.stderr)
        scored += write_chunks(writer, todo, make, done, bar)
        if bar:
            bar.close()
    open_append(path).close()  # a shard dealt no chunk (fewer chunks than shards) still leaves its (empty) file
    write_json_atomic(man, {**manifest, "complete": True, **_content(path),
                            "timing": _add_timing(earlier.get("timing", {}), runner.timing),
                            "engine": _add_counts(earlier.get("engine", {}),
                                                  _diff(_engine_counts(runner), stats_before))})
    return scored


def _content(path: Path) -> dict[str, Any]:
    """What a finished shard holds: ``n_records`` and the ``sha256`` of its file, checked before it is folded."""

    return {"n_records": sum(1 for _ in _read(path)), "sha256": file_sha256(path)}


def check_content(path: Path, man: dict, in_output: set[str]) -> None:
    """A finished shard still holds what its manifest says, else a :class:`ProbeError` naming the shard (and the
    missing ids): every id it was dealt is in it (or already in the output), its record count and its checksum.
    A record lost from its file (a last line cut off, a middle line deleted) would otherwise be folded away
    silently and scored again, out of one-process order, by the next run."""

    ids = [str(rec["id"]) for _, rec, _ in _read(path)]
    have = set(ids)
    label = f"{path} (shard {'/'.join(map(str, man.get('shard', [])))})"
    missing = [i for i in man.get("assigned", []) if i not in have and i not in in_output]
    fix = ("nothing was folded; run that shard again (the same command with its --shard I/N) to score what it "
           "lost, or delete its files to score those items in the plain run")
    if missing:
        shown = ", ".join(map(repr, missing[:5])) + (", ..." if len(missing) > 5 else "")
        raise ProbeError(f"{label} is missing {len(missing)} record(s) its manifest lists: {shown}; {fix}")
    known = set(man.get("assigned", []))
    foreign = [i for i in ids if i not in known]
    if foreign:
        raise ProbeError(f"{label} holds {len(foreign)} record(s) its manifest does not assign to it "
                         f"({', '.join(map(repr, foreign[:5]))}); {fix}")
    if "n_records" in man and man["n_records"] != len(ids):
        raise ProbeError(f"{label} holds {len(ids)} record(s), its manifest {man['n_records']}; {fix}")
    if "sha256" in man and man["sha256"] != file_sha256(path):
        raise ProbeError(f"{label}: its records changed after it finished (the checksum in "
                         f"{manifest_path(path).name} no longer matches); {fix}")


def _brief(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _engine_counts(runner: Any) -> dict[str, int]:
    engine = getattr(getattr(runner, "scorer", None), "engine", None)
    return dict(engine.counts()) if engine is not None and hasattr(engine, "counts") else {}


def _diff(now: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in now.items()}


def _add_counts(old: dict, now: dict) -> dict:
    return {k: int(old.get(k, 0)) + int(now.get(k, 0)) for k in {**old, **now}}


def _add_timing(old: dict, now: dict) -> dict:
    out = {k: dict(v) for k, v in old.items()}
    for kind, t in now.items():
        acc = out.setdefault(kind, {"n": 0, "seconds": 0.0})
        acc["n"] += t["n"]
        acc["seconds"] += t["seconds"]
    return out


# --------------------------------------------------------------------------- folding


@dataclass
class FoldResult:
    """What :func:`fold` did for one output."""

    output: Path
    added: int = 0
    folded: list[str] | None = None  # the sets folded, as "N" strings
    shards: list[dict] | None = None  # per folded shard: shard, timing, engine counts (as in <output>.shards.json)
    waiting: list[str] | None = None  # shards of unfinished sets, as "i/N"


def shard_sets(output: Path) -> tuple[dict[int, list[tuple[Path, dict]]], list[str]]:
    """``({N: [(shard file, manifest), ...] for complete sets}, ["i/N" of shards still missing or unfinished])``."""
    by_count: dict[int, dict[int, tuple[Path, dict]]] = {}
    for path in independent_shards(output):
        man = _read_json(manifest_path(path))
        try:
            index, count = (int(x) for x in man["shard"])
        except (KeyError, TypeError, ValueError):
            raise ProbeError(f"{manifest_path(path)}: not a shard manifest (no shard: [i, N])") from None
        by_count.setdefault(count, {})[index] = (path, man)
    complete: dict[int, list[tuple[Path, dict]]] = {}
    waiting: list[str] = []
    for count, members in sorted(by_count.items()):
        missing = [f"{i}/{count}" for i in range(count) if i not in members or not members[i][1].get("complete")]
        if missing:
            waiting += missing
        else:
            complete[count] = [members[i] for i in range(count)]
    return complete, waiting


def fold(output: Path, runner: Any = None, requests: Sequence[Any] | None = None) -> FoldResult:
    """Fold every complete set of independent shards of ``output`` into it (see the module docstring).

    With ``runner`` and ``requests`` (a plain run), each shard's records are
    first checked against this run's model and input, as a resume is. Refuses
    (naming the files) shards of two models, two inputs or two record orders, and
    a shard whose records no longer match its manifest (:func:`check_content`);
    every check comes before anything is written or deleted.
    """
    return _apply(_prepare(output, runner, requests))


@dataclass
class _Fold:
    """A fold checked and ready to write (:func:`_prepare`), or nothing to do (``members`` empty)."""

    result: FoldResult
    members: list[tuple[Path, dict]]
    sidecar: dict | None = None
    order: list[str] | None = None
    complete: dict[int, list[tuple[Path, dict]]] | None = None


def _prepare(output: Path, runner: Any = None, requests: Sequence[Any] | None = None) -> _Fold:
    """Every check of :func:`fold`, writing nothing."""

    complete, waiting = shard_sets(output)
    result = FoldResult(output, added=0, folded=[], waiting=waiting)
    if not complete:
        return _Fold(result, [])
    members = [m for count in sorted(complete) for m in complete[count]]
    first_path, first = members[0]
    _check_target(output, first_path)
    sidecar = input_sidecar(output)
    old = _read_json(sidecar) if sidecar.is_file() else None
    in_output = {str(rec["id"]) for _, rec, _ in _read(output)} if output.is_file() else set()
    if in_output and old is None:
        raise ProbeError(f"{output} holds records but {sidecar} is missing, so the shards cannot be checked "
                         "against them; move the output away to fold the shards into a new one")
    model = old["model"] if old is not None else None
    sampling = old.get("sampling", []) if old is not None else None
    digests: dict[str, str] = dict(old["requests"]) if old is not None else {}
    where: dict[str, Path] = {i: sidecar for i in digests}
    order = first["ids"]
    for path, man in members:
        if man.get("ids") != order:
            raise ProbeError(f"{manifest_path(path)} and {manifest_path(first_path)} list other request ids or "
                             "another order: these shards come from different inputs and cannot be merged")
        check_content(path, man, in_output)
        side = _read_json(input_sidecar(path))
        if model is None:
            model, sampling, model_from = side.get("model"), side.get("sampling", []), input_sidecar(path)
        else:
            model_from = sidecar if old is not None else input_sidecar(first_path)
        if side.get("model", {}).get("fingerprint") != (model or {}).get("fingerprint"):
            raise ProbeError(f"{path} was scored by {side.get('model', {}).get('name')} "
                             f"(fingerprint {str(side.get('model', {}).get('fingerprint'))[:12]}), {model_from} by "
                             f"{(model or {}).get('name')} (fingerprint {str((model or {}).get('fingerprint'))[:12]}): "
                             "refusing to merge two models' records")
        if side.get("sampling", []) != sampling:
            raise ProbeError(f"{path} was scored with other sampling specs than {model_from}; refusing to merge")
        for rid, digest in side.get("requests", {}).items():
            if digests.setdefault(rid, digest) != digest:
                raise ProbeError(f"{path}: request {rid!r} differs from the one in {where[rid]} (another input); "
                                 "refusing to merge")
            where.setdefault(rid, input_sidecar(path))
    if runner is not None and requests is not None:
        for path, _ in members:  # this run's model and input, as a resume checks them
            ids = {str(rec["id"]) for _, rec, _ in _read(path)}
            check_input(path, ids, requests, runner, write=False)
    side = {"format": 1, "model": model, "requests": digests, **({"sampling": sampling} if sampling else {})}
    return _Fold(result, members, side, order, complete)


def _check_target(output: Path, shard: Path) -> None:
    """The output a fold writes is probe's: absent, or records of the shards' task; a link at it or its
    sidecars, or a user's file there, is refused before anything is folded (:func:`probe.io.check_records`)."""

    task = next((rec.get("task") for _, rec, _ in _read(shard)), None)
    check_records(output, task if isinstance(task, str) else None, hint="nothing was folded; move it away to "
                  "fold the shards into a new output")
    check_links(output.parent, output.name + ".")


def _apply(plan: _Fold) -> FoldResult:
    """Write a fold :func:`_prepare` checked: the sidecar, the records in one-process order, the shard log."""

    result = plan.result
    if not plan.members:
        return result
    output = result.output
    # the sidecar first: every record in <output> is then covered by it
    write_json_atomic(input_sidecar(output), plan.sidecar)
    result.added = merge_shards(output, (), shards=[p for p, _ in plan.members], order=plan.order)
    result.shards = _log_shards(output, plan.members)
    for path, _ in plan.members:
        input_sidecar(path).unlink(missing_ok=True)
        manifest_path(path).unlink(missing_ok=True)
    result.folded = [str(c) for c in sorted(plan.complete or {})]
    return result


def shards_log(output: Path) -> Path:
    """``<output>.shards.json``: per folded shard its timing and engine counts (appended by every fold)."""
    return output.with_name(output.name + ".shards.json")


def _log_shards(output: Path, members: list[tuple[Path, dict]]) -> list[dict]:
    log = shards_log(output)
    entries = _read_json(log).get("shards", []) if log.is_file() else []
    new = [{"shard": man["shard"], "file": path.name, "n_assigned": len(man.get("assigned", [])),
            "timing": man.get("timing", {}), "engine": man.get("engine", {})} for path, man in members]
    write_json_atomic(log, {"format": 1, "shards": entries + new})
    return new


def fold_for_run(output: Path, runner: Any, requests: Sequence[Any]) -> int:
    """A plain run's fold: complete sets are folded in; shards still missing or unfinished are refused.
    The folded shards' timing and engine counts join the runner's (``runner.other_work``)."""
    result = fold(output, runner, requests)
    if result.shards and hasattr(runner, "other_work"):
        runner.other_work += [{"shard": e["shard"], "timing": e["timing"], "engine": e["engine"]}
                              for e in result.shards]
    if result.waiting:
        raise ProbeError(
            f"{output}: shard(s) {', '.join(result.waiting)} are not finished (still running, failed, or never "
            "started). Run them (the same command with --shard I/N), or delete their files "
            f"({output.name}.rankI-of-N.jsonl*) to score their items here")
    return result.added


def fold_tree(root: Path) -> list[FoldResult]:
    """:func:`fold` for every output under ``root`` (a file or a directory, searched recursively)."""
    root = Path(root)
    if not root.is_dir():  # one output (it need not exist yet: its shards may be all there is)
        if not independent_shards(root):
            if not root.exists():
                raise ProbeError(f"{root}: no such file or directory")
            return []
        outputs = {root}
    else:
        outputs = set()
        for f in sorted(root.rglob("*" + MANIFEST_SUFFIX)):
            m = re.fullmatch(r"(.+)\.rank\d+-of-\d+\.jsonl" + re.escape(MANIFEST_SUFFIX), f.name)
            if m:
                outputs.add(f.with_name(m.group(1)))
    plans = [_prepare(out) for out in sorted(outputs)]  # every output checked before any is folded
    return [_apply(plan) for plan in plans]
