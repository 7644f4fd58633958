"""The HBB paper's samplers as its authors ran them (open-weight models; the API model), with their sources
(:func:`probe.tasks.paper_samplers.preset`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from probe.scoring.sampler.chain import SamplerChain, SamplerPreset

_HBB = "JP-25/Hidden-Bias-Benchmark, src/llm_utils.py"

#: this folder's presets, collected by :data:`probe.tasks.paper_samplers.PRESETS`
PRESETS: tuple[SamplerPreset, ...] = (
    SamplerPreset(
        name="hbb",
        chain=SamplerChain(temperature=0.8, top_k=50, repetition_penalty=1.2),
        max_new_tokens=2048,
        models="open-weight models (Llama-3.1/3.2 Instruct, Mistral-7B-Instruct-v0.3, Qwen2.5-7B-Instruct) "
               "through transformers' generate",
        source=f"{_HBB}: the wrappers LLM (lines 72-77, GenerationConfig lines 186-196), LLM3_2_V (229-234, "
               "367-378), MISTRAL (405-410, 524-533) and QWEN (561-566, 676-685): max_new_tokens 2048, "
               "repetition_penalty 1.2, top_p 1, top_k 50, do_sample True; T = 0.8 from the paper, appendix A",
        notes=(
            "The wrappers' temperature default is 0.3 (lines 73, 230, 406, 562); the script "
            "that ran the evaluation is not released, so T = 0.8 is the paper's.",
            "The paper states frequency_penalty 0.6 for every experiment; transformers' generate has none. The "
            "wrappers apply repetition_penalty 1.2 instead, which counts every prompt token (the option "
            "letters included) from the first generated token on.",
            "The paper gives top_p 1 and no top-k; the wrappers set top_k 50.",
        ),
    ),
    SamplerPreset(
        name="hbb-api",
        chain=SamplerChain(temperature=0.8, frequency_penalty=0.6),
        max_new_tokens=2048,
        models="GPT-4o through the (Azure) OpenAI chat completions API",
        source=f"{_HBB}: ChatGPT.getOutput lines 762-770 (temperature from the constructor, max_tokens 2048, "
               "top_p 1, frequency_penalty 0.6, presence_penalty 0); T = 0.8 from the paper, appendix A",
        notes=(
            "The constructor's temperature default is 0.3 (line 705); the paper's T = 0.8 is used.",
            "OpenAI documents the penalties as changes of the logits by generated-token counts, not their "
            "place relative to the temperature; probe applies them to the raw logits, as vLLM does.",
        ),
    ),
)

#: the parsed side's samplers (the HBB config's ``parse_sampler``)
PARSE_SAMPLERS = ("hbb", "hbb-api", "plain")


def parse_chain(name: str, temperature: float, top_p: float) -> Any:
    """The parsed side's sampler: the preset ``name`` (:mod:`probe.tasks.hbb.samplers`) at the paper's
    temperature and top-p, or None for ``"plain"`` (temperature and top-p only)."""

    presets = {p.name: p for p in PRESETS}
    if name not in PARSE_SAMPLERS:
        raise ValueError(f"parse_sampler must be one of {', '.join(PARSE_SAMPLERS)}, got {name!r}")
    if name == "plain":
        return None
    return dataclasses.replace(presets[name].chain, temperature=float(temperature), top_p=float(top_p))
