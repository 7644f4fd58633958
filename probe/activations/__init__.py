"""Activations recorded in the scoring pass: hooks, positions, a streaming store, backends.

>>> from probe.activations import load      # doctest: +SKIP
>>> ids, arrays = load("runs/acts")          # doctest: +SKIP
>>> arrays["blocks.3.hook_resid_post@last"].shape   # doctest: +SKIP
(n_items, d_model)

Heavy modules (torch) are imported by the submodules that need them; this
package imports only the store (numpy + safetensors). ``CaptureSpec`` (what
``Scorer.score(capture=...)`` records) loads torch on first use.
"""

from typing import Any

from probe.activations.store import Activations, ActivationWriter, load

__all__ = ["Activations", "ActivationWriter", "CaptureSpec", "load"]


def __getattr__(name: str) -> Any:
    # PEP 562: the store (and ``load``) must not pull in torch
    if name == "CaptureSpec":
        from probe.activations.scoring_capture import CaptureSpec

        return CaptureSpec
    raise AttributeError(f"module 'probe.activations' has no attribute {name!r}")
