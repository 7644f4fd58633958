"""BBQ-style template CSVs -> rows: the schema (:class:`TemplateRow`, :class:`SlotFill`) and the reader.

Shared by the expander of the nine single-variable categories
(:mod:`probe.tasks.bbq.templates`) and the intersectional one
(:mod:`probe.tasks.bbq.intersectional`), so that neither imports the other
for the schema.
"""

from __future__ import annotations

import ast
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd

from probe.errors import InputError
from probe.io import stable_hash

__all__ = ["KNOWN_SLOTS", "TemplateRow", "SlotFill", "read_templates", "parse_name_lists", "lexical_pairs"]

_COLUMN_ALIASES = {"Question_negative": "Question_negative_stereotype", "Proper Nouns": "Proper_nouns_only"}
#: Slots BBQ and BharatBBQ templates use; anything else would reach the model as literal braces.
KNOWN_SLOTS = frozenset({"NAME1", "NAME2", "WORD1", "WORD2", "GEN1", "GEN2", "OCC1", "OCC2"})
_SLOT = re.compile(r"\{\{(\w+)\}\}")
_TEXT_FIELDS = ("Ambiguous_Context", "Disambiguating_Context", "Question_negative_stereotype",
                "Question_non_negative", "Answer_negative", "Answer_non_negative")


@dataclass(frozen=True)
class TemplateRow:
    """One row of a template CSV, columns normalised to BBQ's names."""

    source: str
    category: str
    row: int  # 0-based data row in the CSV
    q_id: str
    version: str
    subcategory: str
    fields: dict[str, str] = field(hash=False)
    stereotyped_groups: tuple[str, ...] = ()
    proper_names: bool = False
    path: str = ""

    @property
    def template_id(self) -> str:
        """Question-level id: rows of one Q_id are the same question (few-shot and CV group by it)."""
        return f"{self.source}:{self.category}:{self.q_id}"

    @property
    def seed_key(self) -> str:
        """What seeds this row's draws: the file's name, never its directory, so that a build is the
        same wherever the data lives (the absolute path once made draws differ between machines)."""
        return f"{self.source}/{Path(self.path).name}" if self.path else f"{self.source}/{self.category}"


@dataclass(frozen=True)
class SlotFill:
    """A template row with its NAME/WORD slots chosen."""

    row: TemplateRow
    name1: str
    name2: str
    info1: str
    info2: str
    word1: str = ""
    word2: str = ""
    target_slot: int | None = None  # 1 or 2: which NAME is the stereotyped target
    # Intersectional templates only: each person's second-variable word ({{GEN1}}/{{OCC1}}: "woman",
    # "truck driver"), BBQ's pairing condition ("intersectional_a/b/c") and what tells apart fills that
    # BBQ repeats with identical text (its same-race pair recurs once per second race).
    gen1: str = ""
    gen2: str = ""
    subcategory: str = ""
    repeat: str = ""

    def _hash_parts(self) -> tuple[str, ...]:
        # Templates without the intersectional fields keep their historical ids and draws.
        extra = (self.gen1, self.gen2, self.subcategory, self.repeat)
        return (self.name1, self.name2, self.word1, self.word2) + (extra if any(extra) else ())

    @property
    def key(self) -> str:
        return f"r{self.row.row}-{stable_hash(*self._hash_parts()) % 10**8:08d}"


def parse_name_lists(text: str) -> tuple[list[str], list[str]]:
    """``"NAME1: [a, b]; NAME2: [c]"`` (or ``{{WORD1}}: [...]``) -> (["a", "b"], ["c"]); order of keys free."""
    out: dict[str, list[str]] = {"1": [], "2": []}
    for part in re.split(r";", text):
        m = re.match(r"\s*\{*\s*(?:NAME|WORD)([12])\s*\}*\s*:\s*\[(.*)\]\s*$", part.strip(), flags=re.S)
        if m:
            out[m.group(1)] = [w.strip() for w in m.group(2).split(",") if w.strip()]
    return out["1"], out["2"]


def read_templates(path: str | Path, source: str = "bbq", category: str | None = None) -> list[TemplateRow]:
    """Read a template CSV; rows with an empty ambiguous context are skipped (as BBQ does)."""
    path = Path(path)
    try:
        df = pd.read_csv(path, na_filter=False, dtype=str, encoding="utf-8-sig")
    except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:  # ValueError: not UTF-8
        raise InputError(path, None, None, f"cannot read template CSV ({exc})") from None
    df = df.rename(columns=_COLUMN_ALIASES)
    # Intersectional templates name the stereotyped races in their own column (plus a second variable).
    stereo_col = "Known_stereotyped_race" if "Known_stereotyped_var2" in df.columns else "Known_stereotyped_groups"
    extra = ("Known_stereotyped_var2",) if stereo_col == "Known_stereotyped_race" else ()
    for col in ("Q_id", "Category", stereo_col, *extra, *_TEXT_FIELDS):
        if col not in df.columns:
            raise InputError(path, None, col, "column missing")
    rows = []
    for i, rec in enumerate(df.to_dict("records")):
        if not rec["Ambiguous_Context"].strip():
            continue
        for col in _TEXT_FIELDS:
            for slot in _SLOT.findall(str(rec.get(col, ""))):
                if slot not in KNOWN_SLOTS:
                    raise InputError(path, i + 2, col, f"unknown slot {{{{{slot}}}}}; known: {', '.join(sorted(KNOWN_SLOTS))}")
        raw = rec[stereo_col].strip()
        try:
            stereo = tuple(ast.literal_eval(raw)) if raw else ()
        except (ValueError, SyntaxError):
            raise InputError(path, i + 2, stereo_col, f"not a list: {raw!r}") from None
        proper = str(rec.get("Proper_nouns_only", "")).strip().upper() not in ("", "0", "FALSE")
        sub = rec.get("Subcategory", "").strip()
        rows.append(TemplateRow(
            source=source, category=category or rec["Category"].strip(), row=i, q_id=rec["Q_id"].strip(),
            version=rec.get("version", "").strip() or "None", subcategory=sub if len(sub) > 1 else "None",
            fields={k: str(v) for k, v in rec.items()}, stereotyped_groups=stereo, proper_names=proper,
            path=str(path)))
    return rows


def lexical_pairs(row: TemplateRow, lexical: Literal["all", "first"] = "all") -> list[tuple[str, str]]:
    """The ({{WORD1}}, {{WORD2}}) values of a row: every combination, or the first of each."""
    lex = row.fields.get("Lexical_diversity", "").strip()
    if len(lex) <= 1:
        return [("", "")]
    w1, w2 = parse_name_lists(lex)
    w2 = w2 or [""]
    return list(itertools.product(w1, w2)) if lexical == "all" else [(w1[0], w2[0])]
