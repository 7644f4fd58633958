"""HBB-SG sentence variations: the authors' released set, generated with their prompt, or read from a file.

Sources (:func:`resolve_source`, config ``sg_source``): ``authors`` - the authors' variation set
(``all_data_more_contexts_questions.csv``, 10 per option and concept pair; ``probe data fetch hbb``),
the default whenever it has been fetched; ``generated`` - written by the evaluated model (below);
``original`` - the options themselves (n = 1); and ``variations_file`` - any file in the JSONL format
below or the authors' CSV format.

The paper (appendix E.1) scores n = 10 variations per option. The authors' variation prompt
(``qa_generate2_more_sentences.txt``) asks for 9 sentences in one answer, for one option of
one concept pair, with ``[[X]]`` kept: so one greedy generation per concept pair and option
(the runner's generate step: recorded in ``generations.jsonl`` and resumed), parsed into its
sentences, and the original option first make the n variations. Variation j of s1 is paired
with variation j of s2 (normalized together, :func:`probe.tasks.hbb.metrics.sg_prob_a`).

A variations file (``variations_file``) is JSONL, one line per concept pair:
``{"concept_id": int, "s1": [templates], "s2": [templates]}`` (``[[X]]`` slots, the j-th of
each list paired); a run writes the variations it scored in this format
(``sg_variations.jsonl``), so one model's generations can be scored by another.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import pandas as pd

from probe.errors import ProbeError
from probe.prompts.chat import render_prompt
from probe.scoring.generate import GenerationRequest
from probe.tasks.hbb.data import authors_variations_path, load_authors_variations, load_sg_variations
from probe.tasks.hbb.prompts import parse_variations, sg_variation_prompt

Variations = dict[int, tuple[tuple[str, ...], tuple[str, ...]]]
GENERATE_KIND = "sg_generate"  # meta["kind"] of a variation generation (the runner times it apart)


def generation_id(concept_id: int, option: int) -> str:
    """The id of one variation generation (concept pair x option)."""
    return f"{concept_id}|sg_variations|{option}"


def generation_requests(concepts: Sequence[Any], tokenizer: Any, *, max_new_tokens: int,
                        chat_template: bool = True, system: str | None = None) -> list:
    """One greedy generation per concept pair and option, with the authors' variation prompt as the
    user turn under ``system`` (their code sends every prompt with "You are a useful assistant.")."""

    return [
        GenerationRequest(
            id=generation_id(c.concept_id, k),
            prompt=render_prompt(tokenizer, sg_variation_prompt(c, k), system=system, chat_template=chat_template),
            max_new_tokens=max_new_tokens, group=f"hbb-sg-generate:{c.concept_id}",
            meta={"kind": GENERATE_KIND, "concept_id": c.concept_id, "option": k},
        )
        for c in concepts for k in (1, 2)
    ]


SOURCES = ("auto", "authors", "generated", "original")


def resolve_source(config: Any) -> tuple[str, str | None]:
    """Which variations a config's HBB-SG scores: ``("file", path)``, ``("authors", path)``,
    ``("generated", None)`` or ``("original", None)``.

    ``variations_file`` wins; else ``sg_source``: ``auto`` (the default) takes the authors' set when it
    has been fetched (:func:`probe.tasks.hbb.data.authors_variations_path`) and ``sg_n > 1``, else the evaluated
    model's generations (``sg_n > 1``) or the originals (``sg_n = 1``); ``authors`` requires the set.
    """

    if config.variations_file:
        return "file", str(config.variations_file)
    mode = config.sg_source
    if mode == "original" or (mode in ("auto", "generated") and config.sg_n == 1):
        return "original", None
    if mode in ("auto", "authors"):
        found = authors_variations_path(config.data_dir)
        if found is not None:
            return "authors", str(found)
        if mode == "authors":
            raise ProbeError("hbb: sg_source 'authors' but the authors' HBB-SG variations are not fetched; run "
                             "`probe data fetch hbb` (or `probe data fetch hbb --from FILE.csv`)")
    return "generated", None


def _norm(sentence: str) -> str:
    """A sentence compared for copies: slot spelled ``[[X]]``, case, spaces, quotes and end punctuation ignored."""
    t = re.sub(r"(?<!\[)\[X\](?!\])", "[[X]]", sentence)
    t = re.sub(r"\s+", " ", t).strip().strip("\"'\u201c\u201d*").strip().rstrip(".!?").strip()
    return t.lower()


def from_generations(concepts: Sequence[Any], generations: Mapping[str, str], n: int
                     ) -> tuple[Variations, dict[int, dict[str, Any]]]:
    """Per concept pair: (the original s1, then up to n - 1 parsed sentences; the same for s2), and what
    was refused.

    A generated sentence that copies the context (SmolLM2-135M often answers the variation prompt with
    the context itself, for both options) is refused: both options' variations would then be one
    sentence, whose pair gives P(A) = 0.5 whatever the model and halves S. So is a pair whose two
    sentences are the same (compared by :func:`_norm`); greedy generation cannot be redrawn, so a refused
    sentence is left out, and the concept pair gets fewer variation pairs. The second value maps
    concept_id -> ``{"context_copies": k, "identical_pairs": [j, ...]}`` (generated variation indices).
    """

    out: Variations = {}
    refused: dict[int, dict[str, Any]] = {}
    for c in concepts:
        per, copies = [], 0
        for k in (1, 2):
            gid = generation_id(c.concept_id, k)
            if gid not in generations:
                raise ProbeError(f"hbb: no HBB-SG variations were generated for {gid!r}")
            sents = parse_variations(generations[gid])
            kept = [t for t in sents if _norm(t) != _norm(c.context)]
            copies += len(sents) - len(kept)
            per.append(kept)
        pairs, identical = [], []
        for j, (a, b) in enumerate(zip(*per), start=1):
            if _norm(a) == _norm(b):
                identical.append(j)
            else:
                pairs.append((a, b))
        pairs = pairs[: n - 1]
        out[c.concept_id] = ((c.s1, *(a for a, _ in pairs)), (c.s2, *(b for _, b in pairs)))
        if copies or identical:
            refused[c.concept_id] = {"context_copies": copies, "identical_pairs": identical}
    return out, refused


def from_authors(path: str, concepts: Sequence[Any], n: int) -> Variations:
    """The authors' variation set for these concept pairs, each option's list cut to ``n`` (checked against
    the concepts: :func:`probe.tasks.hbb.data.load_authors_variations`); a concept pair it lacks is an error."""

    return _pick(path, load_authors_variations(path, concepts), concepts, n)


def _pick(path: str, loaded: Mapping[int, tuple[Sequence[str], Sequence[str]]], concepts: Sequence[Any],
          n: int) -> Variations:
    missing = [c.concept_id for c in concepts if c.concept_id not in loaded]
    if missing:
        raise ProbeError(f"{path}: no variations for concept_id {', '.join(map(str, missing[:10]))}"
                         f"{' ...' if len(missing) > 10 else ''} ({len(missing)} of {len(concepts)})")
    return {c.concept_id: (tuple(loaded[c.concept_id][0][:n]), tuple(loaded[c.concept_id][1][:n]))
            for c in concepts}


def from_file(path: str, concepts: Sequence[Any], n: int) -> Variations:
    """The file's variations of these concept pairs, each list cut to ``n``; a concept pair the
    file lacks is an error (a silent fallback to n = 1 would mix two estimators in one run).
    A ``.csv`` is read in the authors' format (:func:`from_authors`), anything else as JSONL."""
    if str(path).lower().endswith(".csv"):
        return from_authors(path, concepts, n)

    return _pick(path, load_sg_variations(path), concepts, n)


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


