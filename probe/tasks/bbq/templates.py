"""Expand BBQ-style template CSVs (+ vocabulary) into :class:`~probe.tasks.bbq.items.BBQItem` instances.

This follows BBQ's generator (``generate_from_template_all_categories.py`` in
nyu-mll/BBQ) but is deterministic and exhaustive where BBQ samples:

* every NAME1 x NAME2 pair (BBQ downsamples vocabulary lists to 5 at random);
* every {{WORD1}} x {{WORD2}} lexical variant with ``lexical="all"`` (BBQ picks
  one at random), or only the first of each with ``lexical="first"``;
* both name orders where BBQ flips them (Religion, Nationality, Race_ethnicity,
  Sexual_orientation, proper-name rows, SES occupations); other categories carry
  both orders as separate template rows;
* the Unknown wording and the answer order are chosen by a hash of the instance
  (BBQ: ``random.choice`` / ``random.shuffle``), so builds are reproducible.

Each filled template yields four items: ambiguous/disambiguated x negative/non-negative.
Hence BBQ's shipped JSONL is (up to answer order and Unknown wording) a subset
of this expansion; ``tests/unit/test_bbq_templates.py`` checks that on Age,
Nationality and Religion. BharatBBQ's ``Caste_templates.csv`` has the same
layout (``Question_negative`` and ``Proper Nouns`` columns) and goes through the
same code (``source="bharatbbq"``).

The intersectional categories (``Race_x_SES``, ``Race_x_gender``; templates with
``Known_stereotyped_race`` / ``Known_stereotyped_var2`` instead of
``Known_stereotyped_groups``) follow BBQ's separate intersectional generator:
see :mod:`probe.tasks.bbq.intersectional`.
"""

from __future__ import annotations

import itertools
import random
import re
from pathlib import Path
from typing import Literal

import pandas as pd

from probe.fs import file_stamp
from probe.tasks.bbq.data import UNKNOWN_OPTIONS, find_target_index, group_key
from probe.tasks.bbq.intersectional import intersectional_fills
# The row schema and reader live in bbq_template_rows (shared with the intersectional expander); re-exported here.
from probe.tasks.bbq.template_rows import (SlotFill, TemplateRow, lexical_pairs, parse_name_lists,
                                           read_templates)
from probe.io import stable_hash
from probe.tasks.bbq.items import BBQItem
from probe.errors import InputError

__all__ = ["TemplateRow", "SlotFill", "read_templates", "fills_for_row", "slot_text", "answer_slot", "load_vocab",
           "fill_to_items", "expand_templates", "parse_name_lists", "lexical_pairs"]


# BBQ: categories whose rows list one order only, so the generator also emits the flipped order.
_FLIP_CATEGORIES = {"Race_ethnicity", "Religion", "Nationality", "Sexual_orientation"}
def _side_is_target(words: list[str], info: str, targets: set[str]) -> bool:
    return any(group_key(w) in targets for w in words) or (bool(info) and group_key(info) in targets)


def fills_for_row(row: TemplateRow, vocab: pd.DataFrame | None = None, names_vocab: pd.DataFrame | None = None,
                  lexical: Literal["all", "first"] = "all", max_proper_pairs: int = 25) -> list[SlotFill]:
    """All slot fillings of one row (see the module doc for how this differs from BBQ's sampling)."""
    if "Known_stereotyped_var2" in row.fields:
        return intersectional_fills(row, vocab, names_vocab, lexical, max_proper_pairs)
    f, cat = row.fields, row.category
    targets = {group_key(t) for t in row.stereotyped_groups}
    info1_col, info2_col = f.get("NAME1_info", "").strip(), f.get("NAME2_info", "").strip()
    flip = cat in _FLIP_CATEGORIES or row.proper_names or (cat == "SES" and row.subcategory == "Occupation")
    target_slot: int | None = None
    pairs: list[tuple[str, str, str, str]] = []  # (name1, name2, info1, info2)

    names = f.get("Names", "").strip()
    if row.proper_names and row.source == "bbq" and names_vocab is not None:
        pairs = _proper_name_pairs(row, names_vocab, info1_col, info2_col, max_proper_pairs)
    elif len(names) > 1:
        pairs, target_slot = _listed_pairs(row, names, info1_col, info2_col, targets)
    else:
        pairs = _vocab_pairs(row, vocab, targets)
    if flip:
        pairs = pairs + [(b, a, ib, ia) for a, b, ia, ib in pairs]
    return _slot_fills(row, pairs, target_slot, lexical)


