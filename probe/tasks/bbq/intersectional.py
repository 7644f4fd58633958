"""BBQ's intersectional templates (``Race_x_SES``, ``Race_x_gender``) -> :class:`SlotFill` s.

BBQ builds these two categories with a generator of their own (not the one for
the other nine). Each fill pairs the stereotyped person, a race from
``Known_stereotyped_race`` with the stereotyped value of the second variable
(``Known_stereotyped_var2``: ``M``/``F`` or ``lowSES``/``highSES``), with one
other person who differs in

* ``intersectional_a``: the second variable only (same race),
* ``intersectional_b``: the race only (same gender / SES),
* ``intersectional_c``: both,

and each pair is emitted in both name orders (a, b, c, then the three reversed),
BBQ's ``subcategory`` being the condition. The second variable's words come from
the row's ``Names`` with ``Var2_info`` (``["man", "woman"]`` / ``["M", "F"]``;
Race_x_SES rows list alternatives per side) or, for Race_x_SES rows without
``Names``, from the vocabulary's SES occupations (``{{OCC1}}``). Group labels
(``answer_info``) are BBQ's ``VAR2-RACE`` (``F-Black``, ``lowSES-Black``); a proper
name carries its own gender (``F-Black``; Race_x_SES ``lowSES-F-Black``). The
stereotyped target is always the first person's answer: the one whose race is
stereotyped *and* whose second variable is the stereotyped one, which is the
answer BBQ's analysis script (``BBQ_results_metadata.R``, ``target_loc``) takes.

Deterministic where BBQ samples (``docs/bbq.md``, "Templates: intersectional
categories"): every target race x every non-target race (BBQ: 5 second races
sampled); one occupation pair per race pair by a hash (BBQ: ``random.choice``);
``Names`` alternatives all or first (``lexical``); proper names: per target name
5 partners per condition by a seeded sample, at most ``max_proper_pairs``
(target, partner) combinations per row (BBQ: 5 targets x 5), last names by a
hash of the first name.
"""

from __future__ import annotations

import ast
import itertools
import random
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from probe.io import stable_hash
from probe.tasks.bbq.template_rows import SlotFill, TemplateRow, lexical_pairs
from probe.errors import InputError

__all__ = ["OTHER_VAR2", "intersectional_fills"]

#: The non-stereotyped value of each second variable (BBQ's generator hard-codes the same pairs).
OTHER_VAR2 = {"M": "F", "F": "M", "lowSES": "highSES", "highSES": "lowSES"}
_PARTNERS = 5  # BBQ samples 5 partners per condition for each target name


@dataclass(frozen=True)
class _Person:
    name: str  # race word or full proper name ({{NAME1}})
    gen: str  # second-variable word ({{GEN1}} / {{OCC1}}), "" when the name carries it
    info: str  # BBQ's group label


def _var2_word_pairs(row: TemplateRow, var2: str, lexical: Literal["all", "first"]) -> list[tuple[str, str]] | None:
    """(stereotyped word, other word) choices from ``Names`` + ``Var2_info``; None when the row has no Names."""
    raw = row.fields.get("Names", "").strip()
    if len(raw) <= 1:
        return None
    try:
        words = ast.literal_eval(raw)
        info = ast.literal_eval(row.fields.get("Var2_info", "").strip())
    except (ValueError, SyntaxError):
        raise InputError(row.path, row.row + 2, "Names", f"Names / Var2_info not lists: {raw!r}") from None
    if len(words) != 2 or list(info).count(var2) != 1:
        raise InputError(row.path, row.row + 2, "Var2_info", f"needs 2 entries, one being {var2!r}: {info!r}")
    t = list(info).index(var2)
    tws = words[t] if isinstance(words[t], list) else [words[t]]
    nws = words[1 - t] if isinstance(words[1 - t], list) else [words[1 - t]]
    return list(itertools.product(tws, nws)) if lexical == "all" else [(tws[0], nws[0])]


