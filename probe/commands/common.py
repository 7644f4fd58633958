"""Arguments and steps shared by commands that load a model and score."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Sequence

from probe.errors import ProbeError
from probe.models.builtins import DEFAULT_MODEL

SCORE_CACHE_ENV = "PROBE_SCORE_CACHE"
INPUT_CHECK_FORMAT = 1


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
    g.add_argument("--score-cache", type=Path, default=None, metavar="PATH",
                   help="SQLite file of scores keyed on model, tokenizer, dtype, device type and exact token ids; "
                   "sequences scored before (by any run with the same model settings) are read from it instead of "
                   "recomputed. Safe to share between runs and processes; delete it any time. "
                   f"Default: ${SCORE_CACHE_ENV} if set, else no cache")


def score_cache_path(args: argparse.Namespace) -> Path | None:
    """``--score-cache``, else ``$PROBE_SCORE_CACHE``, else None (no cache)."""
    path = getattr(args, "score_cache", None) or os.environ.get(SCORE_CACHE_ENV) or None
    return Path(path).expanduser() if path else None


def open_score_cache(args: argparse.Namespace, lm: Any) -> Any:
    """The :class:`probe.scoring.cache.ScoreCache` asked for by ``args`` for model ``lm``, or None."""
    path = score_cache_path(args)
    if path is None:
        return None
    from probe.scoring.cache import ScoreCache, model_fingerprint

    return ScoreCache(path, model_fingerprint(lm))


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

    Before scoring, ``<output>.input.json`` is checked (see :func:`check_input`):
    records made from another model or from a different request under the
    same id are a :class:`ProbeError`, never mixed in.
    """
    from probe.runs.records import RecordWriter
    from probe.scoring.items import result_record

    if chunk < 1:
        raise ValueError("chunk must be positive")
    with RecordWriter(output) as writer:
        check_input(output, writer.done, requests, scorer.lm)
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


# -- what produced an output ------------------------------------------------
def input_sidecar(output: Path) -> Path:
    """``<output>.input.json``: the model and the requests behind the records in ``output``."""
    return output.with_name(output.name + ".input.json")


def request_digest(request: Any) -> str:
    """sha256 (hex) of every field of a request (id, kind, prompt or text, labels or options, group, joining rule)."""
    fields = dataclasses.asdict(request) if dataclasses.is_dataclass(request) else dict(vars(request))
    text = json.dumps(fields, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def check_input(output: Path, done: set[str], requests: Sequence[Any], lm: Any, write: bool = True) -> None:
    """Refuse to resume ``output`` with records from another model or another request under the same id.

    The sidecar ``<output>.input.json`` holds the model fingerprint (weights,
    tokenizer, dtype, device type, ... see :func:`probe.scoring.cache.fingerprint_parts`)
    and one digest per request id. It is written before the first record.
    Resuming needs the same model fingerprint, and every id already recorded
    (``done``) that is also in ``requests`` must have the same request digest.
    New ids may be added (they are appended to the sidecar); batch size and
    token budget are not part of it, as they change numbers only by float noise.
    ``write=False`` checks without writing (the non-zero ranks of a sharded run:
    rank 0 writes). Raises :class:`ProbeError` naming the output, the sidecar
    and what differs.
    """
    from probe.runs.records import write_json_atomic
    from probe.scoring.cache import combine_parts, fingerprint_parts

    sidecar = input_sidecar(output)
    parts = fingerprint_parts(lm)
    model = {"fingerprint": combine_parts(parts), "parts": parts,
             "name": str(getattr(lm, "name", None)), "source": str(getattr(lm, "source", None))}
    current = {str(r.id): request_digest(r) for r in requests}
    start_over = f"Choose a new --output, or delete {output} and {sidecar} to start over."
    if not done:
        if write:
            write_json_atomic(sidecar, {"format": INPUT_CHECK_FORMAT, "model": model, "requests": current})
        return
    old = _read_sidecar(output, sidecar, len(done), start_over)
    if old["model"].get("fingerprint") != model["fingerprint"]:
        was = old["model"].get("parts", {})
        diffs = ", ".join(f"{k}: {_short(was.get(k))} -> {_short(v)}" for k, v in parts.items() if was.get(k) != v)
        raise ProbeError(
            f"{output} was scored by a different model or model setting ({diffs or 'fingerprint'}): it came from "
            f"{old['model'].get('name')} ({old['model'].get('source')}), this run uses {model['name']} "
            f"({model['source']}), as recorded in {sidecar}. Resuming would mix their scores. {start_over}"
        )
    recorded = old["requests"]
    unknown = sorted(i for i in done if i not in recorded)
    changed = sorted(i for i in done if i in current and recorded.get(i) != current[i])
    if unknown or changed:
        what = (f"{len(changed)} already-scored id(s) have a different request in this input "
                f"(prompt, labels/options, kind, group or joining rule), e.g. {', '.join(map(repr, changed[:3]))}"
                if changed else
                f"{len(unknown)} record(s) are not listed in {sidecar.name}, e.g. {', '.join(map(repr, unknown[:3]))}")
        raise ProbeError(f"{output} was produced from a different input than this run: {what} "
                         f"(recorded in {sidecar}). Resuming would mix old and new scores. {start_over}")
    merged = {**{i: recorded[i] for i in done}, **current}
    if write and merged != recorded:
        write_json_atomic(sidecar, {**old, "requests": merged})


def _read_sidecar(output: Path, sidecar: Path, n_done: int, start_over: str) -> dict:
    if not sidecar.is_file():
        raise ProbeError(
            f"{output} already holds {n_done} record(s) but {sidecar} is missing, so it cannot be checked that they "
            f"came from this input and model. {start_over}"
        )
    try:
        old = json.loads(sidecar.read_text(encoding="utf-8"))
        if (not isinstance(old, dict) or old.get("format") != INPUT_CHECK_FORMAT
                or not isinstance(old.get("model"), dict) or not isinstance(old.get("requests"), dict)):
            raise ValueError(f"not a format-{INPUT_CHECK_FORMAT} input record")
    except (OSError, ValueError) as exc:
        raise ProbeError(f"{sidecar} (the input check of {output}) is unreadable: {exc}. {start_over}") from None
    return old


def _short(value: Any) -> str:
    text = str(value)
    return text[:19] + "..." if len(text) > 22 else text
