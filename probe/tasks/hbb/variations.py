"""HBB-SG sentence variations: generated with the authors' prompt, or read from a file.

The paper (appendix E.1) scores n = 10 variations per option. The authors' variation prompt
(``qa_generate2_more_sentences.txt``) asks for 9 sentences in one answer, for one option of
one concept pair, with ``[[X]]`` kept: so one greedy generation per concept pair and option
(the runner's generate step: recorded in ``generations.jsonl`` and resumed), parsed into its
sentences, and the original option first make the n variations. Variation j of s1 is paired
with variation j of s2 (normalized together, :func:`probe.metrics.hbb.sg_prob_a`).

A variations file (``variations_file``) is JSONL, one line per concept pair:
``{"concept_id": int, "s1": [templates], "s2": [templates]}`` (``[[X]]`` slots, the j-th of
each list paired); a run writes the variations it scored in this format
(``sg_variations.jsonl``), so one model's generations can be scored by another.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import pandas as pd

from probe.errors import ProbeError

Variations = dict[int, tuple[tuple[str, ...], tuple[str, ...]]]
GENERATE_KIND = "sg_generate"  # meta["kind"] of a variation generation (the runner times it apart)


def generation_id(concept_id: int, option: int) -> str:
    """The id of one variation generation (concept pair x option)."""
    return f"{concept_id}|sg_variations|{option}"


def generation_requests(concepts: Sequence[Any], tokenizer: Any, *, max_new_tokens: int,
                        chat_template: bool = True, system: str | None = None) -> list:
    """One greedy generation per concept pair and option, with the authors' variation prompt as the
    user turn under ``system`` (their code sends every prompt with "You are a useful assistant.")."""
    from probe.prompts.chat import render_prompt
    from probe.prompts.hbb import sg_variation_prompt
    from probe.scoring.generate import GenerationRequest

    return [
        GenerationRequest(
            id=generation_id(c.concept_id, k),
            prompt=render_prompt(tokenizer, sg_variation_prompt(c, k), system=system, chat_template=chat_template),
            max_new_tokens=max_new_tokens, group=f"hbb-sg-generate:{c.concept_id}",
            meta={"kind": GENERATE_KIND, "concept_id": c.concept_id, "option": k},
        )
        for c in concepts for k in (1, 2)
    ]


def from_generations(concepts: Sequence[Any], generations: Mapping[str, str], n: int) -> Variations:
    """Per concept pair: (the original s1, then up to n - 1 parsed sentences; the same for s2)."""
    from probe.prompts.hbb import parse_variations

    out: Variations = {}
    for c in concepts:
        per = []
        for k, original in ((1, c.s1), (2, c.s2)):
            gid = generation_id(c.concept_id, k)
            if gid not in generations:
                raise ProbeError(f"hbb: no HBB-SG variations were generated for {gid!r}")
            per.append((original, *parse_variations(generations[gid], n - 1)))
        out[c.concept_id] = (per[0], per[1])
    return out


def from_file(path: str, concepts: Sequence[Any], n: int) -> Variations:
    """The file's variations of these concept pairs, each list cut to ``n``; a concept pair the
    file lacks is an error (a silent fallback to n = 1 would mix two estimators in one run)."""
    from probe.data.hbb import load_sg_variations

    loaded = load_sg_variations(path)
    missing = [c.concept_id for c in concepts if c.concept_id not in loaded]
    if missing:
        raise ProbeError(f"{path}: no variations for concept_id {', '.join(map(str, missing[:10]))}"
                         f"{' ...' if len(missing) > 10 else ''} ({len(missing)} of {len(concepts)})")
    return {c.concept_id: (tuple(loaded[c.concept_id][0][:n]), tuple(loaded[c.concept_id][1][:n]))
            for c in concepts}


def originals(concepts: Sequence[Any]) -> Variations:
    """n = 1: each option is its own only variation."""
    return {c.concept_id: ((c.s1,), (c.s2,)) for c in concepts}


def scored_variations(records: pd.DataFrame) -> pd.DataFrame:
    """The variations the HBB-SG records scored, one row per concept pair (``concept_id``, ``s1``, ``s2``:
    the templates in variation order, paired), read back from the records' ``meta``."""
    if "template" not in records or "concept_id" not in records:
        return pd.DataFrame(columns=["concept_id", "s1", "s2"])
    per: dict[int, tuple[dict, dict]] = {}
    for cid, k, j, t in zip(records["concept_id"], records["option"], records["variation"], records["template"]):
        if isinstance(t, str):
            per.setdefault(int(cid), ({}, {}))[int(k) - 1].setdefault(int(j), t)
    rows = [{"concept_id": cid, "s1": [a[j] for j in sorted(a)], "s2": [b[j] for j in sorted(b)]}
            for cid, (a, b) in sorted(per.items())]
    return pd.DataFrame(rows, columns=["concept_id", "s1", "s2"])


def variation_stats(variations: Mapping[int, tuple[Sequence[str], Sequence[str]]], n: int) -> dict[str, Any]:
    """How many variations each option got (paired: the fewer of the two), and how many fell short of
    ``n``, lack the ``[[X]]`` slot (such a sentence is the same for every identity), repeat an
    earlier variation of the same option (greedy generation can loop) or equal their pair."""
    pairs = [min(len(a), len(b)) for a, b in variations.values()]
    templates = [t for a, b in variations.values() for t in (*a, *b)]
    return {
        "n_concept_pairs": len(pairs),
        "n_requested": n,
        "pairs_per_concept": {"min": min(pairs, default=0), "max": max(pairs, default=0),
                              "mean": sum(pairs) / len(pairs) if pairs else 0.0},
        "n_concepts_short": sum(p < n for p in pairs),
        "n_templates_without_slot": sum("[[X]]" not in t for t in templates),
        "n_repeated_templates": sum(len(x) - len(set(x)) for a, b in variations.values() for x in (a, b)),
        # a pair whose two options are one sentence gives P(A) = 0.5 whatever the model: it dilutes S
        "n_identical_pairs": sum(x == y for a, b in variations.values() for x, y in zip(a, b)),
    }