def _pick(options: list[str], *key: object) -> str:
    return options[stable_hash(*key) % len(options)]


def _fills(row: TemplateRow, t: _Person, others: tuple[_Person, _Person, _Person], repeat: str,
           lexical: Literal["all", "first"]) -> list[SlotFill]:
    """BBQ's six fills of one pairing: a, b, c with the target as NAME1, then the same reversed."""
    out = []
    for w1, w2 in lexical_pairs(row, lexical):
        for rev in (False, True):
            for cond, p in zip("abc", others):
                first, second = (p, t) if rev else (t, p)
                out.append(SlotFill(row, first.name, second.name, first.info, second.info, w1, w2,
                                    target_slot=2 if rev else 1, gen1=first.gen, gen2=second.gen,
                                    subcategory=f"intersectional_{cond}", repeat=repeat))
    return out


def _label_fills(row: TemplateRow, vocab: pd.DataFrame, var2: str, other: str,
                 lexical: Literal["all", "first"]) -> list[SlotFill]:
    """Rows that name groups by words ("Black", "woman"): every target race x every other race."""
    races = list(dict.fromkeys(vocab[vocab.Category == "Race_ethnicity"].Name))
    targets = [r for r in races if r in row.stereotyped_groups]
    seconds = [r for r in races if r not in targets]
    named = _var2_word_pairs(row, var2, lexical)
    if named is None and row.category != "Race_x_SES":
        raise InputError(row.path, row.row + 2, "Names", "Race_x_gender rows without proper names need Names")
    ses = vocab[vocab.Category == "SES"]
    occ_t, occ_n = list(dict.fromkeys(ses[ses.Info == var2].Name)), list(dict.fromkeys(ses[ses.Info != var2].Name))
    out = []
    for t, r2 in itertools.product(targets, seconds):
        # BBQ draws one occupation of each SES level per race pair.
        pairs = named or [(_pick(occ_t, row.seed_key, row.row, t, r2, "t"), _pick(occ_n, row.seed_key, row.row, t, r2, "n"))]
        for tg, ng in pairs:
            others = (_Person(t, ng, f"{other}-{t}"), _Person(r2, tg, f"{var2}-{r2}"), _Person(r2, ng, f"{other}-{r2}"))
            out += _fills(row, _Person(t, tg, f"{var2}-{t}"), others, r2, lexical)
    return out


