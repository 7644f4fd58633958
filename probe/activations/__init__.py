"""Activations recorded in the scoring pass: hooks, positions, a streaming store, backends.

>>> from probe.activations import load      # doctest: +SKIP
>>> ids, arrays = load("runs/acts")          # doctest: +SKIP
>>> arrays["blocks.3.hook_resid_post@last"].shape   # doctest: +SKIP
(n_items, d_model)

Heavy modules (torch) are imported by the submodules that need them; this
package imports only the store (numpy + safetensors).
"""

from probe.activations.store import Activations, ActivationWriter, load

__all__ = ["Activations", "ActivationWriter", "load"]
