"""The TransformerLens adapter refuses, naming the versions, when a pass after a KV cache would differ from
one pass over the same tokens (#22): a silently different number is never the fallback."""

from __future__ import annotations

import pytest

pytest.importorskip("transformer_lens")

from probe.models import tl_adapter  # noqa: E402
from probe.errors import ModelLoadError  # noqa: E402
from probe.models.tl_adapter import to_transformer_lens  # noqa: E402
from tests.unit.test_capture_sharing import _model  # noqa: E402


def test_a_dropped_cache_is_refused_with_the_versions(monkeypatch):
    # the cache never reaches the model: the cached pass sees its last token alone, as TransformerLens 4.3 did
    # on transformers 5.24 before the adapter followed the argument's rename
    monkeypatch.setattr(tl_adapter, "cache_kwargs", lambda module, cache: {})  # where the adapter looks it up
    with pytest.raises(ModelLoadError) as err:
        to_transformer_lens(_model("llama"))
    message = str(err.value)
    assert "transformers " in message and "transformer-lens " in message
    assert "--backend hf" in message


def test_a_working_bridge_passes_the_check():
    lm = to_transformer_lens(_model("qwen2"))
    assert lm.model is not None
