"""The papers' samplers as their authors ran them, per model family, each number with its source.

Each task folder declares its paper's presets in its ``samplers`` module (``probe/tasks/<name>/samplers.py``:
``PRESETS``, a tuple of :class:`~probe.scoring.sampler.chain.SamplerPreset`); this module collects them, in
registry order, so a new benchmark adds its sampler in its own folder. Paths and line numbers refer to the
authors' repositories and to the papers; where code and paper disagree the preset follows what was run and
its ``notes`` say so (``docs/scoring.md``, "The papers' samplers").

>>> preset("hbb").chain.describe()
'T = 0.8, top-k 50, repetition penalty 1.2'
>>> sorted(PRESETS)
['cmp_iso', 'hbb', 'hbb-api', 'implicitbbq']
"""

from __future__ import annotations

import importlib

from probe.scoring.sampler.chain import SamplerPreset
from probe.tasks import modules_beside


def _collect() -> dict[str, SamplerPreset]:
    """Every registered task's ``samplers.PRESETS``, by preset name (a name declared twice is an error)."""

    out: dict[str, SamplerPreset] = {}
    for task, module in modules_beside("samplers").items():
        for p in getattr(importlib.import_module(module), "PRESETS", ()):
            if p.name in out:
                raise ValueError(f"sampler preset {p.name!r} is declared twice (again by task {task!r})")
            out[p.name] = p
    return out


PRESETS: dict[str, SamplerPreset] = _collect()


def preset(name: str) -> SamplerPreset:
    """The preset ``name`` (one of :data:`PRESETS`)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown sampler preset {name!r} (known: {', '.join(sorted(PRESETS))})") from None
