"""The file protocol of a Runner output (``records.jsonl``, ``generations.jsonl``, ``parsed.jsonl``, ...).

Every :class:`~probe.runs.runner.Runner` call with an output writes it through
:func:`write`, in one of three regimes:

- **one process** (:func:`one_process`): complete ``--shard`` sets and the shard
  files a launcher's interrupted ranks left are folded in first (their work is
  kept), then the records the output lacks are appended chunk by chunk
  (:func:`append`; crash-safe, resumable, byte-identical to an uninterrupted run);
- **a launcher's ranks** (:func:`launched`; ``accelerate launch`` /
  ``torchrun``): each rank scores its chunks into its own shard file, rank 0
  merges them, every rank gets rank 0's records (:mod:`probe.runs.shard`);
- **one shard of a job array** (:func:`job_shard`; ``--shard I/N``): this
  process scores its chunks into its own files and stops; once every shard of
  the set has finished, the records are read from the shard files without
  writing anything (:mod:`probe.runs.shard_set`).

Each returns every request's record in request order, except a job-array shard
whose set is not complete yet: it returns a :class:`ShardPending` (its share is
written; the run goes on in a later run). Nothing here raises to say so.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from probe.errors import ProbeError
from probe.io import RecordWriter, read_records
from probe.runs.chunks import group_chunks
from probe.runs.resume import check_input, input_sidecar
from probe.runs.shard import (launcher_shard_files, merge_shards, process_group, recorded_ids, score_sharded,
    shared_records)
from probe.runs.shard_set import fold_for_run, held_records, independent_shards, score_shard

__all__ = ["Make", "ShardPending", "append", "job_shard", "launched", "one_process", "write"]

#: turns one chunk of requests into its record dicts (scores, generations, parsed distributions)
Make = Callable[[list], Iterable[dict]]


@dataclass(frozen=True)
class ShardPending:
    """A ``--shard I/N`` process wrote its share; the run goes on once the set is folded. Not an error.

    >>> str(ShardPending("shard 0/2 of out.jsonl: 3 new record(s)"))
    'shard 0/2 of out.jsonl: 3 new record(s)'
    """

    message: str

    def __str__(self) -> str:
        return self.message


def write(runner: Any, requests: Sequence[Any], output: Path, make: Make, progress: bool, verb: str,
          also_done: set[str] | None = None) -> list[dict] | ShardPending:
    """Append to ``output`` the records of the requests it lacks, as this process's regime says; return
    every request's record in request order (a :class:`ShardPending` for an unfinished job-array set).

    ``also_done``: ids another store holds (captured activations); a request is done when in both."""
    if runner.shard is not None:
        return job_shard(runner, requests, output, make, progress)
    if runner.procs.distributed:
        records = launched(runner, requests, output, make, progress)
    else:
        one_process(runner, requests, output, make, progress, verb, also_done)
        records = None
    return in_order(output, requests, records)


def in_order(output: Path, requests: Sequence[Any], records: list[dict] | None = None) -> list[dict]:
    """Every request's record (from ``records``, else from ``output``), in request order."""

    by_id = {str(r["id"]): r for r in (records if records is not None else read_records(output)[0])}
    missing = [r.id for r in requests if r.id not in by_id]
    if missing:  # pragma: no cover - would be a runner bug
        raise ProbeError(f"{output}: {len(missing)} request(s) have no record after the run, e.g. {missing[:3]}")
    return [by_id[r.id] for r in requests]


def job_shard(runner: Any, requests: Sequence[Any], output: Path, make: Make,
              progress: bool) -> list[dict] | ShardPending:
    """``--shard I/N``: the records, when ``output`` and the complete shard sets hold every request (a
    multi-stage task goes on to its next stage); else this shard's chunks scored into its files."""

    by_id = held_records(output, requests, runner)
    if any(str(r.id) not in by_id for r in requests):
        shard = runner.shard
        n = score_shard(runner, requests, output, shard, make, runner.options.chunk_size, progress)
        return ShardPending(f"shard {shard} of {output}: {n} new record(s) in {output.name}.rank{shard.index}-of-"
                            f"{shard.count}.jsonl. When all {shard.count} shards have finished, run the same "
                            f"command without --shard (or `probe merge {output.parent}`) to fold them in")
    return [by_id[str(r.id)] for r in requests]


def launched(runner: Any, requests: Sequence[Any], output: Path, make: Make, progress: bool) -> list[dict]:
    """A launcher's ranks: this rank's share into its shard file, rank 0 merges; rank 0's records on every
    rank, and every rank's timing and engine counts in ``runner.other_work``."""

    if independent_shards(output):
        raise ProbeError(f"{output} has shard files of --shard processes; fold them first (`probe merge "
                         f"{output.parent}`, or one run without a launcher), then launch")
    procs = runner.procs
    with process_group(procs):
        score_sharded(runner, requests, output, procs, make=make, chunk=runner.options.chunk_size,
                      progress=progress)
        procs.barrier()  # rank 0 has merged the shards: every rank may read the output
        # rank 0's records on every rank (sent over the group to a node that does not share its disk)
        records = shared_records(output, procs)
        # every rank's timing and engine counts so far (cumulative: the last output's gather has them all)
        ranks = procs.all_gather({"rank": procs.rank, "timing": runner.timing,
                                  "engine": runner.scorer.engine.counts()})
    runner.other_work = [w for w in runner.other_work if "rank" not in w]
    runner.other_work += [w for w in ranks if w is not None and w["rank"] != procs.rank]
    return records


def one_process(runner: Any, requests: Sequence[Any], output: Path, make: Make, progress: bool, verb: str,
                also_done: set[str] | None = None) -> int:
    """One process: shards left beside ``output`` folded in first, then the records it lacks appended."""

    if independent_shards(output):
        fold_for_run(output, runner, requests)
    if launcher_shard_files(output):
        # shards left by an interrupted multi-process run are folded in first (their work
        # is kept), after checking that they came from this model and input
        check_input(output, recorded_ids(output), requests, runner, write=False)
        merge_shards(output, requests)
    return append(runner, requests, output, make, progress, verb, also_done)


def append(runner: Any, requests: Sequence[Any], output: Path, make: Make, progress: bool, verb: str,
           also_done: set[str] | None = None) -> int:
    """Append the records of the requests ``output`` lacks, chunk by chunk; return how many were added."""

    with RecordWriter(output) as writer:
        check_input(output, writer.done, requests, runner)
        try:
            return _append_todo(runner, requests, output, make, progress, verb, writer, also_done)
        except BaseException:
            if not writer.done:  # no record was written: an input check of no records is not left behind
                input_sidecar(output).unlink(missing_ok=True)
            raise


def _append_todo(runner: Any, requests: Sequence[Any], output: Path, make: Make, progress: bool, verb: str,
                 writer: Any, also_done: set[str] | None) -> int:

    is_done = (lambda i: i in writer.done) if also_done is None else (
        lambda i: i in writer.done and i in also_done)
    todo = [r for r in requests if not is_done(r.id)]
    if not todo:
        return 0
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), unit="req", desc=f"{verb} -> {output.name}", file=sys.stderr)
    # Chunks come from the whole list (see probe.runs.chunks): a resumed run batches
    # exactly as an uninterrupted one; a chunk cut short by a crash is redone whole.
    for part in group_chunks(requests, runner.options.chunk_size):
        left = sum(not is_done(r.id) for r in part)
        if not left:
            continue
        writer.write_many(make(part))
        if bar:
            bar.update(left)
    if bar:
        bar.close()
    return len(todo)
