"""The ImplicitBBQ paper's sampler as its authors ran it, with its source (:func:`probe.tasks.paper_samplers.preset`)."""

from __future__ import annotations

from probe.scoring.sampler.chain import SamplerChain, SamplerPreset

#: this folder's presets, collected by :data:`probe.tasks.paper_samplers.PRESETS`
PRESETS: tuple[SamplerPreset, ...] = (
    SamplerPreset(
        name="implicitbbq",
        chain=SamplerChain(temperature=0.1),
        max_new_tokens=None,
        models="every model of the paper (open-weight models under 8B run locally, larger ones through "
               "GroqCloud, closed models through OpenRouter)",
        source="ImplicitBBQ paper, section 4.1: 'We use temperature as 0.1 for all our experiments'; "
               "its code is not public",
        notes=(
            "The paper gives no top-p, top-k, penalty or token budget: top-p 1 and no top-k is what it says.",
            "How the local models were sampled is not stated. transformers' generate given only a temperature "
            "adds top-k 50 and the model's own generation_config.json (Qwen2.5-Instruct's sets top-p 0.8, "
            "top-k 20, repetition penalty 1.05); the API providers' defaults are top-p 1 and no top-k.",
        ),
    ),
)
