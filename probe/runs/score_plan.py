"""One :meth:`probe.runs.runner.Runner.score` call: its typed plan and the steps from a chunk to records.

:class:`ScorePlan` says what a call records beside the requests and the output
(the task name, extra sampling specs, activation capture, the sample log);
:class:`ScoreJob` resolves it against a runner once (sampling and capture
specs) and turns each chunk of requests into records: score, store the chunk's
activations, then log its samples, so a resumed run neither recomputes nor
loses any of them.

>>> ScorePlan(task="bbq", sampling=[{"temperature": 0.8}]).sampling
({'temperature': 0.8},)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence


import numpy as np

from probe.activations.scoring_capture import capture_record, missing_positions
from probe.activations.store import Activations
from probe.errors import ProbeError
from probe.runs.chunks import group_chunks
from probe.progress import TICK, maybe
from probe.runs import sharding
from probe.runs.plan_check import PlanCheck
from probe.runs.record import Record
from probe.runs.sharding import ShardPending

__all__ = ["ScoreJob", "ScorePlan"]


@dataclass(frozen=True)
class ScorePlan:
    """What a :meth:`~probe.runs.runner.Runner.score` call records, beyond its requests and output."""

    #: the ``task`` field of every record
    task: str = "score"
    #: show a progress bar (None: the run options' ``progress``)
    progress: bool | None = None
    #: sampling specs the task needs (its paper's settings), computed beside the run options' own
    sampling: tuple[Any, ...] = ()
    #: a :class:`probe.activations.CaptureSpec` or ``HOOK@POSITION`` strings (None: the run options')
    capture: Any = None
    #: where captured activations go (None: ``<output dir>/activations``)
    capture_dir: str | Path | None = None
    #: more manifest fields of the activation store, checked on resume
    capture_meta: Mapping[str, Any] = field(default_factory=dict)
    #: the manifest's ``extra`` (not checked)
    capture_extra: Mapping[str, Any] = field(default_factory=dict)
    #: a :class:`probe.runs.samples.SampleLog`: each chunk's samples are logged once it is scored
    samples: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sampling", tuple(self.sampling or ()))
        object.__setattr__(self, "capture_meta", dict(self.capture_meta or {}))
        object.__setattr__(self, "capture_extra", dict(self.capture_extra or {}))


class ScoreJob:
    """A :class:`ScorePlan` resolved against a runner: the sampling and capture specs, found (and the
    hooks checked) before any work, and the steps that turn a chunk of requests into records."""

    def __init__(self, runner: Any, plan: ScorePlan) -> None:
        self.runner = runner
        self.plan = plan
        self.specs = runner.sampling_specs(plan.sampling)
        self.capture = runner.capture_spec(plan.capture)
        self.writer: Any = None  # the activation store of a run to a file
        self.log_chunks = False  # log each chunk's samples as it is recorded
        self.show = False  # a bar inside each chunk (a chunk may take minutes)
        self.plan_check: PlanCheck | None = None  # the first chunk against the plan, for a run to a file

    def run(self, requests: Sequence[Any], output: str | Path | None) -> list[Record] | ShardPending:
        """Check every request, then score into ``output`` (resuming it) or in memory (``None``)."""
        self.runner.check_requests(requests)
        return self.in_memory(requests) if output is None else self.to_file(requests, Path(output))

    def results(self, part: list) -> list:
        """The scorer's results of one chunk, timed per request kind."""
        return self.runner._timed(part, self._score)

    def _score(self, part: list) -> list:
        # one forward pass may take longer than a reader waits: a line every few seconds while no bar moves
        with maybe(self.show and self.runner.procs.is_main, f"{self.plan.task}: scoring {len(part):,} request(s)",
                   announce_after=TICK):
            return self.runner.scorer.score(part, sampling=self.specs, capture=self.capture, progress=self.show)

    def record(self, result: Any) -> dict:
        """One result as a record dict of this plan's task and the runner's model."""
        return Record.from_result(self.plan.task, self.runner.model_id, result).to_dict()

    def chunk_records(self, part: list) -> list[dict]:
        """Score one chunk into records: its activations stored first, then its samples logged."""
        results = self.plan_check.timed(part, self.results) if self.plan_check else self.results(part)
        if self.writer is not None:
            from probe.activations.scoring_capture import store_results

            store_results(self.writer, self.capture, results)
        records = [self.record(r) for r in results]
        if self.log_chunks:
            self.plan.samples.write(part)
        return records

    def in_memory(self, requests: Sequence[Any]) -> list[Record]:
        """No file, no resume; captured activations are kept in the runner's ``activations``."""
        out: list[Record] = []
        sink = _MemorySink(self.capture) if self.capture is not None else None
        for part in group_chunks(requests, self.runner.options.chunk_size):
            results = self.results(part)
            if sink is not None:
                sink.add(results)
            if self.plan.samples is not None:
                self.plan.samples.write(part)
            out += [Record.from_dict(self.record(r)) for r in results]
        self.runner.activations = sink.result(requests) if sink is not None else None
        return out

    def to_file(self, requests: Sequence[Any], output: Path) -> list[Record] | ShardPending:
        """Append the records ``output`` lacks (:func:`probe.runs.sharding.write`: resume, shards, launcher
        ranks); a ``ShardPending`` while a ``--shard`` set is unfinished."""
        runner, plan = self.runner, self.plan
        if self.capture is not None:
            if runner.procs.distributed:
                raise ProbeError(f"activation capture runs in one process, but {runner.procs.world_size} were "
                                 "launched (accelerate launch / torchrun); run without a launcher, or split the "
                                 "work into a job array with --shard I/N")
            directory = Path(plan.capture_dir) if plan.capture_dir else output.parent / "activations"
            self.writer = runner._capture_writer(self.capture, directory, dict(plan.capture_meta),
                                                 dict(plan.capture_extra), requests)
        # several processes: rank 0 (or the run that folds the shards) logs at the end
        self.log_chunks = plan.samples is not None and not runner.procs.distributed and runner.shard is None
        show = runner.options.progress if plan.progress is None else plan.progress
        self.show = bool(show)
        self.plan_check = PlanCheck(runner, plan.task, self.show)
        runner.active_sampling = self.specs  # what the input check records and compares for this output
        try:
            dicts = sharding.write(runner, requests, output, self.chunk_records, show, "scoring",
                          also_done=self.writer.done if self.writer is not None else None)
            if hasattr(self.writer, "complete"):  # this shard's chunks are all stored
                self.writer.complete()
            if isinstance(dicts, ShardPending):
                return dicts
            if plan.samples is not None and runner.procs.is_main:
                plan.samples.write(requests)  # requests recorded before (without --log-samples): nothing to score
        finally:
            runner.active_sampling = None
            if self.writer is not None:
                self.writer.close()
        return [Record.from_dict(d) for d in dicts]


class _MemorySink:
    """Activations of an in-memory run, gathered per chunk."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.by_id: dict[str, Any] = {}

    def add(self, results: list) -> None:
        for r in results:
            self.by_id[r.id] = (capture_record(r, missing_positions(r, self.spec)),
                                {k: r.activations[k] for k in self.spec.keys})

    def result(self, requests: Sequence[Any]) -> Any:
        rows = [self.by_id[r.id] for r in requests]
        arrays = {k: np.stack([v[k] for _, v in rows]) if rows else np.empty((0, 0), np.float32)
                  for k in self.spec.keys}
        manifest = {"hooks": list(self.spec.hooks), "positions": [p.name for p in self.spec.positions],
                    "keys": self.spec.keys}
        return Activations([r.id for r in requests], arrays, [rec for rec, _ in rows], manifest)
