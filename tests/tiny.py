"""A tiny random Llama with a real byte-level BPE tokenizer, built offline in ~1 s (:mod:`probe.testing.tiny`).

Used by unit tests: no download, deterministic weights.
"""

from __future__ import annotations

from probe.testing.tiny import CHATML, CORPUS, NO_SYSTEM, tiny_model, tiny_tokenizer  # noqa: F401


def tiny_lm(seed: int = 0, chat_template: str = CHATML, layers: int = 2):
    from probe.testing.tiny import tiny_lm as make

    return make(seed, chat_template, layers, source="tests/tiny.py")


def score_items(n: int) -> list[dict]:
    """``n`` short `probe score` items: labels, continuations every third, groups of two every five."""
    out = []
    for i in range(n):
        item = {"id": f"q{i:03d}", "prompt": f"Who has item {i}?", "options": ["A", "B", "C"]}
        if i % 3 == 1:
            item.update(kind="continuation", options=["Person A", "the grandson"])
        if i % 5 < 2:
            item["group"] = f"g{i // 5}"
        out.append(item)
    return out


def write_items(path, items: list[dict]):
    """Write ``items`` as JSONL to ``path`` and return it."""
    import json

    path.write_text("".join(json.dumps(x) + "\n" for x in items))
    return path


def spread_lm(config, tokenizer, name: str):
    """A random model of ``config`` (seed 0, eval, no gradients) with its 2-D weights scaled by 4: random init
    is near-uniform, and spread logits make a wrong position show. Wrapped as a ``LoadedModel``."""
    import torch
    import transformers

    from probe.models import LoadedModel

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    model.requires_grad_(False)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(4.0)
    return LoadedModel(model=model, tokenizer=tokenizer, name=name, source="tests")
