"""Run options: how to load the model and run the scorer (:class:`RunOptions`), and loading the model.

None of it changes a number beyond float noise. :data:`RUN_KEYS` are the keys of a
run (not of a task) that a config, ``--set`` or ``probe.evaluate`` may give.

>>> RunOptions(batch_size=8).chunk_size
1024
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

from probe.errors import ProbeError
from probe.models import load_model
from probe.models.tl_adapter import with_backend
from probe.runs.shard import detect
from probe.scoring.engine.capabilities import check_supported
from probe.scoring.sampler.sampling import as_specs

__all__ = ["RUN_KEYS", "RunOptions", "default_threads", "load", "options_from"]

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
    #: ``auto``: from the model's shape and the device's free memory (probe.scoring.engine.memory; CPU: 16 / 8192)
    batch_size: int | str = "auto"
    token_budget: int | str = "auto"
    chunk_size: int = 1024  # requests per durable chunk (see probe.runs.chunks)
    score_cache: str | None = None  # SQLite score cache path
    threads: int | None = None  # torch CPU threads (None: torch's default)
    progress: bool = True
    #: sampling specs (probe.scoring.sampler.sampling.SamplingSpec, or {temperature, top_p} mappings): every
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

    if hasattr(model, "model") and hasattr(model, "tokenizer"):
        return with_backend(model, options.backend, copy=True)  # never rewire the caller's model

    device = options.device
    procs = detect()
    if procs.distributed:  # one model copy per process: cuda -> cuda:LOCAL_RANK
        if options.device_map is not None:
            raise ProbeError("device_map spreads one model over all GPUs and cannot be combined with "
                             f"{procs.world_size} processes; use one process for device_map, or one GPU per process")
        device = procs.device(device)
    lm = load_model(str(model), device=device, dtype=options.dtype, load_in_8bit=options.load_in_8bit,
                    load_in_4bit=options.load_in_4bit, device_map=options.device_map,
                    trust_remote_code=options.trust_remote_code, allow_pickle_weights=options.allow_pickle_weights,
                    check_config=check_supported)  # a model no scoring path computes exactly: before weights
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


def options_from(values: dict[str, Any]) -> RunOptions:
    """:class:`RunOptions` from a mapping that may hold other keys (they are ignored)."""
    fields = {f.name for f in dataclasses.fields(RunOptions)}
    try:
        return RunOptions(**{k: v for k, v in values.items() if k in fields and v is not None})
    except (TypeError, ValueError) as exc:  # a config's or --set's value: a clear error, not a traceback
        raise ProbeError(f"run options: {exc}") from None
