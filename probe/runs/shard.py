"""Data-parallel scoring across processes (``accelerate launch`` / ``torchrun``), merged deterministically.

Started as ``accelerate launch --multi_gpu --num_processes N -m probe.cli score ...``
(or ``torchrun --nproc_per_node N -m probe.cli score ...``), every process reads
the whole input and loads its own copy of the model, then:

1. The work units are the chunks of :func:`probe.runs.chunks.group_chunks`
   (the same chunks a one-process run scores, so a group is never split and
   every chunk is batched exactly as in one process). Chunk ``k`` goes to rank
   ``k % world_size``: the assignment depends only on the input, never on timing.
2. Each rank appends its records to its own crash-safe shard file
   ``<output>.rank{r}-of-{w}.jsonl`` (:class:`~probe.io.RecordWriter`),
   so each shard resumes on its own after a crash.
3. After a barrier, rank 0 merges the shards into ``<output>`` atomically (temp
   file + rename) in the order a one-process run writes records, keeps every
   record ``<output>`` already held, and deletes the shard files only once the
   merged file is durable.

Items already recorded anywhere (``<output>``, or any shard file, including
shards of an earlier run with another number of processes) are never scored
again. With one process (no ``WORLD_SIZE`` in the environment, or 1) nothing
here is used and ``probe score`` behaves exactly as before.

>>> from types import SimpleNamespace as R
>>> rs = [R(id=f"q{i}", group=None) for i in range(5)]
>>> [[[r.id for r in c] for c in rank_chunks(rs, 2, rank, 2)] for rank in (0, 1)]
[[['q0', 'q1'], ['q4']], [['q2', 'q3']]]
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence


import torch
import torch.distributed as dist

from probe.errors import InputError, ProbeError
from probe.io import RecordWriter, read_records, write_atomic
from probe.runs.chunks import group_chunks, write_chunks
from probe.runs.resume import check_input

#: ``<output>.rank{r}-of-{w}.jsonl``; ``r`` and ``w`` are decimal.
_SHARD_SUFFIX = re.compile(r"\.rank(\d+)-of-(\d+)\.jsonl$")

#: How long a rank waits at a barrier for the others. Ranks finish their shares
#: at different times (a long item, a slower GPU), so this must exceed the
#: longest imbalance of a run, not a network round trip. Override with
#: ``PROBE_DIST_TIMEOUT_S``.
DEFAULT_TIMEOUT_S = 7 * 24 * 3600


@dataclass(frozen=True)
class Processes:
    """This process's place in the process group; ``world_size == 1`` means no group."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        """Wait until every rank gets here (no-op for one process)."""
        if not self.distributed:
            return

        dist.barrier()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """``obj`` of rank ``src``, on every rank (any picklable object; itself for one process)."""
        if not self.distributed:
            return obj

        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        if not self.distributed:
            return [obj]

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def device(self, requested: str) -> str:
        """The device this rank loads its model on.

        ``cuda`` and ``auto`` (with a GPU) become ``cuda:{local_rank}``, one GPU
        per process; with fewer GPUs than processes on a machine they are shared
        round-robin (``local_rank % n_gpus``: fine for small models). An
        explicit ``cuda:N`` or ``cpu`` is kept as given.
        """
        if not self.distributed or requested not in ("cuda", "auto"):
            return requested

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if requested == "auto" and not n:
            return "cpu"
        return f"cuda:{self.local_rank % n if n else self.local_rank}"


def detect() -> Processes:
    """Read rank and world size from the variables ``accelerate launch`` / ``torchrun`` set.

    ``WORLD_SIZE`` unset or 1 gives a one-process :class:`Processes`.
    """
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError as exc:
        raise ProbeError(f"bad process-group environment (RANK/WORLD_SIZE/LOCAL_RANK): {exc}") from None
    if world < 1 or not 0 <= rank < world:
        raise ProbeError(f"bad process-group environment: RANK={rank} WORLD_SIZE={world}")
    return Processes(rank=rank, world_size=world, local_rank=local)


