"""Arguments and steps shared by commands that load a model and score."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

from probe.errors import ProbeError
from probe.io import MAX_LINE_BYTES
from probe.models.builtins import DEFAULT_MODEL
from probe.prompts.items import MAX_CHARS
from probe.scoring.sampler.sampling import SamplingSpec

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.

SCORE_CACHE_ENV = "PROBE_SCORE_CACHE"


def add_model_args(p: argparse.ArgumentParser, default_model: str | None = DEFAULT_MODEL) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", default=default_model, required=default_model is None,
                   help=f"built-in name (smollm2, gemma3-270m), .gguf file, model directory or hub id (default: {default_model})")
    g.add_argument("--device", default="auto",
                   help="auto, cpu, cuda, cuda:N or mps (default: auto = the GPU when one is visible, else the CPU)")
    g.add_argument("--dtype", default="auto", choices=["float32", "bfloat16", "float16", "auto"],
                   help="default: auto = bfloat16 on a GPU that supports it, else float32 (docs/scoring.md: tolerances)")
    g.add_argument("--load-in-8bit", action="store_true", help="bitsandbytes 8-bit (GPU only)")
    g.add_argument("--load-in-4bit", action="store_true", help="bitsandbytes 4-bit (GPU only)")
    g.add_argument("--device-map", default=None, help="accelerate device map, e.g. auto (spreads a model over GPUs)")
    g.add_argument("--trust-remote-code", action="store_true", help="run code shipped with the model (off by default)")
    g.add_argument("--allow-pickle-weights", action="store_true",
                   help="read pickle weights (pytorch_model.bin, *.pt) when a model has no safetensors; a pickle can "
                   "run code when loaded (off by default)")
    g.add_argument("--batch-size", type=positive_int_or_auto, default="auto",
                   help="most sequences per forward pass, or auto (default): on a GPU as many as the token budget "
                   "holds, on the CPU 16")
    g.add_argument("--token-budget", type=positive_int_or_auto, default="auto",
                   help="most padded tokens per forward pass, or auto (default): what the device's free memory holds "
                   "for this model's shape, on the CPU at most 8192; a pass that runs out of memory is split and "
                   "retried with half as many (docs/scoring.md)")
    g.add_argument("--chunk-size", "--flush-every", dest="flush_every", type=positive_int, default=256, metavar="N",
                   help="make records durable every N items; a crash loses at most one such chunk (default: 256)")
    g.add_argument("--score-cache", type=Path, default=None, metavar="PATH",
                   help="SQLite file of scores keyed on model, tokenizer, dtype, device type and exact token ids; "
                   "sequences scored before (by any run with the same model settings) are read from it instead of "
                   "recomputed. Share it between your own runs and processes (each value carries a MAC keyed by PATH.key, "
                   "user-only); share it with others only read-only, from a writer you trust; delete it any time. "
                   f"Default: ${SCORE_CACHE_ENV} if set, else no cache")


def add_threads_arg(p: argparse.ArgumentParser) -> None:
    """``--threads N``: torch CPU threads (what the busy-CPU note advises)."""
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch CPU threads (default: torch's, one per core; fewer, with a note, when the CPU is busy)")


def bounded_int(low: int, high: int | None):
    """An argparse type: an integer in ``[low, high]`` (``high`` None: no upper bound), ASCII digits only.

    >>> bounded_int(1, 10)("3"), bounded_int(0, None)("0")
    (3, 0)
    """
    def parse(text: str) -> int:
        if not re.fullmatch(r"\s*[-+]?[0-9]+\s*", text):
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
        value = int(text)
        if value < low or (high is not None and value > high):
            bound = f"at least {low:,}" if high is None else f"from {low:,} to {high:,}"
            raise argparse.ArgumentTypeError(f"expected an integer {bound}, got {text.strip()}")
        return value

    return parse


def add_input_limit_args(p: argparse.ArgumentParser) -> None:
    """``--max-line-bytes`` / ``--max-chars``: the bounds on an input file, checked before the model loads."""

    g = p.add_argument_group("input limits (checked before the model loads; a hostile file costs bounded memory)")
    g.add_argument("--max-line-bytes", type=positive_int, default=MAX_LINE_BYTES, metavar="N",
                   help=f"longest input line in bytes (default: {MAX_LINE_BYTES:,})")
    g.add_argument("--max-chars", type=positive_int, default=MAX_CHARS, metavar="N",
                   help=f"most characters of text per item, counted before tokenizing (default: {MAX_CHARS:,})")


def input_limits(args: argparse.Namespace) -> dict[str, int | None]:
    """The ``max_chars`` / ``max_line_bytes`` keywords of the item readers, from :func:`add_input_limit_args`."""
    return {"max_chars": getattr(args, "max_chars", None), "max_line_bytes": getattr(args, "max_line_bytes", None)}


SHARD_HELP = ("score only shard I of N (0-based, e.g. $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT) in this process, "
              "with no process group, into OUTPUT.rankI-of-N.jsonl, then stop; once all N have finished, the same "
              "command without --shard (or `probe merge DIR`) folds them in, byte-identical to one process "
              "(docs/parallel.md)")


def add_shard_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shard", default=None, metavar="I/N", type=shard_spec, help=SHARD_HELP)


def shard_spec(text: str) -> str:
    """argparse type of ``--shard``: ``I/N`` with ``0 <= I < N``."""
    from probe.runs.shard_set import Shard

    try:
        return str(Shard.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def score_cache_path(args: argparse.Namespace) -> Path | None:
    """``--score-cache``, else ``$PROBE_SCORE_CACHE``, else None (no cache)."""
    path = getattr(args, "score_cache", None) or os.environ.get(SCORE_CACHE_ENV) or None
    return Path(path).expanduser() if path else None


def run_options(args: argparse.Namespace) -> Any:
    """The :class:`probe.runs.runner.RunOptions` of the model arguments."""
    from probe.runs.runner import RunOptions

    cache = score_cache_path(args)
    try:
        return RunOptions(threads=getattr(args, "threads", None),
                          device=args.device, dtype=args.dtype, load_in_8bit=args.load_in_8bit,
                          load_in_4bit=args.load_in_4bit, device_map=args.device_map,
                          trust_remote_code=args.trust_remote_code, batch_size=args.batch_size,
                          token_budget=args.token_budget, chunk_size=args.flush_every,
                          score_cache=str(cache) if cache else None, sampling=sampling_specs(args),
                          allow_pickle_weights=bool(getattr(args, "allow_pickle_weights", False)),
                          shard=getattr(args, "shard", None))
    except ValueError as exc:  # checked before the model loads
        raise ProbeError(str(exc)) from None


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling-equivalent scores (docs/scoring.md)")
    g.add_argument("--temperature", type=_positive_float, nargs="+", default=None, metavar="T",
                   help="also write, per temperature, what sampling at T would do: label lines get "
                   '"sampling": [{temperature, top_p, probs, mass}], continuation lines '
                   '"sampling": [{temperature, top_p, logprobs}] (same forward pass; bypasses --score-cache)')
    g.add_argument("--top-p", type=_unit_float, default=None, metavar="P",
                   help="nucleus cut for every --temperature, in (0, 1] (default: 1, no cut)")


def sampling_specs(args: argparse.Namespace) -> tuple:
    """The :class:`probe.scoring.sampler.sampling.SamplingSpec` s of ``--temperature`` / ``--top-p`` (none without them)."""

    temps = getattr(args, "temperature", None) or ()
    top_p = getattr(args, "top_p", None)
    if top_p is not None and not temps:
        raise ProbeError("--top-p needs --temperature (the nucleus cut applies to sampling at a temperature)")
    return tuple(SamplingSpec(t, 1.0 if top_p is None else top_p) for t in temps)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def _unit_float(text: str) -> float:
    value = _positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text}")
    return value


def positive_int_or_auto(text: str) -> int | str:
    """``auto`` or a positive integer (argparse type of ``--batch-size`` / ``--token-budget``)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or auto, got {text!r}") from None


def positive_int(text: str) -> int:
    """argparse type of a count option (``--threads``, ``--chunk-size``, ...): an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_prompt_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("prompt")
    tmpl = g.add_mutually_exclusive_group()
    tmpl.add_argument("--chat-template", dest="chat_template", action="store_true", default=None,
                      help="render prompts through the tokenizer's chat template (default when it has one)")
    tmpl.add_argument("--no-chat-template", dest="chat_template", action="store_false",
                      help="plain text prompts (base models)")
    g.add_argument("--system", default=None, help="system message")
    g.add_argument("--prefill", default=None, help="text the assistant's answer starts with, e.g. 'Answer:'")