def _proper_name_pairs(row: TemplateRow, names_vocab: pd.DataFrame, info1_col: str, info2_col: str,
                       max_proper_pairs: int) -> list[tuple[str, str, str, str]]:
    """(name1, name2, info1, info2) of a BBQ proper-name row, from BBQ's name vocabulary, downsampled
    deterministically to ``max_proper_pairs``."""
    cat = row.category
    pairs: list[tuple[str, str, str, str]] = []
    first_only = names_vocab[names_vocab.First_last == "first_only"]
    if cat == "Gender_identity":
        fem = first_only[first_only.gender == "F"].Name.tolist()
        mal = first_only[first_only.gender == "M"].Name.tolist()
        pre1 = f"{info1_col}_" if info1_col else ""
        pre2 = f"{info2_col}_" if info2_col else ""
        pairs = [(a, b, pre1 + "F", pre2 + "M") for a in fem for b in mal]
    elif cat == "Race_ethnicity":
        first = names_vocab[names_vocab.First_last == "first"]
        last = names_vocab[names_vocab.First_last == "last"]
        lastname = {e: sorted(last[last.ethnicity == e].Name)[0] for e in set(last.ethnicity)}
        tgt = first[first.ethnicity.isin(row.stereotyped_groups)]
        for a in tgt.itertuples():
            others = first[(~first.ethnicity.isin(row.stereotyped_groups)) & (first.gender == a.gender)]
            for b in others.itertuples():
                if a.ethnicity in lastname and b.ethnicity in lastname:
                    pairs.append((f"{a.Name} {lastname[a.ethnicity]}", f"{b.Name} {lastname[b.ethnicity]}",
                                  f"{a.gender}-{a.ethnicity}", f"{b.gender}-{b.ethnicity}"))
    else:
        fo = first_only.Name.tolist()
        pairs = [(a, b, info1_col or a, info2_col or b) for a in fo for b in fo if a != b]
    if len(pairs) > max_proper_pairs:  # deterministic downsampling (BBQ samples 5-6 names at random)
        pairs = random.Random(stable_hash(row.seed_key, row.row)).sample(pairs, max_proper_pairs)
    return pairs


def _listed_pairs(row: TemplateRow, names: str, info1_col: str, info2_col: str,
                  targets: set[str]) -> tuple[list[tuple[str, str, str, str]], int | None]:
    """(name1, name2, info1, info2) of a row that lists its two sides in ``Names``, and the stereotyped side's
    slot when the lists tell it (None: found per fill)."""
    target_slot: int | None = None
    l1, l2 = parse_name_lists(names)
    if row.source == "bharatbbq" or targets:
        t1, t2 = _side_is_target(l1, info1_col, targets), _side_is_target(l2, info2_col, targets)
        if t1 != t2:
            target_slot = 1 if t1 else 2
        elif row.source == "bharatbbq":
            # BharatBBQ lists the stereotyped side first in `Names` (proper-name rows carry no group words).
            target_slot = 1 if names.lstrip("{ ").startswith("NAME1") else 2
    pairs = [(a, b, info1_col or a, info2_col or b) for a in l1 for b in l2]
    if row.source == "bharatbbq" and target_slot is not None:
        # Group of a proper name is its side's group: the stereotyped one or "nonTarget".
        tgt_label = row.stereotyped_groups[0] if row.stereotyped_groups else "target"
        if row.proper_names:
            pairs = [(a, b, tgt_label if target_slot == 1 else "nonTarget",
                      tgt_label if target_slot == 2 else "nonTarget") for a, b, _, _ in pairs]
    return pairs, target_slot


def _vocab_pairs(row: TemplateRow, vocab: pd.DataFrame | None, targets: set[str]) -> list[tuple[str, str, str, str]]:
    """(name1, name2, info1, info2) of a row filled from the category's vocabulary (its subcategory's words)."""
    cat = row.category
    words = vocab[vocab.Category == cat] if vocab is not None else pd.DataFrame(columns=["Name", "Info", "SubCat"])
    info_of = {n: (i if isinstance(i, str) and i else n) for n, i in zip(words.Name, words.Info.fillna(""))}
    if row.subcategory != "None":
        pool = words[words.SubCat == row.subcategory]
    else:
        pool = words
    vocab_words = list(dict.fromkeys(pool.Name.tolist()))
    if cat in _FLIP_CATEGORIES and targets:
        first = [w for w in vocab_words if group_key(w) in targets]
        second = [w for w in vocab_words if group_key(w) not in targets]
        return [(a, b, info_of.get(a, a), info_of.get(b, b)) for a in first for b in second]
    if cat == "SES":
        return [(a, b, info_of[a], info_of[b]) for a in vocab_words for b in vocab_words
                if info_of[a] != info_of[b] and info_of[a] == "lowSES"]  # flipped by the caller
    return [(a, b, info_of.get(a, a), info_of.get(b, b)) for a in vocab_words for b in vocab_words if a != b]


