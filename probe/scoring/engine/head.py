"""The unembedding, checked once per model: the engine's logits are the model's own, or the model is refused.

The engine reads log-probabilities from the decoder's last hidden states through the output embedding (with
the head's scale and soft cap from the config, :meth:`probe.scoring.engine.Engine.logits`), so the full
``[batch, seq, vocab]`` logits never exist. A model whose forward puts more between the two (ModernBERT's
decoder: a dense + norm prediction head before the output embedding) would be scored silently wrong, so one
two-token forward, the first time an engine is built on a model, compares the engine's logits with the
model's own. Where they differ, the model's other top-level modules before the output embedding are tried as
the head (what such a prediction head is); where that does not match either, the model is refused in one line.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from probe.errors import ProbeError

#: model -> its verified head (the module the engine unembeds through) or why none matches (a refusal)
_VERIFIED: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
#: the tokens of the check (any ids the vocabulary holds: the comparison is of the head, not of a text)
_CHECK_IDS = (1, 2)


def verified_head(engine: Any) -> Any:
    """The module ``engine`` unembeds through: the output embedding where the engine's logits equal the
    model's own, else the model's prediction head composed with it where that matches; raises
    :class:`~probe.errors.ProbeError` (one line) where neither does. Checked once per model object."""
    model = engine.model
    try:
        known = _VERIFIED.get(model)
    except TypeError:  # an object that cannot be weakly referenced: checked each time
        known = None
    if known is None:
        known = _verify(engine)
        try:
            _VERIFIED[model] = known
        except TypeError:
            pass
    if isinstance(known, str):
        raise ProbeError(f"{engine.capabilities.model_type}: {known}")
    return known


def _verify(engine: Any) -> Any:
    """The head whose logits match the model's own (see :func:`verified_head`), or why none does."""
    head = engine.head
    if head is None or engine.decoder is engine.model:
        return head  # nothing to compare through (the engine's own checks refuse what it cannot run)
    try:
        mine, theirs = _both(engine)
    except Exception:  # noqa: BLE001  (a model whose own forward does not run on two tokens: nothing to compare)
        return head
    half = engine.compute_dtype in (torch.float16, torch.bfloat16)
    if logits_close(mine, theirs, half):
        return head
    extra = _prediction_head(engine)
    if extra is not None:
        composed = torch.nn.Sequential(*extra, head)
        engine.head = composed
        try:
            mine, _ = _both(engine, theirs)
        except Exception:  # noqa: BLE001  (the composition does not run: not the model's head)
            mine = None
        finally:
            engine.head = head
        if mine is not None and logits_close(mine, theirs, half):
            return composed
    return ("the model's logits are not its output embedding of the decoder's last hidden state (a head the "
            "engine does not compute)")


@torch.inference_mode()
def _both(engine: Any, theirs: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The engine's and the model's float32 logits after the check's last token."""
    vocab = int(getattr(engine.config, "vocab_size", 0) or 0) or 3
    ids = torch.tensor([[t % vocab for t in _CHECK_IDS]], device=engine.device)
    hidden = engine.decoder(input_ids=ids).last_hidden_state[:, -1]
    mine = engine.logits(hidden).float().cpu()
    if theirs is None:
        theirs = engine.model(input_ids=ids).logits[:, -1].float().cpu()
    return mine, theirs


def logits_close(mine: torch.Tensor, theirs: torch.Tensor, half: bool) -> bool:
    """Equal up to the rounding of the head's dtype (``half``: 16-bit; the model may cap or scale its logits in
    it, the engine does so in float32), relative to the largest logit: a missing transform moves them by O(1)."""
    if mine.shape != theirs.shape or not torch.equal(mine.isfinite(), theirs.isfinite()):
        return False
    finite = theirs.isfinite()
    if not bool(finite.any()):
        return True
    diff = float((mine[finite] - theirs[finite]).abs().max())
    return diff <= (2e-2 if half else 1e-4) * (float(theirs[finite].abs().max()) + 1.0)


def _prediction_head(engine: Any) -> list[Any] | None:
    """The model's top-level modules that hold neither the decoder nor the output embedding (a prediction head
    between the two), in the order the model registers them; None where there are none."""
    inside = {id(m) for m in engine.decoder.modules()} | {id(m) for m in engine.head.modules()}
    extra = []
    for child in engine.model.children():
        mods = list(child.modules())
        if any(id(m) in inside for m in mods):
            continue
        extra.append(child)
    return extra or None