class process_group:
    """Context manager: join the gloo group of a multi-process launch, leave it at exit.

    The group only carries barriers, so gloo (CPU) is used on GPU machines too:
    no tensor moves between processes and NCCL's device binding is not needed.
    Reuses a group someone else already initialized (and then leaves it alone).

    >>> with process_group(Processes()) as procs:  # one process: nothing to join
    ...     procs.world_size
    1
    """

    def __init__(self, procs: Processes) -> None:
        self.procs = procs
        self._owned = False

    def __enter__(self) -> Processes:
        if self.procs.distributed:

            if not dist.is_initialized():
                timeout = float(os.environ.get("PROBE_DIST_TIMEOUT_S", DEFAULT_TIMEOUT_S))
                dist.init_process_group(
                    "gloo", init_method="env://", rank=self.procs.rank, world_size=self.procs.world_size,
                    timeout=_dt.timedelta(seconds=timeout),
                )
                self._owned = True
        return self.procs

    def __exit__(self, *exc: object) -> None:
        if self._owned:

            dist.destroy_process_group()


# --------------------------------------------------------------------------- assignment


def rank_chunks(requests: Sequence[Any], chunk: int, rank: int, world_size: int) -> list[list[Any]]:
    """The chunks rank ``rank`` of ``world_size`` scores: every ``world_size``-th chunk from ``rank`` on.

    Chunks are those of a one-process run (:func:`~probe.runs.chunks.group_chunks`),
    so each is scored, and batched, exactly as one process scores it.
    """

    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside 0..{world_size - 1}")
    return group_chunks(requests, chunk)[rank::world_size]


def record_order(requests: Sequence[Any]) -> list[str]:
    """Ids in the order a one-process run writes their records.

    That is input order, except that a group's members follow its first member
    (``group_chunks`` keeps them together); it does not depend on the chunk size.
    """

    return [str(r.id) for part in group_chunks(requests, max(len(requests), 1)) for r in part]


# --------------------------------------------------------------------------- files


def shard_path(output: Path, rank: int, world_size: int) -> Path:
    """``<output>.rank{rank}-of-{world_size}.jsonl``."""
    return output.with_name(f"{output.name}.rank{rank}-of-{world_size}.jsonl")


def shard_files(output: Path) -> list[Path]:
    """Existing shard files of ``output`` (any world size), sorted by (world size, rank)."""
    if not output.parent.is_dir():
        return []
    found = []
    prefix = output.name
    for p in output.parent.iterdir():
        if not p.name.startswith(prefix):
            continue
        m = _SHARD_SUFFIX.fullmatch(p.name[len(prefix):])
        if m and p.is_file():
            found.append(((int(m.group(2)), int(m.group(1))), p))
    return [p for _, p in sorted(found)]


def launcher_shard_files(output: Path) -> list[Path]:
    """Shard files of ``output`` left by a launcher's ranks (not those of ``--shard`` processes, which carry a
    ``.shard.json`` manifest and are folded by :mod:`probe.runs.shard_set` only as complete sets)."""
    return [p for p in shard_files(output) if not p.with_name(p.name + ".shard.json").is_file()]


def _read(path: Path) -> Iterator[tuple[int, dict, bytes]]:
    """``(line_number, record, raw_line)`` of the complete records of ``path`` (a torn tail is skipped)."""

    if path.exists() and not path.is_file():
        raise InputError(path, None, None, "output path exists and is not a file (a directory?)")
    records, good = read_records(path)
    if not records:
        return
    raw = path.read_bytes()[:good].split(b"\n")[:-1]
    for n, (rec, line) in enumerate(zip(records, raw), start=1):
        if "id" not in rec:
            raise InputError(path, n, "id", "record without an id")
        yield n, rec, line