def _proper_fills(row: TemplateRow, vocab: pd.DataFrame, names_vocab: pd.DataFrame, var2: str, other: str,
                  lexical: Literal["all", "first"], max_pairs: int) -> list[SlotFill]:
    """Rows with proper names: first names with ethnicity and gender, a last name of that ethnicity."""
    first = names_vocab[names_vocab.First_last == "first"]
    lasts = {e: sorted(g.Name) for e, g in names_vocab[names_vocab.First_last == "last"].groupby("ethnicity")}
    races = set(row.stereotyped_groups)

    def full(person: pd.Series, avoid: str = "") -> str:
        options = lasts.get(person.ethnicity) or [""]
        i = stable_hash(row.seed_key, row.row, person.Name) % len(options)
        if options[i] and options[i] == avoid:  # two people of one race: not the same family name
            i = (i + 1) % len(options)
        return f"{person.Name} {options[i]}".strip()

    gender_x = row.category == "Race_x_gender"
    targets = first[first.ethnicity.isin(races)]
    stated = row.fields.get("Stated_gender_info", "").strip()
    if gender_x or stated:  # Race_x_gender: the target's gender is var2; Race_x_SES: the text's gender
        targets = targets[targets.gender == (var2 if gender_x else stated)]
    combos = []  # (target, (a, b, c) partners)
    for t in targets.itertuples():
        same_eth, same_gen = first.ethnicity == t.ethnicity, first.gender == t.gender
        if gender_x:
            pools = [first[same_eth & ~same_gen], first[~same_eth & same_gen], first[~same_eth & ~same_gen]]
        else:  # Race_x_SES varies SES, never gender; its b and c share the other-race person
            other_race = first[~first.ethnicity.isin(races) & same_gen]
            pools = [first[same_eth & same_gen & (first.Name != t.Name)], other_race, other_race]
        rng = random.Random(stable_hash(row.seed_key, row.row, t.Name))
        drawn = [rng.sample(list(p.itertuples()), min(_PARTNERS, len(p))) for p in pools]
        if not gender_x:
            drawn[2] = drawn[1]
        combos += [(t, trio) for trio in zip(*drawn)]
    if len(combos) > max_pairs:  # BBQ: 5 sampled targets x 5 partners
        keep = sorted(random.Random(stable_hash(row.seed_key, row.row)).sample(range(len(combos)), max_pairs))
        combos = [combos[i] for i in keep]
    named = _var2_word_pairs(row, var2, lexical)
    ses = vocab[vocab.Category == "SES"]
    occ_t, occ_n = list(dict.fromkeys(ses[ses.Info == var2].Name)), list(dict.fromkeys(ses[ses.Info != var2].Name))
    out = []
    for t, (a, b, c) in combos:
        t_name = full(t)
        names = (full(a, avoid=t_name.split(" ")[-1]), full(b), full(c))
        if gender_x:  # the name carries the gender; no {{GEN}} slot
            tp = _Person(t_name, "", f"{t.gender}-{t.ethnicity}")
            others = tuple(_Person(n, "", f"{p.gender}-{p.ethnicity}") for n, p in zip(names, (a, b, c)))
            out += _fills(row, tp, others, "", lexical)
            continue
        pairs = named or [(_pick(occ_t, row.seed_key, row.row, t.Name, a.Name, b.Name, "t"),
                           _pick(occ_n, row.seed_key, row.row, t.Name, a.Name, b.Name, "n"))]
        for tg, ng in pairs:
            tp = _Person(t_name, tg, f"{var2}-{t.gender}-{t.ethnicity}")
            others = (_Person(names[0], ng, f"{other}-{a.gender}-{a.ethnicity}"),
                      _Person(names[1], tg, f"{var2}-{b.gender}-{b.ethnicity}"),
                      _Person(names[2], ng, f"{other}-{c.gender}-{c.ethnicity}"))
            out += _fills(row, tp, others, "", lexical)
    return out


def intersectional_fills(row: TemplateRow, vocab: pd.DataFrame | None, names_vocab: pd.DataFrame | None,
                         lexical: Literal["all", "first"] = "all", max_proper_pairs: int = 25) -> list[SlotFill]:
    """All fills of one intersectional template row, in BBQ's order (see the module doc)."""
    var2 = row.fields.get("Known_stereotyped_var2", "").strip()
    if var2 not in OTHER_VAR2:
        raise InputError(row.path, row.row + 2, "Known_stereotyped_var2",
                         f"expected one of {', '.join(OTHER_VAR2)}, got {var2!r}")
    if vocab is None:
        raise InputError(row.path, row.row + 2, None, "intersectional templates need vocabulary.csv")
    if row.proper_names:
        if names_vocab is None:
            return []
        fills = _proper_fills(row, vocab, names_vocab, var2, OTHER_VAR2[var2], lexical, max_proper_pairs)
    else:
        fills = _label_fills(row, vocab, var2, OTHER_VAR2[var2], lexical)
    # With every Names alternative (lexical="all"), a pair that does not use the other word (b: same
    # SES word) recurs once per alternative: keep one. BBQ's own repeats (distinct ``repeat``) stay.
    seen: set[tuple[str, ...]] = set()
    out = []
    for f in fills:
        k = (f.name1, f.name2, f.gen1, f.gen2, f.word1, f.word2, f.subcategory, f.repeat)
        if k not in seen:
            seen.add(k)
            out.append(f)
    return out
