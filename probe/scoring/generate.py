"""Greedy generation for chain-of-thought settings (reason first, then score the answer).

Greedy decoding is deterministic; prompts are left-padded in batches and each
output is cut at the first EOS or stop string.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from probe.prompts.chat import wants_special_tokens


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
