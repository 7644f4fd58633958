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

from probe.activations.scoring_capture import CaptureSpec, layer_count
from probe.activations.shards import ShardStoreWriter, fold_stores
from probe.activations.store import ActivationWriter
from probe.errors import ProbeError
from probe.models.fingerprint import combine_parts, fingerprint_parts
from probe.progress import TICK, maybe
from probe.runs.chunks import group_chunks
# Run options and loading live in probe.runs.options; re-exported here, where callers import them.
from probe.runs.options import RUN_KEYS, RunOptions, default_threads, load, options_from
from probe.runs.record import Record
from probe.runs.score_plan import ScoreJob, ScorePlan
from probe.runs.shard import detect
from probe.runs.shard_set import Shard
from probe.runs.sharding import ShardPending, write
from probe.scoring import Scorer
from probe.scoring.cache import ENGINE_VERSION, ScoreCache
from probe.scoring.engine.memory import generation_batch_size
from probe.scoring.generate import run_generation
from probe.scoring.parse.exact import run_parse_requests
from probe.scoring.sampler.sampling import as_specs

__all__ = ["RUN_KEYS", "RunOptions", "Runner", "ScorePlan", "ShardPending", "default_threads", "load", "options_from"]


class Runner:
    """Scores requests into a crash-safe, resumable, model-checked record file.

    ``Runner(lm, options)``; :meth:`score` and :meth:`generate` may be called
    several times (one output file each). Under ``accelerate launch`` /
    ``torchrun`` every process runs the same calls; the work is sharded and
    rank 0 holds the merged records.
    """

    def __init__(self, lm: Any, options: RunOptions | None = None) -> None:
        self.options = options or RunOptions()
        threads = self.options.threads or default_threads(str(getattr(lm, "device", "cpu")))
        if threads:
            import torch

            torch.set_num_threads(int(threads))
        self.procs = detect()

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
        #: the plan's rates on this model (probe.runs.plan.Rates: calibrated once, then measured on the first
        #: chunk scored) and what the last plan expected (probe.runs.plan_check.Planned)
        self.plan_rates: Any = None
        self.planned: Any = None
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
              **settings: Any) -> list[Record] | ShardPending:
        """Score ``requests`` (resuming ``output`` if it holds records); return their records in request order
        (under ``--shard I/N``, a :class:`~probe.runs.sharding.ShardPending` until every shard has finished).

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

        specs = list(self.options.sampling)
        for spec in as_specs(tuple(extra)):
            if spec not in specs:
                specs.append(spec)
        return tuple(specs)

    def generate(self, requests: Sequence[Any], output: str | Path | None = None, task: str = "generate",
                 progress: bool | None = None, share_prefix: bool = False) -> dict[str, str] | ShardPending:
        """Generations for :class:`~probe.scoring.generate.GenerationRequest` s (greedy, or sampled from each
        request's own seeded stream), recorded and resumed like scores (``generations.jsonl``); returns
        ``{id: text}`` (a :class:`~probe.runs.sharding.ShardPending` while a ``--shard`` set is unfinished).
        A sampled generation's record also carries its temperature, top_p and seed.
        ``share_prefix``: many samples of one prompt share its forward pass (same texts; give them one ``group``)."""

        show = self.options.progress if progress is None else progress

        def gen(part: list) -> Iterable[dict]:
            rows = generation_batch_size(self.scorer.batching)
            texts = self._timed(part, lambda p: run_generation(self.lm, p, batch_size=rows,
                                                               share_prefix=share_prefix, progress=show))
            return ({"task": task, "id": r.id, "model": self.model_id, "kind": "generation", "text": t,
                     "max_new_tokens": r.max_new_tokens, **r.settings(), "meta": dict(r.meta)}
                    for r, t in zip(part, texts))

        if output is None:
            return {d["id"]: d["text"] for part in group_chunks(requests, self.options.chunk_size) for d in gen(part)}
        done = write(self, requests, Path(output), gen, show, "generating")
        return done if isinstance(done, ShardPending) else {d["id"]: d["text"] for d in done}

    def parse(self, requests: Sequence[Any], output: str | Path | None = None, task: str = "parse",
              progress: bool | None = None, top: int = 10) -> dict[str, dict] | ShardPending:
        """The parsed answer's distribution under sampling for :class:`~probe.scoring.parse.exact.ParseRequest` s
        (:func:`~probe.scoring.parse.exact.parse_exact`), recorded and resumed like scores (``parsed.jsonl``);
        returns ``{id: record}``, each record with ``probs``, ``rejected``, ``residual``, ``nodes`` and the
        ``top`` most probable enumerated generations."""

        show = self.options.progress if progress is None else progress
        batch = self.scorer.batch_size

        def enumerate_part(part: list) -> Iterable[dict]:
            # one pass over a batch of growing trees may take longer than a reader waits: a line while no bar moves
            with maybe(bool(show) and self.procs.is_main, f"{task}: enumerating {len(part):,} prompt(s)",
                       announce_after=TICK):
                dists = self._timed(part, lambda p: run_parse_requests(self.lm, p, batch_size=batch, top=top,
                                                                            progress=show))
            return ({"task": task, "id": r.id, "model": self.model_id, "kind": "parse",
                     "temperature": r.temperature, "top_p": r.top_p, "max_new_tokens": r.max_new_tokens,
                     **({"sampler": r.sampler.to_dict()} if getattr(r, "sampler", None) is not None else {}),
                     "parser": r.parser_name, **d.to_dict(), "meta": dict(r.meta)}
                    for r, d in zip(part, dists))

        if output is None:
            return {d["id"]: d for part in group_chunks(requests, self.options.chunk_size)
                    for d in enumerate_part(part)}
        done = write(self, requests, Path(output), enumerate_part, show, "enumerating")
        return done if isinstance(done, ShardPending) else {d["id"]: d for d in done}

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
