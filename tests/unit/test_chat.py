"""Chat templates, system folding, prefill and plain prompts render as documented."""

from __future__ import annotations

from probe.prompts.chat import fold_system, render_prompt
from probe.scoring.tokens import wants_special_tokens
from tests.tiny import NO_SYSTEM, tiny_tokenizer


def test_chat_template_with_system_and_prefill():
    tok = tiny_tokenizer()
    text = render_prompt(tok, "Who?", system="Be brief.", prefill="Answer:")
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWho?<|im_end|>\n<|im_start|>assistant\nAnswer:"
    )
    assert not wants_special_tokens(tok, text)  # BOS already rendered


def test_template_without_system_role_folds_it_into_user_turn():
    tok = tiny_tokenizer(NO_SYSTEM)
    text = render_prompt(tok, "Who?", system="Be brief.")
    assert text == "<start_of_turn>user\nBe brief.\n\nWho?<end_of_turn>\n<start_of_turn>model\n"


def test_plain_prompt_for_base_models():
    tok = tiny_tokenizer()
    assert render_prompt(tok, "Who?", system="Be brief.", prefill="Answer:", chat_template=False) == (
        "Be brief.\n\nWho?\nAnswer:"
    )
    assert render_prompt(tok, "Who?", chat_template=False) == "Who?"
    assert wants_special_tokens(tok, "Who?")


def test_messages_and_fold():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert fold_system(msgs) == [{"role": "user", "content": "S\n\nU"}]
    tok = tiny_tokenizer()
    assert render_prompt(tok, messages=msgs) == render_prompt(tok, "U", system="S")
