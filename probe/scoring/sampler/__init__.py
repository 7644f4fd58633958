"""Sampler semantics: what a sampling configuration (temperature, top-k, top-p, min-p, penalties) does to a
model's next-token distribution, step for step as transformers' processors do it.

The bottom room of :mod:`probe.scoring`: it imports no other part of it. :mod:`~probe.scoring.sampler.sampling`
holds the per-call specs and the sampled views of a scored answer; :mod:`~probe.scoring.sampler.chain` the
processor chain over a generated history; :mod:`~probe.scoring.sampler.steps` its single steps.
"""
