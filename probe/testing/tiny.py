"""A tiny random Llama with a real byte-level BPE tokenizer, built offline in about a second.

What :func:`probe.testing.check_task` runs a task on when no model is given, and what the project's unit tests
use: no download, deterministic weights (a seed), prompts of any text (byte-level BPE).

>>> lm = tiny_lm()                                        # doctest: +SKIP
>>> lm.name, lm.model.config.num_hidden_layers            # doctest: +SKIP
('tiny-llama', 2)
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from probe.models import LoadedModel


__all__ = ["CHATML", "NO_SYSTEM", "tiny_lm", "tiny_model", "tiny_tokenizer"]

CORPUS = [
    "Person A has wrinkles. Person B has smooth skin. Who was not comfortable using the phone?",
    "The grandfather and the grandson tried to book a cab. Answer: Unknown. Answer: A. Answer: B.",
    "Question: Was the woman the secretary? Yes No Skip. My answer would be: A B C.",
    "I saw a man and a woman at the market. The cat sat on the mat. Not enough information.",
    "Background: Person A wears a tilak. Person B attends Sunday service. Context: they met.",
] * 4
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
NO_SYSTEM = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{{'<start_of_turn>' + message['role'] + '\n' + message['content'] + '<end_of_turn>\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)


@functools.lru_cache(maxsize=None)
def tiny_tokenizer(chat_template: str = CHATML) -> Any:
    """A byte-level BPE tokenizer (vocabulary 400) trained on a fixed corpus, with ``chat_template``."""

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = chat_template
    return fast


def tiny_model(vocab_size: int, seed: int = 0, layers: int = 2) -> Any:
    """A random Llama (64 wide, ``layers`` layers) seeded by ``seed``, its output sharpened so options differ."""

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,  # real BBQ-family prompts (~550 tiny tokens) fit: the scorer enforces the window
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).eval()
    # random init is near-uniform; sharpen so probabilities differ meaningfully between options
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
    model.requires_grad_(False)
    return model


def tiny_lm(seed: int = 0, chat_template: str = CHATML, layers: int = 2, source: str = "probe.testing.tiny") -> Any:
    """The tiny model and tokenizer as a loaded model (:class:`probe.models.LoadedModel`, named ``tiny-llama``)."""

    tok = tiny_tokenizer(chat_template)
    return LoadedModel(model=tiny_model(len(tok), seed, layers), tokenizer=tok, name="tiny-llama", source=source)
