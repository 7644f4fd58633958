"""``probe activations``: record activations (and label log-probs) in the scoring passes.

A thin front on the one scoring path (``Scorer.score(capture=...)``, prefix
sharing on; ``docs/activations.md``): the items become scorer requests, the
store is resumable. Example::

    probe activations --model smollm2 --input items.jsonl --output runs/acts \\
        --layers all --hooks resid_post --positions last,mean:background
"""

from __future__ import annotations

import argparse
import json
import sys

from probe.commands.common import positive_int_or_auto, shard_spec


def register(groups: dict[str, argparse._SubParsersAction]) -> None:
    p = groups[""].add_parser(
        "activations", help="record activations at chosen layers and positions while scoring the labels",
        description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2", help="built-in name, local directory, .gguf file or hub id")
    p.add_argument("--input", required=True, help="items JSONL (prompt items as `probe score` takes, or BBQ items)")
    p.add_argument("--output", required=True, help="store directory (resumable: re-run to continue)")
    p.add_argument("--layers", default="all", help="'all' or a comma list such as 0,5,-1 (default: all)")
    p.add_argument("--hooks", default="resid_post", help="comma list of resid_pre,resid_post,attn_out,mlp_out")
    p.add_argument("--positions", default="last",
                   help="comma list of last, label, span:FIELD (last token of a span), mean:FIELD")
    p.add_argument("--no-chat-template", action="store_true", help="render `user` items as plain text")
    p.add_argument("--strategy", choices=("zero_shot", "safety"), default="zero_shot",
                   help="prompt strategy for BBQ items (labelled options)")
    p.add_argument("--batch-size", type=positive_int_or_auto, default=8,
                   help="most sequences per forward pass, or auto (probe score --help; default: 8)")
    p.add_argument("--shard-size", type=int, default=512, help="items per chunk and safetensors shard")
    p.add_argument("--backend", choices=("hf", "tl", "auto"), default="hf",
                   help="hf: plain torch hooks in the scoring passes; tl: the same passes through the model wrapped "
                        "by a TransformerLens 4.x TransformerBridge, read at its own hook points (eager attention); "
                        "auto: tl where the architecture is supported, else hf")
    p.add_argument("--device", default="auto", help="auto (default: the GPU when one is visible), cpu, cuda, cuda:N, mps")
    p.add_argument("--dtype", default="auto", choices=["float32", "bfloat16", "float16", "auto"],
                   help="default: auto = bfloat16 on a GPU that supports it, else float32")
    p.add_argument("--limit", type=int, default=None, help="only the first N items")
    p.add_argument("--no-progress", "--quiet", dest="quiet", action="store_true", help="no progress bar")
    p.add_argument("--shard", default=None, metavar="I/N", type=shard_spec,
                   help="record only shard I of N (0-based; chunks of --shard-size items, chunk k to shard k mod N) "
                        "into the store OUTPUT.rankI-of-N, with no process group (a job array); once all N have "
                        "finished, the same command without --shard folds them into OUTPUT, as one process writes it")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from probe.errors import ProbeError

    if args.shard_size < 1:
        raise ProbeError("--shard-size must be >= 1")
    from probe.runs.shard import detect

    procs = detect()
    if procs.distributed:  # every process would record every item into one store: N-fold duplication
        raise ProbeError(f"probe activations runs in one process, but {procs.world_size} were launched "
                         "(accelerate launch / torchrun): each would record every item. Run it without a "
                         "launcher, or use `probe run TASK --capture HOOK@POSITION` (one process) and split the "
                         "input into one job per part")
    try:
        from probe.activations.positions import parse_positions
        specs = parse_positions(args.positions)
    except ValueError as exc:
        raise ProbeError(f"--positions: {exc}") from None
    from probe.activations.record import record_activations

    stats = record_activations(
        model=args.model, input_path=args.input, output=args.output, layers=args.layers,
        hooks=[h.strip() for h in args.hooks.split(",") if h.strip()], positions=[s.name for s in specs],
        chat_template=not args.no_chat_template, strategy=args.strategy, batch_size=args.batch_size, shard_size=args.shard_size,
        backend=args.backend, device=args.device, dtype=args.dtype, limit=args.limit, progress=not args.quiet,
        shard=tuple(int(x) for x in args.shard.split("/")) if args.shard else None)
    print(json.dumps(stats, indent=2), file=sys.stdout)
    return 0
