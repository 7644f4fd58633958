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
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from probe.errors import ProbeError
from probe.runs.chunks import group_chunks
from probe.runs.record import Record

#: Keys of a run (not of a task) that a YAML config or ``--set`` may give (``trust_remote_code`` and
#: ``allow_pickle_weights`` only from the command line or the Python call: probe.commands.run).
RUN_KEYS = ("device", "dtype", "load_in_8bit", "load_in_4bit", "device_map", "trust_remote_code", "batch_size",
            "token_budget", "chunk_size", "score_cache", "threads", "progress", "agreement_tokens", "capture",
            "backend", "log_samples", "allow_pickle_weights", "shard")
_DEVICE = re.compile(r"auto|cpu|meta|(cuda|mps|xpu)(:\d+)?")


@dataclass(frozen=True)
class RunOptions:
    """How to load the model and run the scorer; none of it changes a number beyond float noise."""

    device: str = "auto"  # the GPU when one is visible, else the CPU (probe.models.loader.resolve_device)
    dtype: str = "auto"  # bfloat16 on a GPU that supports it, else float32 (resolve_dtype)
    load_in_8bit: bool = False
    load_in_4bit: bool = False
    device_map: str | None = None
    trust_remote_code: bool = False
    #: read pickle weights (``*.bin``, ``*.pt``) when a model has no safetensors; pickles can run code
    allow_pickle_weights: bool = False
    #: ``auto``: from the model's shape and the device's free memory (probe.scoring.memory; CPU: 16 / 8192)
    batch_size: int | str = "auto"
    token_budget: int | str = "auto"
    chunk_size: int = 1024  # requests per durable chunk (see probe.runs.chunks)
    score_cache: str | None = None  # SQLite score cache path
    threads: int | None = None  # torch CPU threads (None: torch's default)
    progress: bool = True
    #: sampling specs (probe.scoring.sampling.SamplingSpec, or {temperature, top_p} mappings): every
    #: label / continuation record then also carries its sampling-equivalent scores ("sampling")
    sampling: tuple[Any, ...] = ()
    #: greedy agreement (probe.runs.agreement): tokens to decode greedily after each label request's
    #: prompt, to compare the answer written with the score argmax (0: off)
    agreement_tokens: int = 0
    #: activations to record in the scoring passes, as ``HOOK@POSITION`` strings
    #: (``blocks.5.hook_resid_post@last``; probe.activations.CaptureSpec.parse): stored beside the
    #: records, keyed by the same ids, resumed with them (``<run>/activations``)
    capture: tuple[str, ...] = ()
    #: ``hf`` (plain Hugging Face module, torch hooks) or ``tl`` (the same module wrapped by a
    #: TransformerLens 4.x bridge: capture hooks are its HookPoints; probe.models.tl_adapter)
    backend: str = "hf"
    #: write ``samples.jsonl`` beside the records: per request the exact text given to the tokenizer,
    #: the scored forms and any generated chain (probe.runs.samples; ``docs/samples.md``)
    log_samples: bool = False
    #: ``"I/N"``: score only shard I of N (0-based) into ``<output>.rankI-of-N.jsonl`` and stop, with no
    #: process group (a job array: Slurm, submitit, Ray); a later run without it folds complete sets in
    #: (probe.runs.shard_set). Never changes a number: the chunks are those of one process.
    shard: str | None = None

    def __post_init__(self) -> None:
        from probe.scoring.sampling import as_specs

        object.__setattr__(self, "sampling", as_specs(self.sampling))
        cap = self.capture
        object.__setattr__(self, "capture", tuple(cap.split() if isinstance(cap, str) else (cap or ())))
        for name in ("batch_size", "token_budget", "chunk_size"):
            value = getattr(self, name)
            if name != "chunk_size" and value == "auto":
                continue
            try:
                number = int(value)
            except (TypeError, ValueError):
                number = 0
            if number < 1:
                also = "" if name == "chunk_size" else " or 'auto'"
                raise ValueError(f"{name} must be a positive integer{also}, got {value!r}")
            object.__setattr__(self, name, number)
        if not isinstance(self.device, str) or not _DEVICE.fullmatch(self.device):
            raise ValueError(f"device must be auto, cpu, cuda, cuda:N, mps or xpu, got {self.device!r}")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise ValueError(f"threads must be a positive integer, got {self.threads!r}")
        for name in ("load_in_8bit", "load_in_4bit", "trust_remote_code", "progress", "allow_pickle_weights"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if isinstance(self.agreement_tokens, bool) or not isinstance(self.agreement_tokens, int):
            raise ValueError(f"agreement_tokens must be an integer, got {self.agreement_tokens!r}")
        if int(self.agreement_tokens) < 0:
            raise ValueError(f"agreement_tokens must be >= 0, got {self.agreement_tokens!r}")
        if self.load_in_8bit and self.load_in_4bit:
            raise ValueError("choose one of load_in_8bit and load_in_4bit")
        if not isinstance(self.log_samples, bool):
            raise ValueError(f"log_samples must be true or false, got {self.log_samples!r}")
        if self.backend not in ("hf", "tl"):
            raise ValueError(f"backend must be hf or tl, got {self.backend!r}")
        if self.shard is not None:
            from probe.runs.shard_set import Shard

            object.__setattr__(self, "shard", str(Shard.parse(self.shard)))


def load(model: Any, options: RunOptions) -> Any:
    """``model`` as a :class:`probe.models.LoadedModel`: loaded from a name or path, or passed through."""
    from probe.models.tl_adapter import with_backend

    if hasattr(model, "model") and hasattr(model, "tokenizer"):
        return with_backend(model, options.backend, copy=True)  # never rewire the caller's model
    from probe.models import load_model
    from probe.runs.shard import detect

    device = options.device
    procs = detect()
    if procs.distributed:  # one model copy per process: cuda -> cuda:LOCAL_RANK
        if options.device_map is not None:
            raise ProbeError("device_map spreads one model over all GPUs and cannot be combined with "
                             f"{procs.world_size} processes; use one process for device_map, or one GPU per process")
        device = procs.device(device)
    lm = load_model(str(model), device=device, dtype=options.dtype, load_in_8bit=options.load_in_8bit,
                    load_in_4bit=options.load_in_4bit, device_map=options.device_map,
                    trust_remote_code=options.trust_remote_code, allow_pickle_weights=options.allow_pickle_weights)
    return with_backend(lm, options.backend, copy=False)


def default_threads(device: str, load: float | None = None, cores: int | None = None) -> int | None:
    """The torch CPU thread count when ``--threads`` is not given: None (torch's own default, one per core)
    on an idle machine or a GPU; on a busy CPU (load average over half the cores) the cores left idle, at
    least 1, with a note naming ``--threads``: oversubscribed threads made scoring 5x slower on a shared
    2-core machine than ``--threads 1``.

    >>> default_threads("cpu", load=1.8, cores=2)
    1
    >>> default_threads("cpu", load=0.1, cores=8) is None, default_threads("cuda:0", load=9.0, cores=2) is None
    (True, True)
    """
    import os

    if not device.startswith("cpu"):
        return None
    try:
        cores = cores or len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = cores or os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):
            return None
    if load <= cores / 2:
        return None
    threads = max(1, cores - int(round(load)))
    if threads < cores:
        print(f"probe: the CPU is busy (load {load:.1f} on {cores} core(s)); scoring with {threads} torch thread(s) "
              "to avoid oversubscription; choose with --threads N", file=sys.stderr)
    return threads


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
        from probe.scoring.cache import ScoreCache, combine_parts, fingerprint_parts

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
        self.fingerprint_parts = fingerprint_parts(lm)
        self.fingerprint = combine_parts(self.fingerprint_parts)
        cache = ScoreCache(Path(self.options.score_cache).expanduser(), self.fingerprint) if self.options.score_cache else None
        self.scorer = Scorer(lm, batch_size=self.options.batch_size, token_budget=self.options.token_budget, cache=cache)
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
                self.scorer.encode(r)

    def score(self, requests: Sequence[Any], output: str | Path | None = None, task: str = "score",
              progress: bool | None = None, sampling: Sequence[Any] = (), capture: Any = None,
              capture_dir: str | Path | None = None, capture_meta: dict | None = None,
              capture_extra: dict | None = None, samples: Any = None) -> list[Record]:
        """Score ``requests`` (resuming ``output`` if it holds records); return their records in request order.

        ``output`` None scores in memory (no file, no resume). Records already
        in ``output`` that are not among ``requests`` are kept in the file but
        not returned. ``sampling``: specs a task needs (its paper's settings),
        computed beside the run options' own specs, in the same passes.
        ``capture``: a :class:`probe.activations.CaptureSpec` (default: one from
        the run options' ``capture``); its activations, read in the same passes,
        are streamed to the store ``capture_dir`` (default ``<output dir>/activations``)
        one shard per chunk, before the chunk's records, so a resumed run neither
        recomputes nor loses them. Without ``output`` they are kept in
        :attr:`activations`. ``capture_meta``: more manifest fields (checked on
        resume); ``capture_extra``: the manifest's ``extra`` (not checked).
        ``samples``: a :class:`probe.runs.samples.SampleLog`; each chunk's samples are logged once it is
        scored (before its records), and any request still without one at the end (records from a run
        without ``--log-samples``) is logged then; nothing is logged twice.
        """
        specs = self.sampling_specs(sampling)
        cap = self.capture_spec(capture)
        to_record = lambda res: Record.from_result(task, self.model_id, res).to_dict()  # noqa: E731
        score = lambda part: self.scorer.score(part, sampling=specs, capture=cap)  # noqa: E731
        self.check_requests(requests)
        show = self.options.progress if progress is None else progress
        if output is None:
            out: list[Record] = []
            sink = _MemorySink(cap) if cap is not None else None
            for part in group_chunks(requests, self.options.chunk_size):
                results = self._timed(part, score)
                if sink is not None:
                    sink.add(results)
                if samples is not None:
                    samples.write(part)
                out += [Record.from_dict(to_record(r)) for r in results]
            self.activations = sink.result(requests) if sink is not None else None
            return out
        output = Path(output)
        writer = None
        if cap is not None:
            if self.procs.distributed:
                raise ProbeError(f"activation capture runs in one process, but {self.procs.world_size} were "
                                 "launched (accelerate launch / torchrun); run without a launcher, or split the "
                                 "work into a job array with --shard I/N")
            writer = self._capture_writer(cap, Path(capture_dir) if capture_dir else output.parent / "activations",
                                          capture_meta or {}, capture_extra or {}, requests)
        make = lambda part: map(to_record, self._timed(part, score))  # noqa: E731
        if writer is not None:
            make = lambda part: map(to_record, _stored(writer, cap, self._timed(part, score)))  # noqa: E731
        if samples is not None and not self.procs.distributed and self.shard is None:
            # several processes: rank 0 (or the run that folds the shards) logs at the end
            make = _logging(make, samples)
        self.active_sampling = specs  # what the input check records and compares for this output
        from probe.runs.shard_set import ShardDone

        try:
            try:
                dicts = self._to_file(requests, output, make, show, "scoring",
                                      also_done=writer.done if writer is not None else None)
            except ShardDone:
                if hasattr(writer, "complete"):  # this shard's chunks are all stored
                    writer.complete()
                raise
            if hasattr(writer, "complete"):
                writer.complete()
            if samples is not None and self.procs.is_main:
                samples.write(requests)  # requests recorded before (without --log-samples): nothing to score
        finally:
            self.active_sampling = None
            if writer is not None:
                writer.close()
        return [Record.from_dict(d) for d in dicts]

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
                 progress: bool | None = None) -> dict[str, str]:
        """Generations for :class:`~probe.scoring.generate.GenerationRequest` s (greedy, or sampled from each
        request's own seeded stream), recorded and resumed like scores (``generations.jsonl``); returns
        ``{id: text}``. A sampled generation's record also carries its temperature, top_p and seed."""
        from probe.scoring.generate import run_generation
        from probe.scoring.memory import generation_batch_size

        show = self.options.progress if progress is None else progress

        def gen(part: list) -> Iterable[dict]:
            rows = generation_batch_size(self.scorer.batching)
            texts = self._timed(part, lambda p: run_generation(self.lm, p, batch_size=rows))
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
        from probe.runs.resume import check_input

        with RecordWriter(output) as writer:
            check_input(output, writer.done, requests, self)
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


