"""``probe activations``: record activations (and label log-probs) of an item file, through the Runner.

A thin front on the one road (``docs/activations.md``): the items become scorer
requests, scored by the :class:`~probe.runs.runner.Runner` with ``capture``
(activations read in the scoring passes, prefix sharing on), so the store is
resumable, sharded with ``--shard I/N`` and checked against the model, as a
task run's ``activations/`` is. Example::

    probe activations --model smollm2 --input items.jsonl --output runs/acts \\
        --capture 'blocks.*.hook_resid_post@last,mean:background'

The store directory holds ``manifest.json``, ``items.jsonl`` and ``shards/``
(read with ``probe.activations.load(OUTPUT)``) and the run's records
(``records.jsonl``, with its input check).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from probe.commands.common import bounded_int, positive_int_or_auto, shard_spec
from probe.errors import InputError, ProbeError
from probe.io import check_links, check_locks, check_owned_dir, check_records, json_has, read_records
from probe.tasks import available, get

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.

#: the records file inside the store directory (the Runner's; resume reads it)
RECORDS = "records.jsonl"


def register(groups: dict[str, argparse._SubParsersAction]) -> None:
    p = groups[""].add_parser(
        "activations", help="record activations at chosen hooks and positions while scoring the labels",
        description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2", help="built-in name, local directory, .gguf file or hub id")
    p.add_argument("--input", required=True, help="items JSONL (prompt items as `probe score` takes, or items in a task's own format)")
    p.add_argument("--output", required=True, help="store directory (resumable: re-run to continue)")
    p.add_argument("--capture", nargs="+", default=None, metavar="HOOK@POSITION",
                   help="what to record, e.g. 'blocks.*.hook_resid_post@last,mean:background' (layers: *, N or "
                        "0,5,-1; hooks: resid_pre, resid_post, attn_out, mlp_out, or a TransformerLens hook with "
                        "--backend tl; positions: last, label, span:FIELD, mean:FIELD). Default: "
                        "blocks.*.hook_resid_post@last")
    old = p.add_argument_group("older spelling (the same as --capture blocks.LAYERS.hook_HOOK@POSITIONS)")
    old.add_argument("--layers", default=None, help="'all' or a comma list such as 0,5,-1")
    old.add_argument("--hooks", default=None, help="comma list of resid_pre,resid_post,attn_out,mlp_out")
    old.add_argument("--positions", default=None, help="comma list of last, label, span:FIELD, mean:FIELD")
    p.add_argument("--no-chat-template", action="store_true", help="render `user` items as plain text")
    p.add_argument("--strategy", choices=("zero_shot", "safety"), default="zero_shot",
                   help="prompt strategy for items in a task's own format (labelled options)")
    p.add_argument("--batch-size", type=positive_int_or_auto, default=None,
                   help="most sequences per forward pass, or auto (as probe run; default: auto)")
    p.add_argument("--shard-size", "--chunk-size", dest="shard_size", type=int, default=512,
                   help="items per chunk and safetensors shard (default 512)")
    p.add_argument("--backend", choices=("hf", "tl", "auto"), default="hf",
                   help="hf: plain torch hooks in the scoring passes; tl: the same passes through the model wrapped "
                        "by a TransformerLens 4.x TransformerBridge, read at its own hook points (eager attention); "
                        "auto: tl where the architecture is supported, else hf")
    p.add_argument("--device", default="auto", help="auto (default: the GPU when one is visible), cpu, cuda, cuda:N, mps")
    p.add_argument("--dtype", default="auto", choices=["float32", "bfloat16", "float16", "auto"],
                   help="default: auto = bfloat16 on a GPU that supports it, else float32")
    p.add_argument("--threads", type=bounded_int(1, None), default=None, help="torch CPU threads")
    p.add_argument("--limit", type=int, default=None, help="only the first N items")
    p.add_argument("--no-progress", "--quiet", dest="quiet", action="store_true", help="no progress bar")
    p.add_argument("--shard", default=None, metavar="I/N", type=shard_spec,
                   help="record only shard I of N (0-based; chunks of --shard-size items, chunk k to shard k mod N) "
                        "into the store OUTPUT.rankI-of-N, with no process group (a job array); once all N have "
                        "finished, the same command without --shard folds them into OUTPUT, as one process writes it")
    p.set_defaults(func=run)


def capture_keys(args: argparse.Namespace, n_layers: int) -> list[str]:
    """``--capture``, or the older ``--layers/--hooks/--positions`` as the same keys: one per layer and hook
    kind, layer-major (so the store's manifest is the one those options always wrote)."""

    old = [args.layers, args.hooks, args.positions]
    if args.capture and any(v is not None for v in old):
        raise ProbeError("give --capture HOOK@POSITION, or the older --layers/--hooks/--positions, not both")
    if args.capture:
        return list(args.capture)
    from probe.activations.hooks import HOOK_KINDS

    layers = (args.layers or "all").strip()
    try:
        idx = list(range(n_layers)) if layers == "all" else [int(x) for x in layers.split(",") if x.strip()]
    except ValueError:
        raise ProbeError(f"--layers: expected 'all' or a comma list such as 0,5,-1, got {layers!r}") from None
    wrong = [i for i in idx if not -n_layers <= i < n_layers]
    if wrong:
        raise ProbeError(f"--layers: layer {wrong[0]} is out of range for a model with {n_layers} layers")
    idx = [i % n_layers for i in idx]
    hooks = [h.strip() for h in (args.hooks or "resid_post").split(",") if h.strip()]
    bad = [h for h in hooks if h not in HOOK_KINDS]
    if bad:
        raise ProbeError(f"--hooks: unknown hook kind {bad[0]!r}; choose from {', '.join(HOOK_KINDS)}")
    positions = ",".join(x.strip() for x in (args.positions or "last").split(",") if x.strip())
    return [f"blocks.{i}.hook_{h}@{positions}" for i in idx for h in hooks]


def run(args: argparse.Namespace) -> int:
    from probe.runs.shard import detect

    if args.shard_size < 1:
        raise ProbeError("--shard-size must be >= 1")
    procs = detect()
    if procs.distributed:  # refused before the model loads: every process would record every item
        raise ProbeError(f"probe activations runs in one process, but {procs.world_size} were launched "
                         "(accelerate launch / torchrun): run it without a launcher, or split it into a job array "
                         "with --shard I/N")
    stats = record(args.model, args.input, Path(args.output), lambda n: capture_keys(args, n),
                   chat_template=not args.no_chat_template, strategy=args.strategy, batch_size=args.batch_size,
                   chunk_size=args.shard_size, backend=args.backend, device=args.device, dtype=args.dtype,
                   threads=args.threads, limit=args.limit, progress=not args.quiet, shard=args.shard)
    print(json.dumps(stats, indent=2), file=sys.stdout)
    return 0


def record(model: Any, input_path: Any, output: Path, capture: Any = ("blocks.*.hook_resid_post@last",),
           chat_template: bool = True, strategy: str = "zero_shot", batch_size: Any = None, chunk_size: int = 512,
           token_budget: Any = "auto", backend: str = "hf", device: str = "auto", dtype: str = "auto", threads: int | None = None,
           limit: int | None = None, progress: bool = True, shard: str | None = None) -> dict:
    """Score ``input_path``'s items through the Runner, capturing ``capture`` (``HOOK@POSITION`` keys, or a
    function of the model's layer count giving them) into the store ``output``; returns the counts."""
    from probe.activations.scoring_capture import CaptureSpec, layer_count
    from probe.models.tl_adapter import backend_name, with_backend
    from probe.prompts.capture_items import read_capture_items
    from probe.runs.runner import RunOptions, Runner, load
    from probe.runs.sharding import ShardPending

    try:
        options = RunOptions(device=device, dtype=dtype, batch_size=batch_size or "auto", chunk_size=chunk_size,
                             token_budget=token_budget, threads=threads, progress=progress,
                             backend="tl" if backend == "tl" else "hf", shard=shard)
    except ValueError as exc:  # a bad --device, --threads, ...: one line, before the model loads
        raise ProbeError(f"probe activations: {exc}") from None
    check_store_dir(output)  # a link, a user's folder or another command's records: refused before the model loads
    lm = load(model, options)
    if backend == "auto":  # tl where the architecture is supported, else hf (with_backend says why)
        lm = with_backend(lm, "auto", copy=False)
    items = read_capture_items(input_path, lm.tokenizer, chat_template, limit,
                               task_items=task_item_reader(lm.tokenizer, chat_template, strategy))
    if not items.requests:
        raise InputError(input_path, None, None, "no items (the file is empty)")
    with Runner(lm, options) as runner:
        n_layers = layer_count(lm.model)
        keys = capture(n_layers) if callable(capture) else list(capture)
        try:
            spec = CaptureSpec.parse(keys, n_layers=n_layers, **items.spec_kwargs())
            spec.check(lm.model)
        except (KeyError, ValueError) as exc:
            raise ProbeError(f"--capture: {exc.args[0] if exc.args else exc}") from None
        _check_positions(runner, items, spec, input_path)
        before = _stored(output)
        folding = _shard_items(output)  # complete shard stores are folded in first (or refused, unfinished)
        done = runner.score(items.requests, output / RECORDS, task="activations", capture=spec, capture_dir=output,
                            capture_meta={"chat_template": chat_template, "strategy": strategy},
                            capture_extra={"backend": backend_name(lm.model), "input": str(input_path)})
        if isinstance(done, ShardPending):
            from probe.activations.shards import shard_store
            from probe.runs.shard import rank_chunks

            index, count = (int(x) for x in str(shard).split("/"))
            target = shard_store(output, index, count)
            assigned = sum(len(c) for c in rank_chunks(items.requests, chunk_size, index, count))
            return {"output": str(target), "shard": f"{index}/{count}", "items_stored": _stored(target),
                    "items_assigned": assigned, "keys": len(spec.keys), "backend": backend_name(lm.model)}
        after = _stored(output)
    folded = min(folding, after - before)
    return {"output": str(output), "items_run": after - before - folded, "items_before": before,
            "keys": len(spec.keys), "backend": backend_name(lm.model), **({"items_folded": folded} if folded else {})}


#: what the store writes at its top (``probe.activations.store``; the records and their input check)
STORE_FILES = ("manifest.json", "items.jsonl", "shards", RECORDS, RECORDS + ".input.json")


def check_store_dir(output: Path) -> None:
    """``output`` may take an activation store: absent, empty, or a store (its manifest or records there). A link
    at the store, in it or beside it (its shard stores), a user's folder or records of another command are
    refused with one line, before the model loads."""

    check_locks(output)  # a link at the store's lock path
    check_owned_dir(output, STORE_FILES, lambda out: json_has(out / "manifest.json", "keys")
                    or (out / RECORDS).is_file(), "an activation store")
    check_links(output, recursive=True)
    check_links(output.parent, output.name + ".")
    check_records(output / RECORDS, "activations", hint="choose another --output directory")


def _shard_items(output: Path) -> int:
    """Items held by the shard stores beside ``output`` (a plain run folds complete sets into it)."""
    from probe.activations.shards import shard_stores

    return sum(_stored(path) for members in shard_stores(output).values() for path, _ in members.values())


def _check_positions(runner: Any, items: Any, spec: Any, source: Any) -> None:
    """Resolve every request's positions before any work: bad input names the file, line and field."""

    for line, req in enumerate(items.requests, start=1):
        try:
            spec.target(runner.scorer, runner.scorer.encode(req))
        except ValueError as exc:
            msg = str(exc)
            fields = ("answer_label", *(req.meta or {}))
            field = next((f for f in fields if f"field '{f}'" in msg or f"field {f!r}" in msg), None)
            raise InputError(source, line, field, msg) from exc


def _stored(store: Path) -> int:
    table = store / "items.jsonl"
    return len(read_records(table)[0]) if table.is_file() else 0


def task_item_reader(tokenizer: Any, chat_template: bool = True, strategy: str = "zero_shot") -> Any:
    """``line -> CaptureItem | None``: the first registered task that reads ``line`` in its own item format
    (:meth:`probe.tasks.facets.Analyses.capture_item`), None for a prompt item."""

    tasks = [get(name) for name in available()]

    def read(line: Any) -> Any:
        for task in tasks:
            item = task.analyses.capture_item(line, tokenizer, chat_template=chat_template, strategy=strategy)
            if item is not None:
                return item
        return None

    return read
