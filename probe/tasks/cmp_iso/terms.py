"""iso/cmp's keys as a reader of the paper names them (the task's ``reporting.terms``): paradigms,
metrics, estimators, benchmarks, settings (``direct+neutral``) and prompt variants (``v3``), for every label a
report or warning shows (:func:`probe.reports.headline.phrase`)."""

from __future__ import annotations

from probe.tasks.cmp_iso.prompts import N_VARIANTS

__all__ = ["TERMS"]

TERMS = {
    "iso": "isolated questions (iso)", "cmp": "comparative questions (cmp)",
    "pg_iso": "parity gap, isolated questions (iso)", "pg_cmp": "parity gap, comparative questions (cmp)",
    "expected": "expected (exact probabilities)", "argmax": "argmax (the most likely answer)",
    "paper": "paper-equivalent (the authors' sampling, exactly)",
    # the eight benchmarks, as the paper names them
    "bbq": "BBQ", "stereoset": "StereoSet", "redditbias": "RedditBias", "de_gen": "DiscrimEval (generation)",
    "dt_tox": "DecodingTrust toxicity", "crows_pairs": "CrowS-Pairs", "winobias": "WinoBias", "mmlu": "MMLU",
    # a setting's parts (``direct+neutral``)
    "direct": "direct answer", "cot": "chain of thought", "neutral": "with a neutral option",
    "random": "random instruction order",
    # prompt variants: v0 is the authors' own wording
    **{f"v{i}": f"prompt variant {i}" for i in range(N_VARIANTS)},
}