def recorded_ids(output: Path) -> set[str]:
    """Ids with a record in ``output`` or in any of its launcher shard files."""
    done = {str(rec["id"]) for _, rec, _ in _read(output)}
    for shard in launcher_shard_files(output):
        done.update(str(rec["id"]) for _, rec, _ in _read(shard))
    return done


def merge_shards(output: Path, requests: Sequence[Any], shards: Sequence[Path] | None = None,
                 order: Sequence[str] | None = None) -> int:
    """Fold every launcher shard file of ``output`` into ``output``; return how many records were added.

    ``shards``: these shard files instead; ``order``: the one-process record
    order as ids (instead of :func:`record_order` of ``requests``).

    ``output`` keeps its records byte for byte, first; the new records follow in
    :func:`record_order` (then records of ids not in ``requests``, in shard
    order, so no scored work is dropped). A shard record whose id ``output``
    already holds is skipped: that is what a crash after the merge but before
    the shard files were deleted leaves behind. The same id in two shard files
    is an error (two runs wrote into one output at once). The new file replaces
    ``output`` atomically; shard files are deleted only after it is durable.
    Not safe to call while a rank is still writing its shard.
    """

    shards = launcher_shard_files(output) if shards is None else list(shards)
    if not shards:
        return 0
    kept: list[bytes] = []
    have: set[str] = set()
    for _, rec, line in _read(output):
        kept.append(line)
        have.add(str(rec["id"]))
    new: dict[str, bytes] = {}
    where: dict[str, Path] = {}
    for shard in shards:
        for n, rec, line in _read(shard):
            rid = str(rec["id"])
            if rid in where:
                raise InputError(shard, n, "id", f"duplicate id {rid!r}: also recorded in {where[rid]}; "
                                 "two runs wrote to this output at once? move the shard files away to start over")
            where[rid] = shard
            if rid not in have:
                new[rid] = line
    if new:
        order = [rid for rid in (record_order(requests) if order is None else order) if rid in new]
        known = set(order)
        order += [rid for rid in new if rid not in known]
        text = b"".join(line + b"\n" for line in kept + [new[rid] for rid in order])
        write_atomic(output, text.decode("utf-8"))
        _fsync_dir(output.parent)  # the rename itself must be durable before the shards go
    for shard in shards:
        shard.unlink()
    return len(new)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- scoring


def score_sharded(runner: Any, requests: Sequence[Any], output: Path, procs: Processes,
                  make: Callable[[list], Iterable[dict]], chunk: int = 256, progress: bool = True) -> int:
    """Score this rank's share into its shard, wait for all ranks, merge on rank 0.

    Returns the number of records the merge added to ``output`` on rank 0 and
    the number this rank scored on the others. Call from every rank, inside
    :class:`process_group`. Records equal those of a one-process run with the
    same ``chunk`` (the same chunks are scored whole by the same code).
    """

    if chunk < 1:
        raise ValueError("chunk must be positive")
    mine = rank_chunks(requests, chunk, procs.rank, procs.world_size)
    n_chunks = len(group_chunks(requests, chunk))
    if procs.is_main and n_chunks < procs.world_size:
        # Work is dealt in whole chunks (that is what keeps the numbers equal to a
        # one-process run), so a small input can leave processes with nothing to do.
        print(f"probe: warning: {len(requests)} item(s) make {n_chunks} chunk(s) of --flush-every {chunk} for "
              f"{procs.world_size} processes; {procs.world_size - n_chunks} will idle. Lower --flush-every to "
              "spread the work (numbers then match a one-process run with the same --flush-every).", file=sys.stderr)
    done = _agreed_done(runner, requests, output, procs)
    procs.barrier()
    path = shard_path(output, procs.rank, procs.world_size)
    todo = [part for part in mine if any(str(r.id) not in done for r in part)]
    scored = 0
    if todo:
        bar = None
        if progress and procs.is_main:  # one bar; several processes would garble one terminal
            from tqdm.auto import tqdm

            bar = tqdm(total=sum(str(r.id) not in done for p in todo for r in p), unit="item",
                       desc=f"scoring (rank 0 of {procs.world_size}) -> {output.name}")
        with RecordWriter(path) as writer:
            scored += write_chunks(writer, todo, make, done, bar)
        if bar:
            bar.close()
    procs.barrier()  # every shard is complete and closed
    sent = gather_shards(output, procs)  # shards rank 0 cannot see (no shared filesystem) come over the group
    added = merge_shards(output, requests) if procs.is_main else scored
    if sent:
        procs.barrier()  # rank 0's merge is durable: a shard it received is no longer needed on its own node
        if procs.rank in sent and not procs.is_main:
            shard_path(output, procs.rank, procs.world_size).unlink(missing_ok=True)
    return added


