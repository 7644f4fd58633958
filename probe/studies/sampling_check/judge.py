"""The sampling check's sampled side: transformers' own ``generate``, independent of probe's sampler.

The exact side (``parse_exact``, the scored label probabilities) computes each
step's distribution with probe's :func:`~probe.scoring.sampler.sampling.sampling_distribution`
and stops at probe's end-of-sequence rule. A judge that sampled with the same
code could not see a mistake there (a nucleus cut, a top-k, an EOS id). So the
K generations per prompt come from ``model.generate(do_sample=True)``, with
transformers' own logits warpers and stopping rule: every setting of the
paper's sampler (:mod:`probe.tasks.paper_samplers`) is passed explicitly, top-k
included (0 = off, so transformers' default top-k 50 is not added), and the
warpers a model's ``generation_config.json`` could add are switched off, so the
sampler is the paper's and nothing else.

>>> generate_kwargs({"temperature": 0.1, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0}, 16)["top_k"]
0
"""

from __future__ import annotations

import zlib
from typing import Any, Mapping, Sequence

import torch
from transformers import DynamicCache

from probe.errors import ProbeError
from probe.hf_compat import cache_kwargs
from probe.scoring.tokens import wants_special_tokens
from probe.tasks.paper_samplers import preset as get_preset

__all__ = ["JUDGE", "generate_kwargs", "judge_texts", "prompt_cache", "sampler_settings"]

#: what the report says about the sampled side
JUDGE = "transformers generate (do_sample=True; its own warpers and EOS rule)"

# warpers transformers would take from a model's generation_config.json when a call leaves them unset: their
# "off" values, passed explicitly
_OFF = {"typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "no_repeat_ngram_size": 0,
        "encoder_repetition_penalty": 1.0, "length_penalty": 1.0, "min_new_tokens": 0, "num_beams": 1}

def sampler_settings(preset: str | None, temperature: float, top_p: float) -> dict[str, Any]:
    """The sampler the judge runs: the paper's preset (:func:`probe.tasks.paper_samplers.preset`) when the check
    names one, else the task's temperature and top-p with nothing else; the task's own temperature and top-p
    win over the preset's (they are what the exact side reads). A penalty ``generate`` has no warper for
    (frequency, presence) is an error, not silently dropped."""

    out = {"temperature": float(temperature), "top_p": float(top_p), "top_k": 0, "min_p": 0.0,
           "repetition_penalty": 1.0, "preset": preset}
    if preset is None:
        return out

    chain = get_preset(preset).chain
    if chain.frequency_penalty or chain.presence_penalty:
        raise ProbeError(f"probe validate sampling: the {preset!r} sampler has a frequency or presence penalty, "
                         "which transformers' generate does not implement")
    out.update(top_k=int(chain.top_k), min_p=float(chain.min_p), repetition_penalty=float(chain.repetition_penalty))
    return out


def generate_kwargs(settings: Mapping[str, Any], max_new_tokens: int) -> dict[str, Any]:
    """``generate`` keyword arguments for ``settings`` (:func:`sampler_settings`): every warper set explicitly."""
    kw = {"do_sample": True, "max_new_tokens": int(max_new_tokens), "temperature": float(settings["temperature"]),
          "top_p": float(settings["top_p"]), "top_k": int(settings.get("top_k", 0)),
          "repetition_penalty": float(settings.get("repetition_penalty", 1.0)), **_OFF}
    # min_p 0 keeps every token; None would let a model's generation_config.json set one
    kw["min_p"] = float(settings.get("min_p", 0.0))
    return kw


def _eos(model: Any, tokenizer: Any) -> set[int]:
    """The ids transformers' generate stops at (the model's generation config, else the tokenizer's)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return set() if eos is None else {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}


def judge_texts(lm: Any, prompts: Sequence[str], k: int, seed: int, settings: Mapping[str, Any],
                max_new_tokens: int, keys: Sequence[str] | None = None, prompts_per_call: int = 1,
                progress: Any = None) -> list[list[str]]:
    """K generations per prompt from ``lm.model.generate``.

    With ``prompts_per_call`` 1 (the default), one call per prompt, K rows after one shared prompt pass
    (:func:`prompt_cache`), torch's generator seeded from ``seed`` and the prompt's key (default the prompt
    itself), so a prompt's samples do not depend on the others. With more, that many prompts share a call
    (left-padded, K rows each, the generator seeded from ``seed`` and the call's keys): a GPU runs a call's
    rows side by side, so long answers (2048 tokens) take one call's steps for many prompts, but a prompt's
    samples then depend on which prompts share its call (they are as random, not the same ones).
    A generation ends where generate ends it; its new tokens up to the first EOS are decoded without special
    tokens, as the exact side decodes. ``progress``: called with the prompts done after each call."""

    model, tok = lm.model, lm.tokenizer
    device = next(model.parameters()).device
    eos = _eos(model, tok)
    pad = tok.pad_token_id if tok.pad_token_id is not None else (min(eos) if eos else 0)
    kw = generate_kwargs(settings, max_new_tokens)
    keys = list(keys if keys is not None else prompts)
    step = max(1, int(prompts_per_call))
    out: list[list[str]] = []
    with torch.inference_mode():
        for at in range(0, len(prompts), step):
            ids = [tok(p, add_special_tokens=wants_special_tokens(tok, p))["input_ids"] for p in prompts[at:at + step]]
            width = max(len(x) for x in ids)
            # left padding: every row's new tokens start at the same column, as generate expects
            x = torch.tensor([[pad] * (width - len(r)) + r for r in ids], dtype=torch.long, device=device)
            mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in ids], dtype=torch.long, device=device)
            cache = prompt_cache(model, x, k) if len(ids) == 1 else None
            xs, ms = x.repeat_interleave(k, dim=0), mask.repeat_interleave(k, dim=0)
            torch.manual_seed(zlib.crc32(f"{seed}:{chr(0).join(keys[at:at + step])}".encode()))
            seqs = model.generate(xs, attention_mask=ms, pad_token_id=pad,
                                  **(cache_kwargs(model, cache) if cache is not None else {}), **kw)
            rows = seqs[:, width:].tolist()
            for i in range(len(ids)):
                texts = []
                for row in rows[i * k:(i + 1) * k]:
                    cut = next((j for j, t in enumerate(row) if t in eos), len(row))
                    texts.append(tok.decode(row[:cut], skip_special_tokens=True))
                out.append(texts)
            if progress is not None:
                progress(len(out))
    return out


def prompt_cache(model: Any, x: Any, k: int) -> Any:
    """The prompt's keys and values but its last token's, computed once and repeated for ``k`` rows:
    ``generate`` continues from them (transformers' prefix caching), so the K samples of a long prompt cost
    one prompt pass, not K (``num_return_sequences`` would run the prompt K times). None for a one-token
    prompt or a model without a dynamic cache."""

    if x.shape[1] < 2:
        return None
    cache = DynamicCache()
    model(input_ids=x[:, :-1], use_cache=True, **cache_kwargs(model, cache))  # the name this release takes
    cache.batch_repeat_interleave(int(k))
    return cache
