"""Tiny random causal LMs and a byte-level tokenizer built offline, for the activation tests.

Each character is one token, except `` A``..`` D`` and `` 1``..`` 3`` (single tokens so
answer labels have distinct first tokens, as in real vocabularies).
"""

from __future__ import annotations

import torch

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def tiny_tokenizer(padding_side: str = "left"):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {c: i for i, c in enumerate(sorted(alphabet))}
    merges = []
    for c in "ABCD123":
        vocab["\u0120" + c] = len(vocab)
        merges.append(("\u0120", c))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                 padding_side=padding_side)
    hf.chat_template = CHAT_TEMPLATE
    return hf


def tiny_llama(tokenizer, n_layers: int = 3, hidden: int = 64, seed: int = 0, attn: str = "eager"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=n_layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                      attn_implementation=attn)
    model = LlamaForCausalLM(cfg).eval()
    model.requires_grad_(False)
    # Random init gives near-uniform outputs; scale up so layers visibly differ.
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(8.0)
    return model
