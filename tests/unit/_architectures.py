"""Tiny random models of every decoder-only family the installed transformers builds, for the architecture sweep
(``tests/unit/test_architecture_sweep.py``) and ``tools/architectures.py``.

The families come from transformers itself (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``), less :data:`EXCLUDED` (each
with its reason). A family is built from ``AutoConfig.for_model`` with one shared tiny shape (:data:`SHAPE`: two
layers, hidden size 64) plus its own keys in :data:`TINY` where its config spells a size differently; where the
family has several layer kinds they are mixed, and sliding / local / chunked windows are :data:`WINDOW` tokens,
shorter than the sweep's prompts, so a window that a path ignores shows as a wrong score."""

from __future__ import annotations

from typing import Any

import torch

WINDOW = 8
#: a family whose tiny build still holds more parameters than this is not tiny (its config ignores a size key)
MAX_PARAMETERS = 3_000_000

#: the shape every family gets (unknown keys are harmless attributes); the groups of keys after the first line
#: are other families' spellings of the same sizes (mixture of experts, latent attention, linear attention, SSMs)
SHAPE: dict[str, Any] = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, max_position_embeddings=512, tie_word_embeddings=False,
    num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
    shared_expert_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1,
    num_expert_group=1,
    q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
    index_head_dim=16, index_n_heads=2,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
    linear_num_heads=4, linear_head_dim=16,
    mamba_n_heads=8, mamba_d_head=16, mamba_d_state=16, mamba_dt_rank=8, state_size=16,
)

_HYBRID = {"layer_types": ["linear_attention", "full_attention"]}
_INKLING = {"swa_num_attention_heads": 4, "swa_num_key_value_heads": 2, "swa_head_dim": 16,
            "sliding_window_size": WINDOW}
#: per family: keys beyond SHAPE ("drop": SHAPE keys its config refuses)
TINY: dict[str, dict[str, Any]] = {
    "codegen": {"rotary_dim": 8},
    "gptj": {"rotary_dim": 8},
    "falcon": {"drop": ("head_dim",)},
    "falcon_alibi": {"drop": ("head_dim",), "alibi": True},
    "rwkv_rescaled": {"rescale_every": 1},  # the stream halved after every block at inference: capture refused
    "gpt_neo": {"attention_types": [[["global", "local"], 1]], "window_size": WINDOW},
    "mamba2": {"num_heads": 8, "n_groups": 1},
    "bamba": {"attn_layer_indices": [1]},
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1},
    "granitemoehybrid": _HYBRID,
    "qwen3_next": _HYBRID,
    "qwen3_5_text": _HYBRID,
    "qwen3_5_moe_text": _HYBRID,
    "olmo_hybrid": _HYBRID,
    "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_dense_layers": 1},
    "lfm3": {"layer_types": ["conv", "full_attention"]},
    "recurrent_gemma": {"block_types": ["recurrent", "attention"], "lru_width": 64, "attention_window_size": WINDOW},
    "minicpm3": {"num_key_value_heads": 4},
    "axk2": {"num_key_value_heads": 4},
    "zaya": {"num_experts_per_tok": 1},
    # a looped model: input, recurrent (run n_recurrent_loops times) and output layers
    "dory": {"num_hidden_layers": 3, "n_input_layers": 1, "n_output_layers": 1},
    # latent attention: head_dim is the rotary part, and keys have as many heads as queries (as released)
    **{t: {"head_dim": 8, "num_key_value_heads": 4} for t in ("deepseek_v3", "axk1", "youtu", "longcat_flash",
                                                              "glm4_moe_lite", "glm_moe_dsa", "deepseek_v32",
                                                              "sarvam_mla")},
    "deepseek_v2": {"num_key_value_heads": 4},
    "kimi_linear": {**_HYBRID, "q_lora_rank": None, "num_key_value_heads": 4},
    "bailing_hybrid": {**_HYBRID, "num_key_value_heads": 4},
    "falcon_h1": {"mamba_d_ssm": 128, "mamba_n_heads": 8, "mamba_d_head": 16},
    "zamba": {"layers_block_type": ["linear_attention", "hybrid"], "attention_hidden_size": 128,
              "attention_head_dim": 32, "n_mamba_heads": 2},
    "zamba2": {"layers_block_type": ["linear_attention", "hybrid"], "hybrid_layer_ids": [1], "mamba_headdim": 16,
               "n_mamba_heads": 8, "attention_hidden_size": 128, "attention_head_dim": 32, "adapter_rank": 8},
    "inkling2_text": _INKLING,
    "inkling2_loop_text": {**_INKLING, "num_hidden_layers": 3, "n_layers_per_attn_res_block": 1,
                           "loop_layer_index_start": 1, "loop_layer_index_end": 2, "loop_num_passes": 2,
                           "loop_gate_rank": 8},
    "ergo": {"first_dense_intermediate_size": 128, "shared_intermediate_size": 32,
             "global_attention_every_n_layers": 2},
    "kolibri1_1": {"layer_types": ["indexed_attention", "sliding_attention"], "index_layers": [0],
                   "kv_source_layers": [0, 1], "index_num_heads": 2, "index_topk": 4, "index_pool_size": 8,
                   "index_compression": 2, "index_num_local_tokens": 2, "index_num_sink_tokens": 1, "mlp_only_intermediate_size": 128},
    "gemma4_text": {"vocab_size_per_layer_input": 400, "hidden_size_per_layer_input": 8,
                    "per_layer_config": {"01": {"head_dim": 32}}},
    "dbrx": {"d_model": 64, "n_heads": 4, "n_layers": 2, "max_seq_len": 512,
             "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
             "ffn_config": {"ffn_hidden_size": 128, "moe_num_experts": 4, "moe_top_k": 2}},
}
#: a family swept twice: name -> (model type, the TINY entry of the variant)
VARIANTS = {"falcon_alibi": "falcon", "rwkv_rescaled": "rwkv"}

