"""ImplicitBBQ's keys as a reader of the paper names them (the task's ``reporting.terms``): metrics,
prompting strategies, answer formats, context kinds and estimators, for every label a report or warning shows
(:func:`probe.reports.headline.phrase`)."""

from __future__ import annotations

__all__ = ["TERMS"]

TERMS = {
    "bias_amb": "bias score, ambiguous contexts", "bias_dis": "bias score, disambiguated contexts",
    "acc_amb": "accuracy, ambiguous contexts", "acc_dis": "accuracy, disambiguated contexts",
    "acc_dis_all": "accuracy, all disambiguated contexts",
    "expected": "expected (exact probabilities)", "argmax": "argmax (the most likely answer)",
    # strategies (the paper's Section 4 prompts) and answer formats
    "zero_shot": "zero-shot", "safety": "safety instruction", "few_shot": "few-shot", "cot": "chain of thought",
    "oneword": "one-word answer", "labels": "numbered options",
    # context kinds: identity named, signalled by cues, and the two controls
    "explicit": "explicit identity", "implicit": "implicit cues", "neutral": "neutral cues (control)",
    "nochar": "no characteristics (control)",
    # dimensions whose key is not a word
    "ses": "socio-economic status",
}
