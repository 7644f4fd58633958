"""The iso/cmp paper's sampler as its authors ran it, with its source (:func:`probe.tasks.paper_samplers.preset`)."""

from __future__ import annotations

from probe.scoring.sampler.chain import SamplerChain, SamplerPreset

_CMP = "insait-institute/to_cmp_or_not_to_cmp"

#: this folder's presets, collected by :data:`probe.tasks.paper_samplers.PRESETS`
PRESETS: tuple[SamplerPreset, ...] = (
    SamplerPreset(
        name="cmp_iso",
        chain=SamplerChain(temperature=0.7, top_p=0.9, order="vllm"),
        max_new_tokens=2000,
        models="every model of the paper, through vLLM (environments.yaml line 9: vllm==0.17.1)",
        source=f"{_CMP}: model_config/default.yaml lines 10-13 (generation_args: temperature 0.7, top_p 0.9), "
               "passed as vllm.SamplingParams(**generation_args) (src/models/base/vllm_model.py lines 178-182 "
               "and 207-210); max_gen_toks 2000 (default.yaml line 6; src/configs/global_run_settings.py "
               "line 13, 25 generations line 14); paper appendix F.1",
        notes=(
            "Every other setting is vLLM's SamplingParams default: no top-k, min-p 0, no penalties. The model's "
            "generation_config.json is not applied: vLLM uses it only when a call passes no SamplingParams.",
            "Paper (appendix F.1) and code agree on T = 0.7, top-p 0.9. The paper's non-CoT runs use a shorter "
            "token budget (its number is missing from our copy of the text); 2000 is the code's default "
            "(create_bench.py --gen_length).",
        ),
    ),
)
