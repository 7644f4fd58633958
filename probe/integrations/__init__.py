"""probe's engine inside other evaluation tools.

:mod:`probe.integrations.lm_eval` makes probe's Scorer an
lm-evaluation-harness model (``ProbeLM``). It imports ``lm_eval`` (the
optional ``lm-eval`` extra), so nothing here is imported by ``import probe``;
import the submodule itself.
"""
