"""An independent, deliberately plain computation to check the scorer against:
one sequence at a time, one full forward, ``log_softmax`` over the whole vocabulary.
Tokenization is written out here too (prompt, then " " + option), not taken from probe.
"""

from __future__ import annotations

import torch


def _special(tok, text: str) -> bool:
    return not (tok.bos_token and text.startswith(tok.bos_token))


@torch.no_grad()
def _logprobs(model, ids: list[int]) -> torch.Tensor:
    logits = model(torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)


def label_logprobs(lm, prompt: str, labels: list[str]) -> list[float]:
    tok = lm.tokenizer
    sp = _special(tok, prompt)
    ids = tok(prompt, add_special_tokens=sp).input_ids
    lp = _logprobs(lm.model, ids)[-1]
    out = []
    for label in labels:
        whole = tok(prompt + " " + label, add_special_tokens=sp).input_ids
        out.append(lp[whole[len(ids)]].item())
    return out


def continuation_logprobs(lm, prompt: str, option: str) -> list[float]:
    tok = lm.tokenizer
    sp = _special(tok, prompt)
    ctx = tok(prompt, add_special_tokens=sp).input_ids
    whole = tok(prompt + " " + option, add_special_tokens=sp).input_ids
    lp = _logprobs(lm.model, whole)
    return [lp[i - 1, whole[i]].item() for i in range(len(ctx), len(whole))]


def perplexity(lm, text: str, prefix: str = "") -> tuple[float, int]:
    """(summed NLL, scored tokens); no prefix: conditioned on BOS (or EOS)."""
    tok = lm.tokenizer
    if prefix:
        sp = _special(tok, prefix)
        ctx = tok(prefix, add_special_tokens=sp).input_ids
        whole = tok(prefix + text, add_special_tokens=sp).input_ids
    else:
        start = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        ctx = [start]
        whole = ctx + tok(text, add_special_tokens=False).input_ids
    lp = _logprobs(lm.model, whole)
    nll = -sum(lp[i - 1, whole[i]].item() for i in range(len(ctx), len(whole)))
    return nll, len(whole) - len(ctx)


def result_numbers(result) -> list[float]:
    """Every log-probability a scorer result holds, flattened (for comparisons)."""
    if hasattr(result, "label_mass"):
        return list(result.logprobs)
    if hasattr(result, "options"):
        return [x for t in result.token_logprobs for x in t]
    return list(result.token_logprobs)