def _agreed_done(runner: Any, requests: Sequence[Any], output: Path, procs: Processes) -> set[str]:
    """The ids already recorded, as rank 0 sees them, on every rank; a refusal on rank 0 stops every rank."""

    # Rank 0's view of what is recorded is the skip set of every rank (sent over the process group:
    # another node may not see rank 0's files). Records from another model or another request under
    # the same id are refused, as in one process; rank 0 alone checks and writes ``<output>.input.json``;
    # every rank must have loaded the same model.
    done: set[str] = set()
    refused = None
    if procs.is_main:
        try:
            done = recorded_ids(output)
            check_input(output, done, requests, runner, write=True)
        except ProbeError as exc:  # every rank stops with it (none may wait at a collective for rank 0)
            refused = exc
    sent = procs.broadcast((sorted(done), None if refused is None else str(refused)))
    if refused is not None:
        raise refused
    if sent[1] is not None:
        raise ProbeError(sent[1])
    done = set(sent[0])
    prints = procs.all_gather(getattr(runner, "fingerprint", None))
    if len(set(prints)) > 1:
        raise ProbeError(f"the {procs.world_size} processes loaded different models or model settings "
                         f"(fingerprints {', '.join(str(f)[:12] for f in prints)}); every rank must load the same")
    return done


def _digest(path: Path) -> tuple[int, str] | None:
    if not path.is_file():
        return None
    data = path.read_bytes()
    return len(data), hashlib.sha256(data).hexdigest()


def gather_shards(output: Path, procs: Processes) -> list[int]:
    """Copy to rank 0, over the process group, every rank's shard file that rank 0 does not see as written.

    With a shared filesystem rank 0 sees each shard byte for byte and nothing
    moves; across nodes without one (each its own disk) the shard's bytes are
    sent (gloo) and written beside ``output`` on rank 0. Returns the ranks sent.
    """
    if not procs.distributed:
        return []

    mine = _digest(shard_path(output, procs.rank, procs.world_size))
    infos = procs.all_gather(mine)
    need = []
    if procs.is_main:
        need = [r for r, info in enumerate(infos)
                if info is not None and _digest(shard_path(output, r, procs.world_size)) != info]
    need = procs.broadcast(need)
    for r in need:
        data = procs.broadcast(shard_path(output, r, procs.world_size).read_bytes() if procs.rank == r else None, src=r)
        if procs.is_main:
            write_atomic(shard_path(output, r, procs.world_size), data.decode("utf-8"))
    return need


def shared_records(output: Path, procs: Processes) -> list[dict]:
    """The records of ``output`` as rank 0 holds them, on every rank (sent when a rank's copy differs)."""

    if not procs.distributed:
        return read_records(output)[0]
    want = procs.broadcast(_digest(output) if procs.is_main else None)
    need = procs.all_gather(_digest(output) != want)
    if not any(need):
        return read_records(output)[0]
    data = procs.broadcast(output.read_bytes() if procs.is_main else None)
    if not need[procs.rank]:
        return read_records(output)[0]

    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
