"""ImplicitBBQ builder (the ImplicitBBQ paper, sections 3-4): explicit, implicit and control items for six dimensions.

How an item is made (see ``docs/implicitbbq.md``):

1. Templates: BBQ ``Age``, ``Gender_identity``, ``Nationality`` (-> region),
   ``Religion``, ``SES`` and BharatBBQ ``Caste``. Templates whose group is bound
   to a slot by their wording (``resources/implicitbbq_bound.yaml``) take their
   slot groups from the wording, get a rewrite, or are excluded, as listed there.
2. Each template is filled with BBQ's expander; a filling is kept when both
   slots map to a cue group of the paper's Table 4 (``resources/implicit_cues.yaml``),
   the two groups differ, and the stereotyped target is known.
3. Explicit items: the filled template as BBQ writes it (one per filling), for
   every template that keeps at least one cue combination.
4. Implicit context: one per (template row, lexical choice, group pair); its
   text has "Person A"/"Person B" in the slots (:func:`person_rewrite`). A
   context whose text, groups and answers equal an earlier one (BBQ's
   proper-name rows repeat its group-word rows) is not built twice. It is
   crossed with every cue combination (cues of group 1 x cues of group 2)
   except those using a cue excluded for the template
   (``resources/implicitbbq_exclusions.yaml``; per cue by default, where the paper removes the
   template: ``exclusion_unit="template"``, see docs/implicitbbq.md);
   kept combination k puts Person A in slot 1 when k is even and in slot 2
   when odd, so the person-group assignment is counterbalanced. A background
   line is the cue's sentence form (``resources/implicit_cue_sentences.yaml``).
5. Controls per implicit context: neutral (inert cues, both assignments) and
   no-characteristics (no background, both assignments).
6. The explicit set is then resampled so that each (dimension, template) weighs as
   much as in the implicit set (:mod:`probe.tasks.implicitbbq.match`; ``explicit_set="full"``
   keeps every filling once).

Every context yields ambiguous and disambiguated x negative and non-negative
items; ``setting`` is one of :data:`probe.tasks.bbq.items.SETTINGS`.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable, Literal, Sequence

from probe.data.paths import data_root
from probe.fs import file_stamp
from probe.tasks.bbq.data import find_target_index
from probe.io import stable_hash
from probe.tasks.bbq.templates import (SlotFill, TemplateRow, answer_slot, fill_to_items, fills_for_row,
                                       load_vocab, read_templates, slot_text)
from probe.tasks.implicitbbq.implicit_text import (BoundTemplate, CueTable, PersonFix, cue_sentence, load_bound_templates,
                                                   load_cue_table, load_exclusions, load_person_fixes,
                                                   person_agreement, person_rewrite)
# DIMENSIONS lives in implicitbbq_match (record_counts orders by it), so that module never imports this one.
from probe.tasks.implicitbbq.match import DIMENSIONS, PAPER_RECORDS, match_explicit
from probe.tasks.bbq.answer_forms import load_unknown_answers
from probe.tasks.bbq.items import SETTINGS, BBQItem, setting_name

__all__ = ["DIMENSIONS", "EXPLICIT_SETS", "PAPER_COUNTS", "build_implicitbbq", "count_table", "format_count_table"]

#: The paper's totals (sections 3-4), in records (context x question) per condition; see
#: :data:`probe.tasks.implicitbbq.match.PAPER_RECORDS`.
PAPER_COUNTS = {"contexts_per_condition": PAPER_RECORDS["implicit_base"],
                "implicit_instances_per_condition": PAPER_RECORDS["implicit"],
                "explicit_records": PAPER_RECORDS["explicit"]}
EXPLICIT_SETS = ("matched", "full")
PERSONS = ("Person A", "Person B")


def _template_rows(source: str, bbq_dir: Path | None, bharatbbq_dir: Path | None) -> tuple[list[TemplateRow], tuple]:
    kind, category = source.split(":")
    if kind == "bharatbbq":
        from probe.tasks.bbq.bharatbbq import bharatbbq_template_rows

        return bharatbbq_template_rows(bharatbbq_dir), (None, None)
    if bbq_dir is None:
        from probe.data.paths import dataset_dir

        bbq_dir = dataset_dir("bbq")
    tdir = Path(bbq_dir) / "templates"
    return read_templates(tdir / f"{category}.csv", "bbq", category), load_vocab(tdir)


def _slot_groups_from_wording(fill: SlotFill) -> SlotFill:
    """The fill with slot k's group set to the template's ``NAMEk_info`` (the wording's group).

    BBQ's expander flips proper-name pairs together with their group labels; when the text binds
    the group to the slot ("{{NAME1}} is from a {{WORD1}} family"), only the names may move.
    """
    f = fill.row.fields
    i1, i2 = f.get("NAME1_info", "").strip(), f.get("NAME2_info", "").strip()
    t = find_target_index([[fill.name1, i1], [fill.name2, i2]], fill.row.stereotyped_groups)
    return dataclasses.replace(fill, info1=i1, info2=i2, target_slot=None if t is None else t + 1)


def _kept_fills(dim: str, table: CueTable, bbq_dir, bharatbbq_dir, lexical
                ) -> list[tuple[SlotFill, str, str, BoundTemplate | None]]:
    rows, (vocab, names) = _template_rows(table.sources[dim], bbq_dir, bharatbbq_dir)
    bound = load_bound_templates()
    out = []
    for row in rows:
        b = bound.get((dim, row.q_id))
        if b is not None and b.explicit == "exclude" and b.implicit == "exclude":
            continue
        seen: set[str] = set()
        for fill in fills_for_row(row, vocab, names, lexical):
            if b is not None and b.explicit == "slot_groups":
                fill = _slot_groups_from_wording(fill)
            if fill.key in seen:  # a sampled pair and its flip can coincide: one fill, one id
                continue
            seen.add(fill.key)
            g1 = table.cue_group(dim, fill.name1, fill.info1)
            g2 = table.cue_group(dim, fill.name2, fill.info2)
            if g1 is None or g2 is None or g1 == g2 or fill.target_slot is None:
                continue
            out.append((fill, g1, g2, b))
    return out


def _cue_combinations(table: CueTable, dim: str, q_id: str, g1: str, g2: str,
                      exclusion_unit: str = "cue") -> list[tuple[str, str]]:
    """Cues of group 1 x cues of group 2, without the combinations using a cue excluded for the template
    (``exclusion_unit="template"``: none at all when the template has an excluded cue, as the paper words it)."""
    excluded = load_exclusions().get(dim, {}).get(q_id, frozenset())
    if excluded and exclusion_unit == "template":
        return []
    return [(c1, c2) for c1, c2 in itertools.product(table.groups[dim][g1], table.groups[dim][g2])
            if c1 not in excluded and c2 not in excluded]


def _explicit_items(dim: str, fill: SlotFill, g1: str, g2: str, unknown: str) -> list[BBQItem]:
    out = []
    for it in fill_to_items(fill):
        options = tuple(unknown if i == it.unknown_index else o for i, o in enumerate(it.options))
        info = dict(it.answer_info)
        info[f"ans{it.unknown_index}"] = [unknown, "unknown"]
        out.append(dataclasses.replace(
            it, id=f"ibbq-{dim}-exp-{it.id.split('-', 2)[2]}", source="implicitbbq", category=dim,
            options=options, answer_info=info, context_kind="explicit",
            setting=setting_name("explicit", it.context_condition, it.question_polarity),
            metadata={**it.metadata, "group1": g1, "group2": g2, "target_group": g1 if fill.target_slot == 1 else g2}))
    return out


def _person_fixes(dim: str, fill: SlotFill) -> tuple[PersonFix, ...]:
    """The hand-written Person A/B corrections for the fill's template row (``implicitbbq_person_fixes.yaml``)."""
    return tuple(x for x in load_person_fixes().get((dim, fill.row.q_id), ()) if x.applies_to(fill.row.row))


def _implicit_texts(fill: SlotFill, p1: str, p2: str, bound: BoundTemplate | None,
                    fixes: Sequence[PersonFix] = (), fix_hits: dict[tuple, list[int]] | None = None
                    ) -> tuple[str, str, str, str]:
    """(ambiguous context, disambiguated context, negative question, non-negative question) with persons in the slots.

    The automatic form (:func:`person_rewrite`, :func:`person_agreement`, the slot-bound rewrite) is
    then corrected by the template's hand-written ``fixes`` (:func:`_person_fixes`); ``fix_hits``
    (when given) counts each fix's substitutions, keyed by (dimension, Q_id, rows).
    """
    f = fill.row.fields

    def text(col: str) -> str:
        t = person_agreement(slot_text(person_rewrite(f[col], p1, p2, fill.word1, fill.word2), fill, p1, p2), PERSONS)
        t = (bound.rewrite(t) if bound is not None else t).strip()
        for x in fixes:
            hits = None
            if fix_hits is not None:
                hits = fix_hits.setdefault((x.dimension, x.q_id, tuple(sorted(x.rows or ()))), [0] * len(x.fixes))
            t = x.apply(t, hits)
        return t

    amb = text("Ambiguous_Context")
    return (amb, f"{amb} {text('Disambiguating_Context')}".strip(), text("Question_negative_stereotype"),
            text("Question_non_negative"))


def _person_items(dim: str, ctx_id: str, fill: SlotFill, g1: str, g2: str, kind: str, variant: str,
                  swap: bool, cue1: str | None, cue2: str | None, unknown: str,
                  bound: BoundTemplate | None = None, fixes: Sequence[PersonFix] = (),
                  fix_hits: dict[tuple, list[int]] | None = None) -> list[BBQItem]:
    """The four items of one (context, background) pair; slot k's person is PERSONS[k-1 xor swap]."""
    row, f = fill.row, fill.row.fields
    p1, p2 = (PERSONS[1], PERSONS[0]) if swap else PERSONS
    neg_slot, nonneg_slot = answer_slot(f["Answer_negative"]), answer_slot(f["Answer_non_negative"])
    if neg_slot is None or nonneg_slot is None or neg_slot == nonneg_slot:
        return []
    amb, dis, q_neg, q_nonneg = _implicit_texts(fill, p1, p2, bound, fixes, fix_hits)
    questions = {"neg": q_neg, "nonneg": q_nonneg}
    background = ""
    if cue1 is not None and cue2 is not None:
        lines = sorted([(p1, cue1), (p2, cue2)])  # Person A's cue first, whichever slot it is in
        background = "\n".join(cue_sentence(c, p) for p, c in lines)
    h = stable_hash(ctx_id, kind, variant)
    order = [0, 1, 2]  # 0: slot 1's person, 1: slot 2's person, 2: Unknown
    random.Random(h).shuffle(order)
    texts = {0: p1, 1: p2, 2: unknown}
    options = tuple(texts[i] for i in order)
    pos = {slot: order.index(slot - 1) for slot in (1, 2)}
    unknown_index, target_index = order.index(2), pos[fill.target_slot]
    groups = {1: g1, 2: g2}
    answer_info = {f"ans{j}": ([unknown, "unknown"] if i == 2 else [texts[i], groups[i + 1]])
                   for j, i in enumerate(order)}
    items = []
    for cond, context in (("ambig", amb), ("disambig", dis)):
        for pol, ans_slot in (("neg", neg_slot), ("nonneg", nonneg_slot)):
            items.append(BBQItem(
                id=f"ibbq-{dim}-{kind[:3]}-{ctx_id}-{variant}-{cond}-{pol}", source="implicitbbq", category=dim,
                context=context, question=questions[pol], options=options,
                label=unknown_index if cond == "ambig" else pos[ans_slot], target_index=target_index,
                unknown_index=unknown_index, question_polarity=pol, context_condition=cond, context_kind=kind,
                setting=setting_name(kind, cond, pol), answer_info=answer_info,
                stereotyped_groups=row.stereotyped_groups, template_id=row.template_id, background=background,
                group_words=tuple("" if i == 2 else texts[i] for i in order),
                metadata={"context_id": ctx_id, "row": row.row, "q_id": row.q_id, "group1": g1, "group2": g2,
                          "person1": p1, "person2": p2, "cue1": cue1, "cue2": cue2,
                          "target_group": groups[fill.target_slot], "word1": fill.word1, "word2": fill.word2,
                          "source_names": [fill.name1, fill.name2]}))
    return items


def build_implicitbbq(
    dimensions: Sequence[str] | None = None,
    bbq_dir: str | Path | None = None,
    bharatbbq_dir: str | Path | None = None,
    lexical: Literal["all", "first"] = "first",
    controls: bool = True,
    stats: dict | None = None,
    explicit_set: Literal["matched", "full"] = "matched",
    explicit_size: int | None = None,
    seed: int = 0,
    exclusion_unit: Literal["cue", "template"] = "cue",
) -> list[BBQItem]:
    """Build every ImplicitBBQ item of ``dimensions`` (default: all six).

    ``lexical="first"`` uses each template's first {{WORD}} variant (one context per
    template row and group pair, as the paper counts contexts); ``"all"`` crosses them.
    ``stats``, when given, is filled per dimension with what the build left out:
    ``combos_excluded`` (cue combinations the per-cue exclusions drop from built contexts),
    ``person_fix_hits`` (substitutions of each hand-written Person A/B fix, per template),
    ``templates_excluded`` (templates with no combination left), ``duplicate_contexts``
    (implicit contexts equal to an earlier one) and ``bound_implicit_excluded``.
    ``explicit_set="matched"`` (default) resamples the explicit items to the implicit set's
    (dimension, template) weights, ``explicit_size`` records per condition (default: as many as
    the implicit set), seeded by ``seed`` (:func:`probe.tasks.implicitbbq.match.match_explicit`);
    ``"full"`` keeps every explicit filling once.
    ``exclusion_unit``: ``"cue"`` (default) drops only the cue combinations that use a cue excluded for
    the template (``resources/implicitbbq_exclusions.yaml``); ``"template"`` removes every template
    with an excluded cue, explicit items included, as the paper words its rule (docs/implicitbbq.md).
    Raises ``ValueError`` if two items would share an id.

    A process keeps its last builds (items are immutable; each call gets a new list), keyed by the arguments
    and the size and modification time of every template file they read, so an edited file is read anew.
    """
    key = (tuple(dimensions or DIMENSIONS), _source_stamps(bbq_dir, bharatbbq_dir), lexical, controls,
           explicit_set, explicit_size, seed, exclusion_unit)
    hit = _BUILT.get(key)
    if hit is None:
        built_stats: dict = {}
        items = _build(dimensions, bbq_dir, bharatbbq_dir, lexical, controls, built_stats, explicit_set,
                       explicit_size, seed, exclusion_unit)
        while len(_BUILT) >= _BUILT_MAX:
            _BUILT.pop(next(iter(_BUILT)))
        hit = _BUILT[key] = (tuple(items), json.dumps(built_stats))
    if stats is not None:  # the caller's own copy
        stats.update(json.loads(hit[1]))
    return list(hit[0])


#: the last builds (build_implicitbbq): key -> (items, the stats as JSON)
_BUILT: dict[tuple, tuple] = {}
_BUILT_MAX = 8


def _source_stamps(bbq_dir: str | Path | None, bharatbbq_dir: str | Path | None) -> tuple:
    """The stamps of the files a build may read: BBQ's template folder and BharatBBQ's templates."""

    tdir = Path(bbq_dir if bbq_dir is not None else data_root() / "bbq") / "templates"
    bharat = Path(bharatbbq_dir if bharatbbq_dir is not None else data_root() / "bharatbbq") / "Caste_templates.csv"
    files = sorted(tdir.iterdir()) if tdir.is_dir() else [tdir]
    return tuple(file_stamp(f) for f in (*files, bharat))


def _build(dimensions, bbq_dir, bharatbbq_dir, lexical, controls, stats, explicit_set, explicit_size, seed,
           exclusion_unit) -> list[BBQItem]:
    """:func:`build_implicitbbq`'s build, without the kept copies."""
    if exclusion_unit not in ("cue", "template"):
        raise ValueError(f"exclusion_unit must be 'cue' or 'template', got {exclusion_unit!r}")
    if explicit_set not in EXPLICIT_SETS:
        raise ValueError(f"explicit_set must be one of {', '.join(EXPLICIT_SETS)}, got {explicit_set!r}")
    table = load_cue_table()
    dims = list(dimensions or DIMENSIONS)
    for d in dims:
        if d not in table.groups:
            raise ValueError(f"unknown ImplicitBBQ dimension {d!r}; choose from {', '.join(DIMENSIONS)}")
    unknown, _ = load_unknown_answers()
    items: list[BBQItem] = []
    for dim in dims:
        dim_items, st, fix_hits = _build_dimension(dim, table, bbq_dir, bharatbbq_dir, lexical, controls,
                                                   exclusion_unit, unknown)
        items.extend(dim_items)
        if stats is not None:
            stats[dim] = {k: sorted(v, key=int) if isinstance(v, set) else v for k, v in st.items()}
            # substitutions made by each hand-written Person A/B fix: "Q_id" (or "Q_id:rows") -> count per fix
            stats[dim]["person_fix_hits"] = {q + (":" + ",".join(map(str, rows)) if rows else ""): hits
                                             for (_, q, rows), hits in sorted(fix_hits.items())}
    if explicit_set == "matched":
        items = match_explicit(items, size=explicit_size, seed=seed)
    dup = [i for i, n in Counter(it.id for it in items).items() if n > 1]
    if dup:  # records, resume and joins are keyed by id
        raise ValueError(f"ImplicitBBQ build: {len(dup)} duplicate item ids, e.g. {dup[:3]}")
    return items


def _build_dimension(dim, table, bbq_dir, bharatbbq_dir, lexical, controls, exclusion_unit,
                     unknown) -> tuple[list[BBQItem], dict, dict[tuple, list[int]]]:
    """One dimension's items (explicit, implicit and controls, in template order), its build counts and the
    hits of each Person A/B fix."""
    st = {"combos_excluded": 0, "templates_excluded": set(), "duplicate_contexts": 0,
          "bound_implicit_excluded": set()}
    fix_hits: dict[tuple, list[int]] = {}
    seen_ctx: set[str] = set()
    seen_text: set[tuple] = set()
    kept_templates: set[str] = set()
    items: list[BBQItem] = []
    for fill, g1, g2, bound in _kept_fills(dim, table, bbq_dir, bharatbbq_dir, lexical):
        q_id = fill.row.q_id
        combos = _cue_combinations(table, dim, q_id, g1, g2, exclusion_unit)
        if not combos:  # every cue of this group pair is causally tied to the template
            st["templates_excluded"].add(q_id)
            continue
        kept_templates.add(q_id)
        if bound is None or bound.explicit != "exclude":
            items.extend(_explicit_items(dim, fill, g1, g2, unknown))
        if bound is not None and bound.implicit == "exclude":
            st["bound_implicit_excluded"].add(q_id)
            continue
        ctx_id = f"{q_id}r{fill.row.row}-{stable_hash(fill.word1, fill.word2, g1, g2) % 10**6:06d}"
        if ctx_id in seen_ctx:  # several group words map to one cue group: one implicit context
            continue
        seen_ctx.add(ctx_id)
        f = fill.row.fields
        fixes = _person_fixes(dim, fill)
        signature = (*_implicit_texts(fill, *PERSONS, bound, fixes), g1, g2, fill.target_slot,
                     answer_slot(f["Answer_negative"]), answer_slot(f["Answer_non_negative"]))
        if signature in seen_text:  # e.g. a proper-name row whose Person A/B form is a group-word row's
            st["duplicate_contexts"] += 1
            continue
        seen_text.add(signature)
        st["combos_excluded"] += len(table.groups[dim][g1]) * len(table.groups[dim][g2]) - len(combos)
        items.extend(_context_items(dim, ctx_id, fill, g1, g2, combos, table, controls, unknown, bound, fixes,
                                    fix_hits))
    st["templates_excluded"] -= kept_templates  # removed whole: no group pair keeps a combination
    return items, st, fix_hits


def _context_items(dim, ctx_id, fill, g1, g2, combos, table, controls, unknown, bound, fixes,
                   fix_hits) -> list[BBQItem]:
    """One implicit context's items: one set per cue combination and, with ``controls``, the neutral-cue and
    no-characteristic controls in both orders."""
    items: list[BBQItem] = []
    for k, (c1, c2) in enumerate(combos):
        items.extend(_person_items(dim, ctx_id, fill, g1, g2, "implicit", f"c{k}", k % 2 == 1,
                                   c1, c2, unknown, bound, fixes, fix_hits))
    if controls:
        rng = random.Random(stable_hash(ctx_id, "neutral"))
        for swap in (False, True):
            n1, n2 = rng.sample(table.neutral, 2)
            items.extend(_person_items(dim, ctx_id, fill, g1, g2, "neutral", f"s{int(swap)}", swap,
                                       n1, n2, unknown, bound, fixes, fix_hits))
            items.extend(_person_items(dim, ctx_id, fill, g1, g2, "nochar", f"s{int(swap)}", swap,
                                       None, None, unknown, bound, fixes, fix_hits))
    return items


def count_table(items: Iterable[BBQItem]) -> dict[str, dict[str, int]]:
    """Instances per dimension x setting, plus ``contexts_amb`` (unique ambiguous contexts per kind)."""
    counts: dict[str, Counter] = defaultdict(Counter)
    contexts: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    for it in items:
        counts[it.category][it.setting] += 1
        if it.context_condition == "ambig":
            key = it.metadata.get("context_id") or it.context
            contexts[it.category][it.context_kind].add(key if it.context_kind != "explicit" else it.context)
    out = {}
    for dim in sorted(counts, key=lambda d: DIMENSIONS.index(d) if d in DIMENSIONS else 99):
        row = {s: counts[dim][s] for s in SETTINGS}
        row["explicit_contexts"] = len(contexts[dim]["explicit"])
        row["implicit_contexts"] = len(contexts[dim]["implicit"])
        out[dim] = row
    total = {k: sum(r[k] for r in out.values()) for k in (next(iter(out.values())) if out else {})}
    out["total"] = total
    return out


def format_count_table(table: dict[str, dict[str, int]]) -> str:
    """Markdown table of :func:`count_table`, with the paper's totals for comparison."""
    cols = ["implicit_contexts", "explicit_contexts", *SETTINGS]
    lines = ["| dimension | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for dim, row in table.items():
        lines.append(f"| {dim} | " + " | ".join(str(row.get(c, 0)) for c in cols) + " |")
    lines.append(
        f"\nPaper (section 3): {PAPER_COUNTS['contexts_per_condition']} implicit contexts per condition; "
        f"~{PAPER_COUNTS['implicit_instances_per_condition']} implicit instances per condition "
        f"(amb or dis, both polarities); ~{PAPER_COUNTS['explicit_records']} explicit records. "
        f"In one unit (records = context x question): probe.tasks.implicitbbq.match.format_record_counts.")
    return "\n".join(lines)
