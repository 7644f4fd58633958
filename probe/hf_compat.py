"""The KV-cache argument of a Hugging Face module, by the installed transformers' own API.

transformers 5.24 renamed the cache argument of every model's ``forward``
from ``past_key_values`` to ``cache`` (and the output field likewise); the old
name still works until 5.40 but warns on every call. probe passes a cache by
name on its hottest path, so it asks each module which name its ``forward``
takes instead of pinning one release: the same code runs on the locked
transformers and on newer ones, and the old name is never used where the new
one exists (no ``FutureWarning``).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

NEW, OLD = "cache", "past_key_values"


@functools.lru_cache(maxsize=None)
def _kwarg_of(forward: Any) -> str:
    try:
        params = inspect.signature(forward).parameters
    except (TypeError, ValueError):  # a builtin or C-implemented callable: keep the long-standing name
        return OLD
    return NEW if NEW in params else OLD


def cache_kwarg(module: Any) -> str:
    """``"cache"`` when ``module.forward`` takes the current argument, else ``"past_key_values"``."""
    return _kwarg_of(type(module).forward)


def cache_kwargs(module: Any, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` under the name ``module.forward`` takes (see :func:`cache_kwarg`)."""
    return {cache_kwarg(module): cache}


def output_cache(output: Any) -> Any:
    """The cache a forward returned: the ``cache`` field of current outputs, ``past_key_values`` of older ones."""
    cache = getattr(output, NEW, None)
    return cache if cache is not None else getattr(output, OLD, None)
