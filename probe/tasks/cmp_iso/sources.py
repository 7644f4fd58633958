"""iso/cmp context pairs from sentence-pair benchmarks and WinoBias (iso/cmp paper Appendix C, the authors' code).

Sentence pairs (StereoSet, CrowS-Pairs, RedditBias style; the authors'
``ssrb_utils.py``): each pair (stereotypical sentence, anti-stereotypical
sentence) becomes one context pair with the "odd or unusual" question:
iso asks "Does this sentence present an odd or unusual scenario?" of each
sentence, cmp shows both as options A/B and asks "Which sentence presents a
more odd or unusual scenario?". t = the stereotypical sentence ("stereo"),
so a positive PG means the stereotype was judged odd.

- CrowS-Pairs (:func:`crows_pairs_sentence_pairs`): ``sent_more`` is t and
  ``sent_less`` t' whatever the row's ``stereo_antistereo`` direction (the
  authors use ``sent_more`` as "stereo"); rows of one ``bias_type`` (gender,
  race = ``race-color``, religion), exact duplicate rows dropped, file order.
  Rebuilding the gender category reproduces the released
  ``crows_pairs_gender_cot_gen.csv`` (a unit test checks it).
- StereoSet (:func:`stereoset_sentence_pairs`): the ``stereotype`` and
  ``anti-stereotype`` sentences of each example of a bias type (intersentence
  examples prefix the context, as the authors do not say; see docs/cmp_iso.md).
- any other source: give ``(id, stereotypical, anti-stereotypical)`` triples.

WinoBias (:func:`convert_winobias`, the authors' ``wino_bias.py``): lines of the
``{pro,anti}_stereotyped_type{1,2}`` files ("1 [The janitor] reprimanded the
accountant because [he] made ..."); consecutive lines (0-1, 2-3, ...) are the
two versions of one sentence, so the other line's bracketed entity is the
wrong referent. t ("bias") is the stereotypical referent: the correct one in a
pro-stereotyped sentence, the wrong one in an anti-stereotyped one.

>>> pairs, stats = convert_sentence_pairs([("x1", "Women cannot drive.", "Men cannot drive.")], "demo")
>>> pairs[0].cmp_t_first.parts.task.splitlines()[1:3]
['A: Women cannot drive. ', 'B: Men cannot drive. {}']
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from probe.data.paths import dataset_dir
from probe.tasks.cmp_iso.data import CmpIsoPair
from probe.tasks.cmp_iso.convert import BODIES, ConvertStats, convert_items, make_pair, slot_ok, task_text
from probe.errors import InputError
from probe.tasks.crows_pairs.data import load_crows_pairs
from probe.tasks.stereoset.data import load_stereoset

#: CrowS-Pairs ``bias_type`` of each category (the authors' ``map_category_file``).
CROWS_CATEGORIES = {"gender": "gender", "race": "race-color", "religion": "religion"}


def convert_sentence_pairs(rows: Iterable[tuple[str, str, str]], benchmark: str,
                           bodies: Mapping[str, str] | None = None) -> tuple[list[CmpIsoPair], ConvertStats]:
    """Context pairs from ``(id, stereotypical, anti-stereotypical)`` sentence triples (the "odd or
    unusual" questions). Pairs with identical sentences or braces in the text are skipped and counted."""
    body = bodies or BODIES["ssrb"]
    pairs: list[CmpIsoPair] = []
    skipped: dict[str, int] = {}
    n = 0
    for i, (rid, stereo, anti) in enumerate(rows):
        n += 1
        if stereo.strip() == anti.strip():
            skipped["identical"] = skipped.get("identical", 0) + 1
            continue
        iso = (task_text(body["iso"], sentence=stereo), task_text(body["iso"], sentence=anti))
        cmp_ = (task_text(body["cmp"], option_a=stereo, option_b=anti),
                task_text(body["cmp"], option_a=anti, option_b=stereo))
        if not slot_ok(cmp_, iso):
            skipped["braces_in_text"] = skipped.get("braces_in_text", 0) + 1
            continue
        pairs.append(make_pair(benchmark, rid, "stereo", "anti", iso, cmp_, i))
    return pairs, ConvertStats(n, len(pairs), {}, skipped)


def crows_pairs_sentence_pairs(category: str, path: str | Path | None = None) -> list[tuple[str, str, str]]:
    """(id, sent_more, sent_less) of one category of CrowS-Pairs, duplicates dropped, in file order."""

    if category not in CROWS_CATEGORIES:
        raise ValueError(f"crows_pairs: unknown category {category!r}; choose from {sorted(CROWS_CATEGORIES)}")
    seen: set[tuple[str, str]] = set()
    out = []
    for p in load_crows_pairs(path):
        if p.bias_type != CROWS_CATEGORIES[category] or (p.sent_more, p.sent_less) in seen:
            continue
        seen.add((p.sent_more, p.sent_less))
        out.append((p.id, p.sent_more, p.sent_less))
    return out


def stereoset_sentence_pairs(category: str, path: str | Path | None = None,
                             splits: Sequence[str] = ("intrasentence",)) -> list[tuple[str, str, str]]:
    """(id, stereotype, anti-stereotype) sentences of StereoSet examples whose ``bias_type`` is
    ``category`` (gender, race, religion, profession); intersentence ones prefixed by their context."""

    out = []
    for ex in load_stereoset(path, splits=tuple(splits)):
        if ex.bias_type != category:
            continue
        s, a = ex.sentence("stereotype"), ex.sentence("anti-stereotype")
        if ex.split == "intersentence":
            s, a = f"{ex.context} {s}", f"{ex.context} {a}"
        out.append((ex.id, s, a))
    return out


_BRACKETS = re.compile(r"\[([^\]]+)\]")
_PRONOUNS = ("she", "her", "he", "him", "his")
_ARTICLE = re.compile(r"^(the|a|an)\s+", re.IGNORECASE)


def _wino_line(line: str, path: str, n: int) -> tuple[str, str, str]:
    """(clean sentence, referent, pronoun) of one WinoBias line."""
    words = _BRACKETS.findall(line)
    if len(words) < 2 or words[0].lower() in _PRONOUNS or words[1].lower() not in _PRONOUNS:
        raise InputError(path, n, None, f"expected '[entity] ... [pronoun]' brackets, got {line.strip()!r}")
    sentence = re.sub(r"\[|\]", "", " ".join(line.split()[1:]))  # drop the leading line number
    return sentence, words[0], words[1]


def convert_winobias(files: Mapping[str, Sequence[str]], benchmark: str = "winobias",
                     bodies: Mapping[str, str] | None = None) -> tuple[list[CmpIsoPair], ConvertStats]:
    """Context pairs from WinoBias files: ``files`` maps a file name (containing ``pro`` or ``anti``)
    to its lines. Anti-stereotyped files first, then pro (the authors' order); each file needs an even
    number of lines (consecutive lines are one sentence's two versions). Exact duplicate sentences
    (same text, same referents) are dropped and counted, as the authors' ``drop_duplicates`` does."""
    body = bodies or BODIES["wino_bias"]
    order = sorted(files, key=lambda k: (0 if "anti" in Path(k).name else 1, k))
    pairs: list[CmpIsoPair] = []
    skipped: dict[str, int] = {}
    seen: set[tuple[str, str, str]] = set()
    n = 0
    for name in order:
        if "anti" not in Path(name).name and "pro" not in Path(name).name:
            raise InputError(name, None, None, "WinoBias file name must say 'pro' or 'anti'")
        lines = [ln for ln in files[name] if ln.strip()]
        if len(lines) % 2:
            raise InputError(name, len(lines), None, "odd number of lines (consecutive lines come in pairs)")
        parsed = [_wino_line(ln, name, i + 1) for i, ln in enumerate(lines)]
        pro = "anti" not in Path(name).name
        for i, (sentence, correct, pronoun) in enumerate(parsed):
            n += 1
            wrong = parsed[i + 1 if i % 2 == 0 else i - 1][1]
            correct, wrong = _ARTICLE.sub("", correct), _ARTICLE.sub("", wrong)
            stereo, anti = (correct, wrong) if pro else (wrong, correct)
            key = (sentence, stereo, anti)
            if key in seen:
                skipped["duplicate"] = skipped.get("duplicate", 0) + 1
                continue
            seen.add(key)
            iso = tuple(task_text(body["iso"], sentence=sentence, pronoun=pronoun, entity=e) for e in (stereo, anti))
            cmp_ = tuple(task_text(body["cmp"], sentence=sentence, pronoun=pronoun, option_a=f"the {a}",
                                   option_b=f"the {b}") for a, b in ((stereo, anti), (anti, stereo)))
            if not slot_ok(cmp_, iso):
                skipped["braces_in_text"] = skipped.get("braces_in_text", 0) + 1
                continue
            pairs.append(make_pair(benchmark, f"{Path(name).name}:{i}", "bias", "unbias", iso, cmp_, n - 1))  # type: ignore[arg-type]
    return pairs, ConvertStats(n, len(pairs), {}, skipped)


def read_winobias_dir(directory: str | Path) -> dict[str, list[str]]:
    """The four WinoBias test files of a directory (``*_stereotyped_type[12].test``; the dev files when
    no test files are there) as lines."""
    d = Path(directory)
    files = sorted(d.glob("*_stereotyped_type[12].test")) or sorted(d.glob("*_stereotyped_type[12].dev"))
    if not files:
        raise InputError(d, None, None, "no WinoBias '*_stereotyped_type1/2.test' files")
    return {str(f): f.read_text(encoding="utf-8").splitlines() for f in files}


#: Benchmarks the converters can build, and the BBQ file of each category.
BUILDABLE = ("bbq", "crows_pairs", "stereoset", "redditbias", "winobias")
BBQ_FILES = {"gender": "Gender_identity.jsonl", "race": "Race_ethnicity.jsonl", "religion": "Religion.jsonl"}


def read_pair_csv(path: str | Path) -> list[tuple[str, str, str]]:
    """(id, stereotypical, anti-stereotypical) from a CSV with columns ``sent_more``/``sent_less`` or
    ``stereo``/``anti`` (optional ``id``): a RedditBias-style or any other sentence-pair source."""

    path = Path(path)
    if not path.is_file():
        raise InputError(path, None, None, "file not found")

    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, None, None, f"cannot read ({exc.__class__.__name__}: {exc})") from None
    try:
        return _pair_rows(path, csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise InputError(path, None, None, f"not valid CSV ({exc})") from None


def _pair_rows(path: Path, reader: Any) -> list[tuple[str, str, str]]:
    cols = reader.fieldnames or []
    a, b = ("sent_more", "sent_less") if "sent_more" in cols else ("stereo", "anti")
    for c in (a, b):
        if c not in cols:
            raise InputError(path, 1, c, "missing column (need sent_more/sent_less or stereo/anti)")
    out = []
    for i, row in enumerate(reader):
        for c in (a, b):
            if not (row.get(c) or "").strip():
                raise InputError(path, reader.line_num, c, "empty")
        out.append((row.get("id") or str(i), row[a], row[b]))
    return out


def build_benchmark(benchmark: str, category: str, source: str | Path | None = None,
                    bbq_conditions: tuple[str, ...] = ("ambig",)) -> tuple[list[CmpIsoPair], ConvertStats]:
    """Context pairs of ``benchmark`` in ``category`` from its original data.

    ``source``: the original data (default: ``dataset_dir`` of bbq / crows_pairs
    / stereoset; required for redditbias (a pair CSV, :func:`read_pair_csv`)
    and winobias (a directory of its ``.test`` files)). BBQ uses the authors'
    filters (at most 4 items per ``question_index``; gender: no trans/cis answers).
    """

    if benchmark not in BUILDABLE:
        raise ValueError(f"cannot build cmp_iso benchmark {benchmark!r}; buildable: {list(BUILDABLE)}")
    if benchmark == "bbq":
        from probe.io import read_jsonl

        if category not in BBQ_FILES:
            raise ValueError(f"bbq: unknown category {category!r}; choose from {sorted(BBQ_FILES)}")
        path = Path(source) if source else dataset_dir("bbq") / "data" / BBQ_FILES[category]
        if path.is_dir():
            path = path / BBQ_FILES[category]
        rows = read_jsonl(path)
        return convert_items(rows, benchmark="bbq", conditions=bbq_conditions, max_per_question=4,
                             drop_trans_cis=category == "gender")
    if benchmark == "crows_pairs":
        path = Path(source) if source else None
        if path is not None and path.is_dir():
            path = path / "crows_pairs_anonymized.csv"
        return convert_sentence_pairs(crows_pairs_sentence_pairs(category, path), "crows_pairs")
    if benchmark == "stereoset":
        return convert_sentence_pairs(stereoset_sentence_pairs(category, source), "stereoset")
    if source is None:
        raise ValueError(f"{benchmark}: give the original data with source= (--from)")
    if benchmark == "redditbias":
        return convert_sentence_pairs(read_pair_csv(source), "redditbias")
    if category != "gender":
        raise ValueError("winobias: only the gender category exists")
    return convert_winobias(read_winobias_dir(source))