def _slot_fills(row: TemplateRow, pairs: list[tuple[str, str, str, str]], target_slot: int | None,
                lexical: Literal["all", "first"]) -> list[SlotFill]:
    """Each pair x lexical variant as a :class:`SlotFill`, its stereotyped slot found when not given (BBQ)."""
    out = []
    for (n1, n2, i1, i2), (lw1, lw2) in itertools.product(pairs, lexical_pairs(row, lexical)):
        ts = target_slot
        if ts is None or row.source == "bbq":
            t = find_target_index([[n1, i1], [n2, i2]], row.stereotyped_groups)
            ts = None if t is None else t + 1
        out.append(SlotFill(row, n1, n2, i1, i2, lw1, lw2, ts))
    return out


def slot_text(text: str, fill: SlotFill, name1: str | None = None, name2: str | None = None) -> str:
    """Fill ``{{NAME1}}``/``{{NAME2}}``/``{{WORD1}}``/``{{WORD2}}`` as BBQ's ``do_slotting`` does.

    ``name1``/``name2`` override the fill's names (ImplicitBBQ slots "Person A"/"Person B").
    Intersectional fills also fill ``{{GEN1}}``/``{{OCC1}}`` (and 2) with ``gen1``/``gen2``.
    The a/an repair and the two spelling fixes are BBQ's.
    """
    n1 = fill.name1 if name1 is None else name1
    n2 = fill.name2 if name2 is None else name2
    t = text.replace("{{NAME1}}", n1).replace("{{NAME2}}", n2)
    if fill.gen1 or fill.gen2:
        for slot in ("GEN", "OCC"):
            t = t.replace(f"{{{{{slot}1}}}}", fill.gen1).replace(f"{{{{{slot}2}}}}", fill.gen2)
    if fill.word1 or fill.word2:
        t = t.replace("{{WORD1}}", fill.word1).replace("{{WORD2}}", fill.word2)
    # A WORD slot without lexical values is an upstream template bug (BharatBBQ Caste Q10 ships
    # "a {{WORD1}} rajput" in its own examples): drop the slot rather than show braces to a model.
    t = re.sub(r"\s?\{\{WORD[12]\}\}", "", t)
    t = t.replace("lesbian man", "lesbian woman").replace("Latino woman", "Latina woman")
    if any(re.search("^[aeiou]", w.lower()) for w in (n1, n2, fill.gen1, fill.gen2)):
        t = re.sub(r"(\s[aA])(\s[aAeEiIoOuU])", r"\1n\2", t)
        t = t.replace(" an European", " a European")
    return t


def answer_slot(answer_template: str) -> int | None:
    has1, has2 = "{{NAME1}}" in answer_template, "{{NAME2}}" in answer_template
    return 1 if has1 and not has2 else 2 if has2 and not has1 else None


