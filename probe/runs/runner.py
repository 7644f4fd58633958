"""The one Runner: every task, ``probe score``, ``probe perplexity`` and the demo score through it.

It owns what a run needs beyond the scorer, the same for every task:

- the model (name, path or an already loaded model; dtype, device, 8/4-bit,
  ``device_map``: :class:`RunOptions`);
- chunking from the full request list (:mod:`probe.runs.chunks`: groups whole,
  prefix sharing within a chunk, byte-identical resumes);
- the record writer (crash-safe JSONL, one :class:`~probe.runs.record.Record`
  per request) and the input check (:mod:`probe.runs.resume`: another model
  or changed requests in the same output are refused);
- the score cache (``score_cache``) and data-parallel sharding
  (``accelerate launch`` / ``torchrun``: :mod:`probe.runs.shard`);
- an optional generate-then-score step (chain-of-thought), whose generations
  are recorded and resumed like scores;
- timing (seconds per request kind, for projections).

>>> from probe.runs.runner import RunOptions
>>> RunOptions(batch_size=8).chunk_size
1024
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from probe.errors import ProbeError
from probe.runs.chunks import group_chunks
# Run options and loading live in probe.runs.options; re-exported here, where callers import them.
from probe.runs.options import RUN_KEYS, RunOptions, default_threads, load, options_from
from probe.runs.record import Record
from probe.runs.score_plan import ScoreJob, ScorePlan

__all__ = ["RUN_KEYS", "RunOptions", "Runner", "ScorePlan", "default_threads", "load", "options_from"]


class Runner:
    """Scores requests into a crash-safe, resumable, model-checked record file.

    ``Runner(lm, options)``; :meth:`score` and :meth:`generate` may be called
    several times (one output file each). Under ``accelerate launch`` /
    ``torchrun`` every process runs the same calls; the work is sharded and
    rank 0 holds the merged records.
    """

    def __init__(self, lm: Any, options: RunOptions | None = None) -> None:
        from probe.runs.shard import detect
        from probe.scoring import Scorer
        from probe.models.fingerprint import combine_parts, fingerprint_parts
        from probe.scoring.cache import ENGINE_VERSION, ScoreCache

        self.options = options or RunOptions()
        threads = self.options.threads or default_threads(str(getattr(lm, "device", "cpu")))
        if threads:
            import torch

            torch.set_num_threads(int(threads))
        self.procs = detect()
        from probe.runs.shard_set import Shard

        #: this process's shard of a job array (``--shard I/N``), or None
        self.shard = Shard.parse(self.options.shard) if self.options.shard else None
        if self.shard is not None and self.procs.distributed:
            raise ProbeError(f"--shard {self.shard} runs one process of a job array, without a process group; "
                             "under accelerate launch / torchrun drop --shard (the launcher shards by itself)")
        self.active_sampling: tuple[Any, ...] | None = None  # set while score() writes an output
        #: the activations of the last in-memory ``score(capture=...)`` (probe.activations.Activations)
        self.activations: Any = None
        self.lm = lm
        self.fingerprint_parts = fingerprint_parts(lm, ENGINE_VERSION)
        self.fingerprint = combine_parts(self.fingerprint_parts)
        cache = ScoreCache(Path(self.options.score_cache).expanduser(), self.fingerprint) if self.options.score_cache else None
        self.scorer = Scorer(lm, batch_size=self.options.batch_size, token_budget=self.options.token_budget, cache=cache,
                             fingerprint=self.fingerprint)
        #: seconds and request counts per request kind (``meta["kind"]`` or the request kind), this process
        self.timing: dict[str, dict[str, float]] = {}
        #: the work other processes did for this run, as ``{rank|shard, timing, engine}`` dicts: the other
        #: ranks of a launch (gathered over the group) and the ``--shard`` processes folded in here
        self.other_work: list[dict[str, Any]] = []

    @property
    def model_id(self) -> str:
        """The short model fingerprint every record carries."""
        return self.fingerprint[:12]

    def close(self) -> None:
        if self.scorer.cache is not None:
            self.scorer.cache.close()

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- scoring --------------------------------------------------------------
    def check_requests(self, requests: Sequence[Any], where: str | Path = "requests") -> None:
        """Tokenize every request first: a too-long prompt fails before any work; duplicate ids are refused."""
        seen: set[str] = set()
        for r in requests:
            if r.id in seen:
                raise ProbeError(f"{where}: duplicate request id {r.id!r}; ids key records and resume")
            seen.add(r.id)
            if r.kind not in ("generation", "parse"):
                try:
                    self.scorer.encode(r)
                except ValueError as exc:  # a prompt past the context window: one line, before any work
                    prefix = "" if where == "requests" else f"{where}: "
                    raise ProbeError(f"{prefix}{exc}; nothing was scored (a model with a longer context "
                                     "window, or shorter prompts, can score it)") from None

    def score(self, requests: Sequence[Any], output: str | Path | None = None, plan: ScorePlan | None = None,
              **settings: Any) -> list[Record]:
        """Score ``requests`` (resuming ``output`` if it holds records); return their records in request order.

        ``output`` None scores in memory (no file, no resume; captured activations
        are kept in :attr:`activations`). Records already in ``output`` that are
        not among ``requests`` are kept in the file but not returned. ``plan``
        (:class:`probe.runs.score_plan.ScorePlan`) says what else the call records:
        the task name, extra sampling specs, activation capture (streamed to its
        store one shard per chunk, before the chunk's records, so a resumed run
        neither recomputes nor loses them), the sample log. ``settings`` are
        ScorePlan fields given one by one (``task="bbq", sampling=(spec,)``),
        replacing the plan's.
        """
        plan = dataclasses.replace(plan or ScorePlan(), **settings)
        return ScoreJob(self, plan).run(requests, output)

    def capture_spec(self, capture: Any = None) -> Any:
        """``capture`` (a CaptureSpec or ``HOOK@POSITION`` strings, layer selections such as ``blocks.*.``
        expanded for this model), else the run options' own; None when off. Hook names are checked against
        the model here, before any work."""
        from probe.activations.scoring_capture import CaptureSpec, layer_count

        if capture is None and not self.options.capture:
            return None
        try:
            n_layers = layer_count(self.lm.model)
        except (AttributeError, KeyError, ValueError):  # a layout hooks cannot read: explicit hook names only
            n_layers = None
        try:
            spec = capture if isinstance(capture, CaptureSpec) else CaptureSpec.parse(
                list(capture) if capture is not None else list(self.options.capture), n_layers=n_layers)
            spec.check(self.lm.model)
        except (KeyError, ValueError) as exc:
            raise ProbeError(f"--capture: {exc.args[0] if exc.args else exc}") from None
        return spec

    def _capture_writer(self, spec: Any, directory: Path, meta: dict, extra: dict, requests: Sequence[Any]) -> Any:
        """The store the captured activations go to: ``directory``, or under ``--shard I/N`` its shard store
        ``<directory>.rankI-of-N`` (:mod:`probe.activations.shards`); a plain run first folds a complete
        set of shard stores into ``directory`` in one-process order."""
        from probe.activations.shards import ShardStoreWriter, fold_stores
        from probe.activations.store import ActivationWriter

        manifest = {"format": 1, "model_fingerprint": self.model_id, "hooks": list(spec.hooks),
                    "positions": [p.name for p in spec.positions], "keys": spec.keys,
                    "d_model": spec.check(self.lm.model), **meta,
                    "extra": {"model": self.lm.info() if hasattr(self.lm, "info") else {}, **extra}}
        chunks = [[str(r.id) for r in part] for part in group_chunks(requests, self.options.chunk_size)]
        if self.shard is not None:
            return ShardStoreWriter(directory, manifest, self.shard.index, self.shard.count, chunks,
                                    self.options.chunk_size)
        fold_stores(directory, manifest, chunks, self.options.chunk_size)
        return ActivationWriter(directory, manifest, shard_size=self.options.chunk_size)

    def sampling_specs(self, extra: Sequence[Any] = ()) -> tuple[Any, ...]:
        """The run options' sampling specs, then ``extra`` ones not already among them (order kept)."""
        from probe.scoring.sampling import as_specs

        specs = list(self.options.sampling)
        for spec in as_specs(tuple(extra)):
            if spec not in specs:
                specs.append(spec)
        return tuple(specs)

    def generate(self, requests: Sequence[Any], output: str | Path | None = None, task: str = "generate",
                 progress: bool | None = None, share_prefix: bool = False) -> dict[str, str]:
        """Generations for :class:`~probe.scoring.generate.GenerationRequest` s (greedy, or sampled from each
        request's own seeded stream), recorded and resumed like scores (``generations.jsonl``); returns
        ``{id: text}``. A sampled generation's record also carries its temperature, top_p and seed.
        ``share_prefix``: many samples of one prompt share its forward pass (same texts; give them one ``group``)."""
        from probe.scoring.generate import run_generation
        from probe.scoring.memory import generation_batch_size

        show = self.options.progress if progress is None else progress

        def gen(part: list) -> Iterable[dict]:
            rows = generation_batch_size(self.scorer.batching)
            texts = self._timed(part, lambda p: run_generation(self.lm, p, batch_size=rows,
                                                               share_prefix=share_prefix))
            return ({"task": task, "id": r.id, "model": self.model_id, "kind": "generation", "text": t,
                     "max_new_tokens": r.max_new_tokens, **r.settings(), "meta": dict(r.meta)}
                    for r, t in zip(part, texts))

        if output is None:
            return {d["id"]: d["text"] for part in group_chunks(requests, self.options.chunk_size) for d in gen(part)}
        return {d["id"]: d["text"] for d in self._to_file(requests, Path(output), gen, show, "generating")}

    def parse(self, requests: Sequence[Any], output: str | Path | None = None, task: str = "parse",
              progress: bool | None = None, top: int = 10) -> dict[str, dict]:
        """The parsed answer's distribution under sampling for :class:`~probe.scoring.parse_exact.ParseRequest` s
        (:func:`~probe.scoring.parse_exact.parse_exact`), recorded and resumed like scores (``parsed.jsonl``);
        returns ``{id: record}``, each record with ``probs``, ``rejected``, ``residual``, ``nodes`` and the
        ``top`` most probable enumerated generations."""
        from probe.scoring.parse_exact import run_parse_requests

        show = self.options.progress if progress is None else progress
        batch = self.scorer.batch_size

        def enumerate_part(part: list) -> Iterable[dict]:
            dists = self._timed(part, lambda p: run_parse_requests(self.lm, p, batch_size=batch, top=top))
            return ({"task": task, "id": r.id, "model": self.model_id, "kind": "parse",
                     "temperature": r.temperature, "top_p": r.top_p, "max_new_tokens": r.max_new_tokens,
                     "parser": r.parser_name, **d.to_dict(), "meta": dict(r.meta)}
                    for r, d in zip(part, dists))

        if output is None:
            return {d["id"]: d for part in group_chunks(requests, self.options.chunk_size)
                    for d in enumerate_part(part)}
        return {d["id"]: d for d in self._to_file(requests, Path(output), enumerate_part, show, "enumerating")}

    def _timed(self, part: list, fn: Callable[[list], list]) -> list:
        t0 = time.perf_counter()
        out = fn(part)
        share = (time.perf_counter() - t0) / max(len(part), 1)
        for r in part:
            kind = str((r.meta or {}).get("kind", r.kind)) if hasattr(r, "meta") else r.kind
            t = self.timing.setdefault(kind, {"n": 0, "seconds": 0.0})
            t["n"] += 1
            t["seconds"] += share
        return out

    def _to_file(self, requests: Sequence[Any], output: Path, make: Callable[[list], Iterable[dict]],
                 progress: bool, verb: str, also_done: set[str] | None = None) -> list[dict]:
        """Append the records of the requests not yet in ``output``; return every request's record, in order."""
        from probe.io import read_records
        from probe.runs.resume import check_input
        from probe.runs.shard import (launcher_shard_files, merge_shards, process_group, recorded_ids, score_sharded,
                                      shared_records)
        from probe.runs.shard_set import ShardDone, fold_for_run, independent_shards, score_shard, shard_sets

        records = None
        if self.shard is not None:
            # Records of this output already folded in, or held by a complete set of shards, are read
            # without writing anything (other shard processes may be reading too): a multi-stage task
            # (generations, then scores) goes on to its next stage once the first stage's set is complete.
            by_id = {str(r["id"]): r for r in read_records(output)[0]} if output.is_file() else {}
            for members in shard_sets(output)[0].values():
                for path, _ in members:
                    check_input(path, {str(r["id"]) for r in read_records(path)[0]}, requests, self, write=False)
                    for rec in read_records(path)[0]:
                        by_id.setdefault(str(rec["id"]), rec)
            if any(str(r.id) not in by_id for r in requests):
                n = score_shard(self, requests, output, self.shard, make, self.options.chunk_size, progress)
                raise ShardDone(f"shard {self.shard} of {output}: {n} new record(s) in "
                                f"{output.name}.rank{self.shard.index}-of-{self.shard.count}.jsonl. When all "
                                f"{self.shard.count} shards have finished, run the same command without --shard "
                                f"(or `probe merge {output.parent}`) to fold them in")
            return [by_id[str(r.id)] for r in requests]
        elif self.procs.distributed:
            if independent_shards(output):
                raise ProbeError(f"{output} has shard files of --shard processes; fold them first (`probe merge "
                                 f"{output.parent}`, or one run without a launcher), then launch")
            with process_group(self.procs):
                score_sharded(self, requests, output, self.procs, make=make, chunk=self.options.chunk_size,
                              progress=progress)
                self.procs.barrier()  # rank 0 has merged the shards: every rank may read the output
                # rank 0's records on every rank (sent over the group to a node that does not share its disk)
                records = shared_records(output, self.procs)
                # every rank's timing and engine counts so far (cumulative: the last output's gather has them all)
                ranks = self.procs.all_gather({"rank": self.procs.rank, "timing": self.timing,
                                               "engine": self.scorer.engine.counts()})
                self.other_work = [w for w in self.other_work if "rank" not in w]
                self.other_work += [w for w in ranks if w is not None and w["rank"] != self.procs.rank]
        else:
            if independent_shards(output):
                fold_for_run(output, self, requests)
            if launcher_shard_files(output):
                # shards left by an interrupted multi-process run are folded in first (their work
                # is kept), after checking that they came from this model and input
                check_input(output, recorded_ids(output), requests, self, write=False)
                merge_shards(output, requests)
            self._append(requests, output, make, progress, verb, also_done)
        by_id = {str(r["id"]): r for r in (records if records is not None else read_records(output)[0])}
        missing = [r.id for r in requests if r.id not in by_id]
        if missing:  # pragma: no cover - would be a runner bug
            raise ProbeError(f"{output}: {len(missing)} request(s) have no record after the run, e.g. {missing[:3]}")
        return [by_id[r.id] for r in requests]

    def _append(self, requests: Sequence[Any], output: Path, make: Callable[[list], Iterable[dict]],
                progress: bool, verb: str, also_done: set[str] | None = None) -> int:
        """``also_done``: ids another store holds (captured activations); a request is done when in both."""
        from probe.io import RecordWriter
        from probe.runs.resume import check_input, input_sidecar

        with RecordWriter(output) as writer:
            check_input(output, writer.done, requests, self)
            try:
                return self._append_todo(requests, output, make, progress, verb, writer, also_done)
            except BaseException:
                if not writer.done:  # no record was written: an input check of no records is not left behind
                    input_sidecar(output).unlink(missing_ok=True)
                raise

    def _append_todo(self, requests: Sequence[Any], output: Path, make: Callable[[list], Iterable[dict]],
                     progress: bool, verb: str, writer: Any, also_done: set[str] | None) -> int:
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
        for part in group_chunks(requests, self.options.chunk_size):
            left = sum(not is_done(r.id) for r in part)
            if not left:
                continue
            writer.write_many(make(part))
            if bar:
                bar.update(left)
        if bar:
            bar.close()
        return len(todo)

    def work(self) -> dict[str, Any]:
        """This run's work over every process: timing per request kind, engine counts (forward passes,
        tokens computed, raw tokens and their ratio), and each process's own share."""
        own = {"rank": self.procs.rank, "timing": self.timing, "engine": self.scorer.engine.counts()}
        parts = [own] + list(self.other_work)
        timing: dict[str, dict[str, float]] = {}
        engine: dict[str, int] = {}
        for part in parts:
            for kind, t in (part.get("timing") or {}).items():
                acc = timing.setdefault(kind, {"n": 0, "seconds": 0.0})
                acc["n"] += t["n"]
                acc["seconds"] += t["seconds"]
            for k, v in (part.get("engine") or {}).items():
                engine[k] = engine.get(k, 0) + int(v)
        if engine.get("tokens_raw"):
            engine["computed_ratio"] = round(engine["tokens_computed"] / engine["tokens_raw"], 4)
        out: dict[str, Any] = {"timing": timing, "engine": engine}
        if len(parts) > 1:
            out["processes"] = parts
        return out

    def cache_note(self) -> str:
        """What the score cache saved in this process, as a sentence fragment ('' without a cache)."""
        cache = self.scorer.cache
        if cache is None:
            return ""
        return f" (score cache: {cache.stats.hits} sequence(s) read, {cache.stats.writes} written)"
