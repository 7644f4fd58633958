"""Greedy generation for chain-of-thought settings (reason first, then score the answer).

Greedy decoding is deterministic; prompts are left-padded in batches and each
output is cut at the first EOS or stop string.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from probe.scoring.tokens import wants_special_tokens


@torch.inference_mode()
def greedy_generate(
    lm: Any,
    prompts: Sequence[str],
    max_new_tokens: int = 256,
    batch_size: int = 8,
    stop: Sequence[str] = (),
    progress: bool = False,
) -> list[str]:
    """Greedy continuations of ``prompts`` (rendered strings, as the scorer takes them)."""
    tok, model = lm.tokenizer, lm.model
    device = next(model.parameters()).device
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    results: list[str] = [""] * len(prompts)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="generating", unit="batch", leave=False)
    for idx in batches:
        encs = [tok(prompts[i], add_special_tokens=wants_special_tokens(tok, prompts[i]))["input_ids"] for i in idx]
        width = max(len(e) for e in encs)
        ids = torch.full((len(encs), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for j, e in enumerate(encs):
            ids[j, width - len(e):] = torch.tensor(e)
            mask[j, width - len(e):] = 1
        out = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=pad,
        )
        for j, i in enumerate(idx):
            text = tok.decode(out[j, width:], skip_special_tokens=True)
            for s in stop:
                if s in text:
                    text = text[: text.index(s)]
            results[i] = text
    return results


@dataclass(frozen=True)
class GenerationRequest:
    """Greedy generation after a rendered ``prompt`` (chain-of-thought settings), cut at ``stop`` strings."""

    id: str
    prompt: str
    max_new_tokens: int = 1024
    stop: tuple[str, ...] = ()
    group: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False)
    kind: str = field(default="generation", init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError("generation request has an empty or non-string 'id'")
        if not isinstance(self.prompt, str) or not self.prompt:
            raise ValueError(f"generation request {self.id!r}: field 'prompt' is empty")
        if self.max_new_tokens < 1:
            raise ValueError(f"generation request {self.id!r}: max_new_tokens must be positive")


def run_generation(lm: Any, requests: Sequence[GenerationRequest], batch_size: int = 8) -> list[str]:
    """Greedy texts for ``requests`` (in order); requests with the same limits and stops are batched together."""
    out: list[str] = [""] * len(requests)
    by_setting: dict[tuple, list[int]] = {}
    for i, r in enumerate(requests):
        by_setting.setdefault((r.max_new_tokens, r.stop), []).append(i)
    for (max_new, stop), idx in by_setting.items():
        texts = greedy_generate(lm, [requests[i].prompt for i in idx], max_new_tokens=max_new,
                                batch_size=batch_size, stop=stop)
        for i, t in zip(idx, texts):
            out[i] = t
    return out