def _logging(make: Callable[[list], Iterable[dict]], samples: Any) -> Callable[[list], list[dict]]:
    """``make`` that logs a chunk's samples after scoring it and before its records are written."""

    def run(part: list) -> list[dict]:
        records = list(make(part))
        samples.write(part)
        return records

    return run


def _stored(writer: Any, spec: Any, results: list) -> list:
    from probe.activations.scoring_capture import store_results

    store_results(writer, spec, results)
    return results


class _MemorySink:
    """Activations of an in-memory run, gathered per chunk."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.by_id: dict[str, Any] = {}

    def add(self, results: list) -> None:
        from probe.activations.scoring_capture import capture_record, missing_positions

        for r in results:
            self.by_id[r.id] = (capture_record(r, missing_positions(r, self.spec)),
                                {k: r.activations[k] for k in self.spec.keys})

    def result(self, requests: Sequence[Any]) -> Any:
        import numpy as np

        from probe.activations.store import Activations

        rows = [self.by_id[r.id] for r in requests]
        arrays = {k: np.stack([v[k] for _, v in rows]) if rows else np.empty((0, 0), np.float32)
                  for k in self.spec.keys}
        manifest = {"hooks": list(self.spec.hooks), "positions": [p.name for p in self.spec.positions],
                    "keys": self.spec.keys}
        return Activations([r.id for r in requests], arrays, [rec for rec, _ in rows], manifest)


def options_from(values: dict[str, Any]) -> RunOptions:
    """:class:`RunOptions` from a mapping that may hold other keys (they are ignored)."""
    fields = {f.name for f in dataclasses.fields(RunOptions)}
    try:
        return RunOptions(**{k: v for k, v in values.items() if k in fields and v is not None})
    except (TypeError, ValueError) as exc:  # a config's or --set's value: a clear error, not a traceback
        raise ProbeError(f"run options: {exc}") from None
