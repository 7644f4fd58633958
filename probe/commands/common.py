"""Arguments and steps shared by commands that load a model and score."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

from probe.models.builtins import DEFAULT_MODEL


def add_model_args(p: argparse.ArgumentParser, default_model: str | None = DEFAULT_MODEL) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", default=default_model, required=default_model is None,
                   help=f"built-in name (smollm2, gemma3-270m), .gguf file, model directory or hub id (default: {default_model})")
    g.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: cpu)")
    g.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "auto"])
    g.add_argument("--load-in-8bit", action="store_true", help="bitsandbytes 8-bit (GPU only)")
    g.add_argument("--load-in-4bit", action="store_true", help="bitsandbytes 4-bit (GPU only)")
    g.add_argument("--device-map", default=None, help="accelerate device map, e.g. auto (spreads a model over GPUs)")
    g.add_argument("--trust-remote-code", action="store_true", help="run code shipped with the model (off by default)")
    g.add_argument("--batch-size", type=_positive_int, default=16, help="most sequences per forward pass (default: 16)")
    g.add_argument("--token-budget", type=_positive_int, default=8192, help="most padded tokens per forward pass (default: 8192)")
    g.add_argument("--flush-every", type=_positive_int, default=256, metavar="N",
                   help="make records durable every N items; a crash loses at most one such chunk (default: 256)")


def _positive_int(text: str) -> int:
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


def load_from_args(args: argparse.Namespace) -> Any:
    from probe.models import load_model

    return load_model(
        args.model,
        device=args.device,
        dtype=args.dtype,
        load_in_8bit=args.load_in_8bit,
        load_in_4bit=args.load_in_4bit,
        device_map=args.device_map,
        trust_remote_code=args.trust_remote_code,
    )


def score_to_file(scorer: Any, requests: Sequence[Any], output: Path, chunk: int = 256, progress: bool = True) -> int:
    """Score the requests not yet in ``output`` and append their records; returns how many were scored.

    Records are made durable (flushed and fsynced) after every ``chunk`` items,
    so a crash loses at most one chunk of work and a re-run redoes only that.
    Records of a resumed run are identical to those of an uninterrupted one.
    Chunks never split a ``group``: its members are scored in one pass, as the
    scorer promises, whichever items an earlier interrupted run already did.
    """
    from probe.runs.records import RecordWriter
    from probe.scoring.items import result_record

    if chunk < 1:
        raise ValueError("chunk must be positive")
    with RecordWriter(output) as writer:
        todo = [r for r in requests if r.id not in writer.done]
        if not todo:
            return 0
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(todo), unit="item", desc=f"scoring -> {output.name}")
        # Chunks are cut from the whole request list, not from what is left, so a
        # resumed run batches every item exactly as an uninterrupted run does and
        # its records are byte-identical. A chunk cut short by a crash is scored
        # again whole; the writer keeps the records already there.
        for part in group_chunks(requests, chunk):
            left = sum(r.id not in writer.done for r in part)
            if not left:
                continue
            writer.write_many(result_record(r) for r in scorer.score(part))
            if bar:
                bar.update(left)
        if bar:
            bar.close()
    return len(todo)


def group_chunks(requests: Sequence[Any], size: int) -> list[list[Any]]:
    """Split requests into runs of about ``size`` without splitting a ``group``.

    Members of one group stay together (at the place of the group's first
    member); a group larger than ``size`` forms a chunk of its own.

    >>> from types import SimpleNamespace as R
    >>> rs = [R(id=i, group=g) for i, g in enumerate(["a", None, "a", None, None])]
    >>> [[r.id for r in c] for c in group_chunks(rs, 2)]
    [[0, 2], [1, 3], [4]]
    """
    units: dict[Any, list[Any]] = {}
    for r in requests:
        g = getattr(r, "group", None)
        units.setdefault(("g", g) if g is not None else ("r", id(r)), []).append(r)
    chunks: list[list[Any]] = []
    current: list[Any] = []
    for members in units.values():
        if current and len(current) + len(members) > size:
            chunks.append(current)
            current = []
        current.extend(members)
    if current:
        chunks.append(current)
    return chunks