def fill_to_items(fill: SlotFill) -> list[BBQItem]:
    """The four items (ambig/disambig x neg/nonneg) of one filled template, BBQ's field layout."""
    row, f = fill.row, fill.row.fields
    neg_slot, nonneg_slot = answer_slot(f["Answer_negative"]), answer_slot(f["Answer_non_negative"])
    if fill.target_slot is None or neg_slot is None or nonneg_slot is None or neg_slot == nonneg_slot:
        return []
    h = stable_hash(row.seed_key, row.row, *fill._hash_parts())
    unknown = UNKNOWN_OPTIONS[h % len(UNKNOWN_OPTIONS)]
    answers = [slot_text(f["Answer_negative"], fill).strip(), slot_text(f["Answer_non_negative"], fill).strip(), unknown]
    slots = [neg_slot, nonneg_slot, None]
    order = [0, 1, 2]
    random.Random(h).shuffle(order)
    options = tuple(answers[i] for i in order)
    slot_of = [slots[i] for i in order]
    # BBQ's answer_info text is the name plus the second-variable word ("Black woman") when there is one.
    names = {1: (f"{fill.name1} {fill.gen1}".strip(), fill.info1), 2: (f"{fill.name2} {fill.gen2}".strip(), fill.info2)}
    answer_info = {f"ans{j}": ([unknown, "unknown"] if s is None else [names[s][0], names[s][1]])
                   for j, s in enumerate(slot_of)}
    unknown_index = slot_of.index(None)
    target_index = slot_of.index(fill.target_slot)
    amb = slot_text(f["Ambiguous_Context"], fill).strip()
    dis = f"{amb} {slot_text(f['Disambiguating_Context'], fill)}".strip()
    items = []
    for cond, context in (("ambig", amb), ("disambig", dis)):
        for pol, qcol, ans_slot in (("neg", "Question_negative_stereotype", neg_slot),
                                    ("nonneg", "Question_non_negative", nonneg_slot)):
            label = unknown_index if cond == "ambig" else slot_of.index(ans_slot)
            items.append(BBQItem(
                id=f"{row.source}-{row.category}-{fill.key}-{cond}-{pol}",
                source="bbq-templates" if row.source == "bbq" else row.source,
                category=row.category, context=context, question=slot_text(f[qcol], fill).strip(),
                options=options, label=label, target_index=target_index, unknown_index=unknown_index,
                question_polarity=pol, context_condition=cond, answer_info=answer_info,
                stereotyped_groups=row.stereotyped_groups, template_id=row.template_id,
                group_words=tuple("" if s is None else names[s][0] for s in slot_of),
                metadata={"row": row.row, "q_id": row.q_id, "version": row.version,
                          "subcategory": fill.subcategory or row.subcategory, "name1": fill.name1,
                          "name2": fill.name2, "info1": fill.info1, "info2": fill.info2, "word1": fill.word1,
                          "word2": fill.word2, "proper_names": row.proper_names, **_intersectional_meta(fill)}))
    return items


def _intersectional_meta(fill: SlotFill) -> dict[str, str]:
    if not fill.subcategory:
        return {}
    return {"gen1": fill.gen1, "gen2": fill.gen2,
            "known_stereotyped_var2": fill.row.fields.get("Known_stereotyped_var2", "").strip()}


def load_vocab(template_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """BBQ's vocabulary (rows with ``Pilot_include == "No"`` dropped, as BBQ does) and proper names."""
    vpath = template_dir / "vocabulary.csv"
    if not vpath.is_file():
        raise InputError(vpath, None, None, "file not found")
    vocab = pd.read_csv(vpath, dtype=str)
    vocab = vocab[vocab.Pilot_include != "No"]
    npath = template_dir / "vocabulary_proper_names.csv"
    names = pd.read_csv(npath, dtype=str) if npath.is_file() else None
    return vocab, names


def expand_templates(category: str, template_dir: str | Path | None = None,
                     lexical: Literal["all", "first"] = "all", max_proper_pairs: int = 25) -> list[BBQItem]:
    """All instances of one BBQ category (``"SES"``) from ``<bbq>/templates/<category>.csv``.

    >>> items = expand_templates("SES")   # doctest: +SKIP
    """
    if template_dir is None:
        from probe.data.paths import dataset_dir

        template_dir = dataset_dir("bbq") / "templates"
    template_dir = Path(template_dir)
    path = template_dir / f"{category}.csv"
    if not path.is_file():
        raise InputError(path, None, None, "template file not found")
    # Expanding a category takes seconds (every run with --limit builds all of them to stratify), and a process
    # that runs several tasks or runs builds the same ones again: keep the last expansions, keyed by the files
    # read and their size and modification time, so an edited template is expanded anew.
    key = (category, lexical, max_proper_pairs, *(file_stamp(f) for f in (path, *_vocab_files(template_dir))))
    if key not in _EXPANDED:
        vocab, names = load_vocab(template_dir)
        items: list[BBQItem] = []
        for row in read_templates(path, "bbq", category):
            for fill in fills_for_row(row, vocab, names, lexical, max_proper_pairs):
                items.extend(fill_to_items(fill))
        if len(_EXPANDED) >= _EXPANDED_MAX:
            _EXPANDED.pop(next(iter(_EXPANDED)))
        _EXPANDED[key] = tuple(items)
    return list(_EXPANDED[key])


#: the last expansions (expand_templates): key -> items; items are immutable, the returned list is a new one
_EXPANDED: dict[tuple, tuple[BBQItem, ...]] = {}
_EXPANDED_MAX = 32


def _vocab_files(template_dir: Path) -> tuple[Path, ...]:
    return tuple(template_dir / n for n in ("vocabulary.csv", "vocabulary_proper_names.csv"))
