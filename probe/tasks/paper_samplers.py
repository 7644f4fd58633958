"""The papers' samplers as their authors ran them, per model family, each number with its source.

Paths and line numbers refer to the authors' repositories
(``insait-institute/to_cmp_or_not_to_cmp``, ``JP-25/Hidden-Bias-Benchmark``) and to
the papers; where code and paper disagree the preset follows what was run and
its ``notes`` say so (``docs/scoring.md``, "The papers' samplers").

>>> preset("hbb").chain.describe()
'T = 0.8, top-k 50, repetition penalty 1.2'
>>> sorted(PRESETS)
['cmp_iso', 'hbb', 'hbb-api', 'implicitbbq']
"""

from __future__ import annotations

from probe.scoring.sampler_chain import SamplerChain, SamplerPreset

_HBB = "JP-25/Hidden-Bias-Benchmark, src/llm_utils.py"
_CMP = "insait-institute/to_cmp_or_not_to_cmp"

PRESETS: dict[str, SamplerPreset] = {p.name: p for p in (
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
)}


def preset(name: str) -> SamplerPreset:
    """The preset ``name`` (one of :data:`PRESETS`)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown sampler preset {name!r} (known: {', '.join(sorted(PRESETS))})") from None
