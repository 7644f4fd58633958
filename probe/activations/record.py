"""Record activations (and label log-probs) of an item file into a store: ``probe activations``.

A thin front on the one scoring path: the items become scorer requests scored
with ``Scorer.score(capture=...)`` (activations read in the scoring passes,
prefix sharing on) and streamed to the store per chunk, as a task run's are
(:func:`probe.activations.scoring_capture.store_results`). Callable from Python (notebooks, the representations analysis) without going
through the command layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence


def item_request(item: Any) -> Any:
    """The scorer request of an :class:`~probe.activations.items.ActivationItem`: its labels scored at
    the last prompt token, or (no labels) a one-option continuation whose prompt is tokenized the same way
    (its ``answer_label`` as that option, so the ``label`` position is the label's first token)."""
    from probe.scoring.requests import ContinuationRequest, LabelRequest

    if item.labels:
        return LabelRequest(item.id, item.prompt, tuple(item.labels), meta=dict(item.fields))
    return ContinuationRequest(item.id, item.prompt, (item.answer_label or "x",), meta=dict(item.fields))


def item_spec(items: Sequence[Any], hooks: Sequence[str], positions: Sequence[Any]) -> Any:
    """The :class:`CaptureSpec` for ``items``: spans from their fields, searched from where the user text starts."""
    from probe.activations.scoring_capture import CaptureSpec

    return CaptureSpec(tuple(hooks), tuple(positions), fields={it.id: dict(it.fields) for it in items},
                       answer_labels={it.id: it.answer_label for it in items if it.answer_label},
                       search_from={it.id: it.user_start for it in items if it.user_start})


def check_items(scorer: Any, items: Iterable[Any], requests: Sequence[Any], spec: Any, source: str) -> None:
    """Resolve every item's positions before any work: bad input names the file, line and field."""
    from probe.errors import InputError

    for line, (item, req) in enumerate(zip(items, requests), start=1):
        try:
            spec.target(scorer, scorer.encode(req))
        except ValueError as exc:
            msg = str(exc)
            field = next((f for f in ("answer_label", *item.fields) if f"field '{f}'" in msg or f"field {f!r}" in msg),
                         None)
            raise InputError(source, line, field, msg) from exc


def record_activations(model: Any, input_path: Any, output: Any, layers: str = "all",
                       hooks: Sequence[str] = ("resid_post",), positions: Sequence[str] = ("last",),
                       chat_template: bool = True, strategy: str = "zero_shot", batch_size: int = 8,
                       shard_size: int = 512, backend: str = "hf", device: str = "cpu", dtype: str = "float32",
                       limit: int | None = None, progress: bool = False,
                       shard: tuple[int, int] | None = None) -> dict:
    """Record ``input_path``'s items into the store ``output`` (resumable); ``model`` is a name/path or a
    LoadedModel. Returns the run's counts (items run, items stored before, keys, backend).

    ``probe.activations.load(output)`` reads them."""
    import itertools

    from probe.activations.hooks import discover, hook_names
    from probe.activations.items import read_items
    from probe.activations.positions import parse_positions
    from probe.errors import ProbeError

    from probe.models.tl_adapter import with_backend

    if isinstance(model, str):
        from probe.models import load_model
        lm = load_model(model, device=device, dtype=dtype)
    else:
        lm = model
    specs = parse_positions(list(positions))
    try:
        names = hook_names(discover(lm.model), layers, hooks)
    except ValueError as exc:
        raise ProbeError(f"--layers/--hooks: {exc}") from None
    # tl: the same scorer on the model wrapped by a TransformerLens bridge; these names are its hook points
    lm = with_backend(lm, backend, copy=not isinstance(model, str))

    items_iter = read_items(input_path, lm.tokenizer, chat_template, strategy)
    items = list(itertools.islice(items_iter, limit) if limit is not None else items_iter)
    return record_items(lm, items, output, names, specs, batch_size=batch_size, shard_size=shard_size,
                        progress=progress, source=str(input_path),
                        manifest={"chat_template": chat_template, "strategy": strategy}, shard=shard)


def record_items(lm: Any, items: Sequence[Any], output: Any, hook_names: Sequence[str], positions: Sequence[Any],
                 batch_size: int = 8, shard_size: int = 512, token_budget: int = 8192, progress: bool = False,
                 source: str = "items", manifest: dict | None = None,
                 shard: tuple[int, int] | None = None) -> dict:
    """Score :class:`~probe.activations.items.ActivationItem` s with ``Scorer.score(capture=...)`` into the
    store ``output``, one shard per ``shard_size`` items; resumable (stored ids are skipped). Returns the counts.
    ``shard=(I, N)``: record only chunks ``k % N == I`` into the store ``<output>.rankI-of-N``
    (:mod:`probe.activations.shards`); a later call without it folds a complete set in first.

    The same capture and store writing as a task run's (``probe run TASK --capture``); the Runner is not
    used because this layer sits below it (the representations analysis calls this)."""
    from probe.activations.scoring_capture import store_results
    from probe.activations.store import ActivationWriter
    from probe.scoring import Scorer
    from probe.models.fingerprint import combine_parts, fingerprint_parts
    from probe.scoring.cache import ENGINE_VERSION
    from probe.models.tl_adapter import backend_name

    backend = backend_name(lm.model)

    requests = [item_request(it) for it in items]
    spec = item_spec(items, hook_names, positions)
    scorer = Scorer(lm, batch_size=batch_size, token_budget=token_budget)
    check_items(scorer, items, requests, spec, source)
    head = {"format": 1, "model_fingerprint": combine_parts(fingerprint_parts(lm, ENGINE_VERSION))[:12], "hooks": list(spec.hooks),
            "positions": [p.name for p in spec.positions], "keys": spec.keys, "d_model": spec.check(lm.model),
            **(manifest or {}),
            "extra": {"model": lm.info() if hasattr(lm, "info") else {}, "backend": backend, "input": source}}
    from probe.activations.shards import fold_stores, shard_marker, shard_store, write_marker

    ids = [str(r.id) for r in requests]
    if shard is not None:
        index, count = shard
        target = shard_store(output, index, count)
        chunks = [requests[s:s + shard_size] for s in range(0, len(requests), shard_size)]
        mine = [c for k, c in enumerate(chunks) if k % count == index]
        with ActivationWriter(target, head, shard_size=shard_size) as writer:
            write_marker(target, shard_marker(index, count, shard_size, ids, complete=False))
            before = len(writer.done)
            for part in mine:  # a chunk is scored whole, as in one process, so its numbers are the same
                if any(r.id not in writer.done for r in part):
                    store_results(writer, spec, scorer.score(part, capture=spec))
            n = len(writer.done) - before
        write_marker(target, shard_marker(index, count, shard_size, ids, complete=True))
        return {"output": str(target), "shard": f"{index}/{count}", "items_run": n,
                "items_assigned": sum(len(c) for c in mine), "keys": len(spec.keys), "backend": backend}
    folded = fold_stores(output, head, shard_size, ids)
    with ActivationWriter(output, head, shard_size=shard_size) as writer:
        todo = [r for r in requests if r.id not in writer.done]
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(todo), unit="item", desc="activations")
        for start in range(0, len(todo), shard_size):
            part = todo[start:start + shard_size]
            store_results(writer, spec, scorer.score(part, capture=spec))
            if bar:
                bar.update(len(part))
        if bar:
            bar.close()
    return {"output": str(output), "items_run": len(todo), "items_before": len(requests) - len(todo) - folded,
            "keys": len(spec.keys), "backend": backend, **({"items_folded": folded} if folded else {})}


def score_items(lm: Any, items: Sequence[Any], batch_size: int = 8, progress: bool = False) -> list[dict]:
    """The label records (``probe activations``' table schema, no activations) of ``items``, in their
    order, scored by the one :class:`~probe.scoring.Scorer` (so it also scores under
    :func:`probe.activations.hooks.intervene`, e.g. for steering). ``lm``: anything with ``.model`` and
    ``.tokenizer``."""
    from probe.activations.scoring_capture import capture_record
    from probe.scoring import Scorer

    results = Scorer(lm, batch_size=batch_size).score([item_request(it) for it in items], progress=progress)
    return [capture_record(r) for r in results]