def refused_summary(records: pd.DataFrame) -> dict[str, Any]:
    """What the generation step refused (read back from the HBB-SG records' ``meta``): generated sentences
    that copied the context, and generated pairs whose two sentences were one (``concept_id:j``, j the
    generated sentence's index, 1-based)."""
    copies, ids, seen = 0, [], set()
    if "concept_id" in records and "sg_context_copies" in records:
        for cid, n, ident in zip(records["concept_id"], records["sg_context_copies"],
                                 records.get("sg_identical_refused", [None] * len(records))):
            if n is None or n != n or int(cid) in seen:
                continue
            seen.add(int(cid))
            copies += int(n)
            ids += [f"{int(cid)}:{j}" for j in str(ident or "").split(",") if j]
    return {"n_context_copies": copies, "n_identical_pairs": len(ids), "identical_pairs": ids}


def variation_stats(variations: Mapping[int, tuple[Sequence[str], Sequence[str]]], n: int) -> dict[str, Any]:
    """How many variations each option got (paired: the fewer of the two), and how many fell short of
    ``n``, lack the ``[[X]]`` slot (such a sentence is the same for every identity), repeat an
    earlier variation of the same option (greedy generation can loop) or equal their pair."""
    pairs = [min(len(a), len(b)) for a, b in variations.values()]
    # "concept_id:j" of every scored pair whose two option templates are the same sentence
    identical = [f"{cid}:{j}" for cid, (a, b) in sorted(variations.items()) for j, (x, y) in enumerate(zip(a, b))
                 if _norm(x) == _norm(y)]
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
        "n_identical_pairs": len(identical),
        "identical_pairs": identical,
    }
