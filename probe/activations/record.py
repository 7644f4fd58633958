"""Record activations (and label log-probs) of an item file into a store, in one scoring pass.

The work behind ``probe activations``, callable from Python (notebooks, the
representations analysis) without going through the command layer.
"""

from __future__ import annotations

from typing import Any, Sequence


def record_activations(model: Any, input_path: Any, output: Any, layers: str = "all",
                       hooks: Sequence[str] = ("resid_post",), positions: Sequence[str] = ("last",),
                       chat_template: bool = True, strategy: str = "zero_shot", batch_size: int = 8,
                       shard_size: int = 512, backend: str = "hf", device: str = "cpu", dtype: str = "float32",
                       limit: int | None = None, progress: bool = False) -> dict:
    """Record ``input_path``'s items into the store ``output`` (resumable); ``model`` is a name/path or a
    LoadedModel. Returns the run's counts (items run, items stored before, keys, backend)."""
    import itertools

    from probe.activations.extract import extract
    from probe.activations.hooks import discover, hook_names
    from probe.activations.items import read_items
    from probe.activations.positions import parse_positions
    from probe.activations.store import ActivationWriter
    from probe.activations.tl_backend import make_backend
    from probe.errors import ProbeError

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

    items = read_items(input_path, lm.tokenizer, chat_template, strategy)
    if limit is not None:
        items = itertools.islice(items, limit)
    be = make_backend(lm.model, lm.tokenizer, backend)
    manifest = {
        "format": 1, "model": lm.info() if hasattr(lm, "info") else {"name": str(model)},
        "hooks": names, "positions": [s.name for s in specs],
        "keys": [f"{h}@{s.name}" for h in names for s in specs],
        "d_model": discover(lm.model).d_model, "chat_template": chat_template, "strategy": strategy,
        "extra": {"backend": be.name, "input": str(input_path)},
    }
    with ActivationWriter(output, manifest, shard_size=shard_size) as writer:
        before = len(writer.done)
        n = extract(be, lm.tokenizer, items, names, specs, writer, batch_size=batch_size,
                    progress=progress, source=str(input_path))
    return {"output": str(output), "items_run": n, "items_before": before, "keys": len(manifest["keys"]),
            "backend": be.name}
