"""An independent, deliberately plain computation to check the scorer against:
one sequence at a time, one full forward, ``log_softmax`` over the whole vocabulary.
Tokenization is written out here too (prompt, then " " + option), not taken from probe.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from probe.scoring.sampler.chain import TokenHistory, sample_next, step_distribution


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


class LMCompleter:
    """The hybrid tail's test oracle (no cache, no batching): completes a tail entry with a model and a :class:`~probe.scoring.sampler.chain.SamplerChain`, step by
    step (one full forward a token: slow, simple, exact per path), and parses the text.

    A handle is ``(path, below)``: the generated ids so far, and for a pruned entry the step probability
    ``below`` under which pruning left a child out (the first drawn token is restricted to those children;
    None for an open frontier entry, whose path already ends with its child)."""

    def __init__(self, lm: Any, prompt_ids: Sequence[int], chain: Any, max_new_tokens: int,
                 parser: Callable[[str], Any], eos: set[int], seed: int = 0) -> None:
        self.lm, self.prompt, self.chain = lm, list(prompt_ids), chain
        self.max_new, self.parser, self.eos = int(max_new_tokens), parser, set(eos)
        self.gen = torch.Generator().manual_seed(int(seed))

    def __call__(self, handle: tuple[Sequence[int], float | None], rng: Any = None) -> Any:
        path, below = list(handle[0]), handle[1]
        with torch.inference_mode():
            while len(path) < self.max_new and not (path and path[-1] in self.eos):
                ids = torch.tensor([self.prompt + path], dtype=torch.long, device=self.lm.model.device)
                logits = self.lm.model(input_ids=ids).logits[:, -1].float().cpu()
                dist = step_distribution(logits, self.chain, TokenHistory.from_ids([self.prompt], [path]))
                probs = dist.probs
                if below is not None:  # a pruned entry: only the children pruning left out
                    probs = torch.where(probs < below, probs, torch.zeros_like(probs))
                    below = None
                path.append(int(sample_next(probs, self.gen)[0]))
        text = self.lm.tokenizer.decode([t for t in path if t not in self.eos], skip_special_tokens=True)
        return self.parser(text)