_ENCODER = "an encoder family whose causal-LM head is a decoder for encoder-decoder training, not a decoder-only LM"
_COMPOSITE = "a multimodal composite (vision / audio towers, full-size defaults); its text decoder is swept on its own"
#: model type -> why the sweep does not build it
EXCLUDED: dict[str, str] = {
    **{t: _ENCODER for t in ("bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie",
                             "megatron-bert", "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer",
                             "xlm", "xlm-roberta", "xlm-roberta-xl", "xmod", "trocr")},
    **{t: _COMPOSITE for t in ("blt", "emu3", "gemma3", "gemma3n", "gemma4", "gemma4_unified", "git", "got_ocr2",
                               "llama4", "mllama", "moss_transcribe_diarize", "phi4_multimodal", "qwen3_5",
                               "qwen3_5_moe", "qwen4_exp", "dots3_note", "fuyu", "moshi")},
    "prophetnet": "an encoder-decoder (its config refuses num_hidden_layers)",
    "reformer": "locality-sensitive hashing attention with chunked, bucketed positions; no tiny causal build",
    "xlnet": "a permutation language model with two streams, not a causal decoder",
    "cpmant": "its config ignores the shared size keys (a 4M-parameter minimum at 2 layers)",
    "gemma4_assistant": "a draft head for speculative decoding; needs a target model's states",
    "gemma4_unified_assistant": "a draft head for speculative decoding; needs a target model's states",
    "gemma3n_text": "per-layer inputs and shared KV layers refuse a two-layer build in this release",
    "dots3_note_text": "per-layer overrides for 46 layers; refuses a two-layer build in this release",
    "cohere_compass_text": "its attention reads a layer-type table the two-layer config does not fill (KeyError)",
    "xlstm": "its matrix-memory kernel refuses the tiny head shapes in this release",
    "qwen4_exp_text": "its indexer sizes have no tiny default in this release",
}


def families() -> list[str]:
    """The sweep's families: every causal-LM model type of this transformers release that is not
    :data:`EXCLUDED` and not an encoder-decoder, plus the :data:`VARIANTS`."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    out = []
    for t in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        if t in EXCLUDED:
            continue
        try:
            if transformers.models.auto.configuration_auto.CONFIG_MAPPING[t]().is_encoder_decoder:
                continue
        except Exception:  # noqa: BLE001  (a config that refuses its defaults: the sweep reports it)
            pass
        out.append(t)
    return sorted(out + list(VARIANTS))


def config_of(family: str, vocab: int, special: dict[str, int]) -> Any:
    """The tiny config of ``family``: SHAPE, its TINY keys, mixed layer kinds and short windows."""
    import transformers

    model_type = VARIANTS.get(family, family)
    extra = dict(TINY.get(family, {}))
    drop = extra.pop("drop", ())
    # a family whose head has fewer outputs than the embedding has rows (Inkling's unpadded vocabulary) gets both
    kw = {k: v for k, v in {**SHAPE, **special, "vocab_size": vocab, "unpadded_vocab_size": vocab, **extra}.items()
          if k not in drop}
    cfg = transformers.AutoConfig.for_model(model_type, **kw)
    if cfg.is_encoder_decoder:
        raise ValueError(f"{family} is an encoder-decoder")
    windows = _windows(cfg)
    if windows:
        cfg = transformers.AutoConfig.for_model(model_type, **{**kw, **windows})
    return cfg


def _windows(cfg: Any) -> dict[str, Any]:
    """Keys that give a family with windowed layers a window shorter than the prompts, and both layer kinds."""
    out: dict[str, Any] = {}
    types = list(getattr(cfg, "layer_types", None) or [])
    kinds = set(types)
    if getattr(cfg, "sliding_window", None) or "sliding_attention" in kinds:
        out["sliding_window"] = WINDOW
        if types and kinds <= {"sliding_attention", "full_attention"}:
            out["layer_types"] = _alternating("sliding_attention", len(types))
    if "chunked_attention" in kinds:
        out["attention_chunk_size"] = WINDOW
        out["layer_types"] = _alternating("chunked_attention", len(types))
    return out


def _alternating(kind: str, n: int) -> list[str]:
    """``n`` layer kinds: ``kind``, full attention, ``kind``, ..."""
    return [kind if i % 2 == 0 else "full_attention" for i in range(n)]


def build(family: str, attn: str | None = None) -> Any:
    """A :class:`probe.models.LoadedModel` of the tiny random ``family`` (weights spread so that a wrong
    position shows), refusing one that is not tiny (:data:`MAX_PARAMETERS`)."""
    import transformers

    from tests.tiny import spread_lm, tiny_tokenizer

    tok = tiny_tokenizer()
    special = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    cfg = config_of(family, len(tok), special)
    if attn is not None:
        cfg._attn_implementation = attn
    with torch.device("meta"):
        size = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(cfg).parameters())
    if size > MAX_PARAMETERS:
        raise ValueError(f"{family}: {size / 1e6:.1f}M parameters at the tiny shape")
    return spread_lm(cfg, tok, f"tiny-{family}")
