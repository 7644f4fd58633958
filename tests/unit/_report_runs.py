"""Tiny-model run directories of every task, for the ``probe report`` tests (two models, one extra config)."""

from __future__ import annotations

from pathlib import Path

#: task -> (limit, task options): small samples that keep the tiny model's prompts under 256 positions
TASKS = {
    "bbq": (12, {"answer_formats": ["labels", "oneword"], "n_boot": 20}),
    "crows_pairs": (12, {}),
    "hbb": (8, {"n_boot": 20, "crows_pairs": False, "sg_n": 1}),
    "implicitbbq": (None, {"dimensions": ["age", "gender"], "strategies": ["zero_shot"],
                           "per_cell": {"zero_shot": 1}, "n_boot": 20}),
    "cmp_iso": (2, {"benchmarks": ["bbq"], "max_pairs": 2, "n_iter": 50, "n_boot": 20}),
    "demo": (8, {}),
}


def tiny_named(name: str, seed: int):
    """The tiny random model of ``tests/tiny.py`` named ``name``, with room for BBQ's longer prompts."""
    from probe.models import LoadedModel
    from tests.tiny import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    model = tiny_model(len(tok), seed)
    model.config.max_position_embeddings = 1024  # rotary positions: no weights depend on it
    return LoadedModel(model=model, tokenizer=tok, name=name, source="tests/tiny.py")


def make_runs(root: Path, tasks=tuple(TASKS)) -> dict[str, list[Path]]:
    """task -> run directories: ``tiny-a`` and ``tiny-b`` on every task, and ``tiny-a`` again on ``bbq``
    with another seed (a second config of the same model)."""
    import probe

    models = {"tiny-a": tiny_named("tiny-a", 0), "tiny-b": tiny_named("tiny-b", 1)}
    out: dict[str, list[Path]] = {}
    for task in tasks:
        limit, opts = TASKS[task]
        for name, lm in models.items():
            d = root / f"{task}_{name}"
            probe.evaluate(lm, task, limit=limit, output=d, progress=False, threads=1, **opts)
            out.setdefault(task, []).append(d)
    if "bbq" in tasks:
        d = root / "bbq_tiny-a_seed1"
        limit, opts = TASKS["bbq"]
        probe.evaluate(models["tiny-a"], "bbq", limit=limit, output=d, progress=False, threads=1, **{**opts, "seed": 1})
        out["bbq"].append(d)
    return out
