"""The forward engine: rows in, log-probabilities out, with shared prefixes computed once.

The middle room of :mod:`probe.scoring`; it imports the sampler below it and nothing above it (the front,
parse). Its modules:

- :mod:`~probe.scoring.engine.driver`: the pass loop: staging, the out-of-memory back-off, capture taps
  and the counters (what :class:`probe.scoring.Scorer` hands a prefix tree to);
- :mod:`~probe.scoring.engine.forward`: :class:`Engine`, one forward pass of each kind and the read;
- :mod:`~probe.scoring.engine.capabilities`, :mod:`~probe.scoring.engine.head`: which paths are exact for a
  model, and its unembedding checked against its own logits;
- :mod:`~probe.scoring.engine.packed`: the packed pass's layout (whole prefix trees in a few rows);
- :mod:`~probe.scoring.engine.batching`: the prefix tree and the level path's passes;
- :mod:`~probe.scoring.engine.tree_cache`: the key/value store of parse's frontier and the hybrid's tail;
- :mod:`~probe.scoring.engine.memory`, :mod:`~probe.scoring.engine.host_memory`: batch plans and the
  process's allocator setting; :mod:`~probe.scoring.engine.rows`: the engine's input.

Names are loaded on first use (PEP 562), so importing a torch-free module of the package (``rows``,
``memory``) does not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module of this package that defines it
_EXPORTS = {
    "Engine": "forward", "Extension": "forward", "RowOutput": "forward", "HEAD_CHUNK": "forward",
    "PACKED_SDPA_BACKENDS": "forward", "pad_id_of": "forward", "left_pad": "forward", "select_rows": "forward",
    "cache_bytes": "forward", "finite_and_logsumexp": "forward", "input_device": "forward",
    "layer_kinds": "forward", "sdpa_preference": "forward", "flex_attention_on": "forward",
    "Row": "rows", "common_prefix_length": "rows",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
