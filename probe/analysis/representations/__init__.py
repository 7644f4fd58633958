"""Where does a model turn an implicit cue into a group identity and a stereotyped answer?

    probe analyze representations --config configs/representations.yaml [--model M] [--output DIR]

or from Python::

    from probe.analysis.representations import load_config, run_representations
    out = run_representations(load_config("configs/representations.yaml", {"per_dimension": 40}))

Steps (each resumable or cheap to redo; outputs in ``output_dir``):

1. ``items.jsonl``: a stratified ImplicitBBQ sample (``per_dimension`` items per
   dimension, half explicit, half implicit, balanced over ambiguous/disambiguated
   x negative/non-negative), built by :mod:`probe.data.implicitbbq`.
2. ``acts/``: one scoring pass records the label log-probs and ``resid_post`` of
   every layer at the configured positions (``probe activations``).
3. ``probes.csv`` + ``probe_<task>.png``: per-layer linear probes (grouped CV by
   template, control task, shuffled labels, bootstrap CIs) for the group
   signalled, explicit vs implicit framing and stereotype-consistency of the
   chosen answer; ``transfer.csv``: group probes trained on explicit, tested on implicit.
4. ``lens.png``: logit lens of the option labels over layers.
5. ``patching.npz`` + ``patching.png``: explicit<->implicit and group-swap patching,
   change in the stereotyped option's log-probability per layer and position.
6. ``steering.csv``/``.md``: bias scores before/after adding a direction.

Then ``summary.json`` (and ``provenance.json`` when a provenance function is given).
Modules: :mod:`.config` (settings), :mod:`.items` (sample, labels, patching pairs),
:mod:`.study` (the steps), :mod:`.report` (plots, tables). torch, sklearn and
matplotlib are imported inside the functions that use them.
"""

from probe.analysis.representations.config import RepresentationsConfig, load_config
from probe.analysis.representations.items import (consistency, first_group, lexical_key, patching_pairs,
                                                  sample_items)
from probe.analysis.representations.study import run_representations

__all__ = ["RepresentationsConfig", "consistency", "first_group", "lexical_key", "load_config", "patching_pairs",
           "run_representations", "sample_items"]
