"""Where does a model turn an implicit cue into a group identity and a stereotyped answer?

A study of an ImplicitBBQ run, on the one road: the run is scored and its
activations captured by the Runner, then analysed::

    probe run implicitbbq --set 'answer_formats=[labels]' --set 'strategies=[zero_shot]' \\
        --capture 'blocks.*.hook_resid_post@last' --output runs/ibbq
    probe analyze representations runs/ibbq --output runs/ibbq/representations

or ``probe run configs/representations.yaml`` for the first step. From Python::

    from probe.studies.representations import Settings, run_representations
    out = run_representations("runs/ibbq", "runs/ibbq/representations", Settings(n_boot=200))

Steps (outputs in the output directory):

1. ``probes.csv`` + ``probe_<task>.png``: per-layer linear probes (grouped CV by
   template, control task, shuffled labels, bootstrap CIs) for the group
   signalled first, explicit vs implicit framing and stereotype-consistency of
   the chosen answer; ``transfer.csv``: group probes trained on explicit,
   tested on implicit.
2. ``lens.png``: logit lens of the option labels over layers.
3. ``patching.npz`` + ``patching.png``: explicit<->implicit and A<->B patching
   (the task's own pairs), change in the stereotyped option's log-probability
   per layer and position, through the scorer.
4. ``steering.csv``/``.md``: the task's bias metrics before/after adding a direction.

Then ``summary.json`` and ``provenance.json``. Activations at ``last`` come from
the run's store; span positions (``mean:context``, ``span:question``,
``mean:background``) are captured by re-scoring through the run's Runner.
"""

from probe.studies.representations.study import STEPS, Settings, patching_pairs, run_representations

__all__ = ["STEPS", "Settings", "patching_pairs", "run_representations"]
