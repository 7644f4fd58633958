"""The iso/cmp prompt sets released with "To Compare, or Not to Compare" (iso/cmp paper).

What the released CSVs hold (``cmp_iso/*.csv``, gender category, 8 benchmarks),
established by inspecting every file:

- one row per prompt, columns ``instance_id, context_pair_id, task_type,
  is_focused_p, target_1, target_2, prompts`` (``prompts`` is a JSON list
  holding exactly one prompt string in every released file);
- every ``context_pair_id`` has exactly four rows:

  ==========  ============  =====================  ==========================
  task_type   is_focused_p  target_1 / target_2    meaning
  ==========  ============  =====================  ==========================
  iso         True          t / (empty)            asks "Yes/No" about t
  iso         False         t' / (empty)           asks "Yes/No" about t'
  cmp         True          t / t'                 option A = t, B = t'
  cmp         False         t' / t                 option A = t', B = t
  ==========  ============  =====================  ==========================

  so t (the stereotypical / advantaged / correct target of the paper's Table 1)
  is ``target_1`` of the focused rows: ``stereo`` (BBQ, CrowS-Pairs,
  RedditBias, StereoSet), ``male`` (DE-Gen, DT-Tox), ``bias`` (WinoBias),
  ``corr`` (MMLU); t' is ``anti``, ``female``, ``unbias``, ``wrong``.
- every prompt has four newline-separated components in the paper's
  appendix D order (template 1): line 1 the **header** ("You are a helpful
  assistant. "), line 2 the **instructions** ("Please provide your final answer
  as one of the following: \\boxed{Yes} or \\boxed{No}. " or ``\\boxed{A} or
  \\boxed{B}``), the last line the **footer** (the CoT directive "Please reason
  step by step and then provide your final answer inside a \\boxed{}. "), and
  everything between them the benchmark **task** (never rephrased).
- every cmp task holds one ``" {}"`` placeholder right after option B: the slot
  of the neutral option ("C: Prefer not to answer."). Without the neutral
  option the released code formats it with "" (leaving ``"B: ... "`` with the
  same trailing space as the A line), which is what
  :mod:`probe.tasks.cmp_iso.prompts` does.

Rows holding several prompts (the authors' prompt-variation runs write all 54
variations of a prompt into its ``prompts`` list, in their order: variant k
uses template 1 for even k, template 2 for odd k) load too: variant 0 gives
the four components, and every other variant must carry the same task (the
authors never rephrase it), so :mod:`probe.tasks.cmp_iso.prompts` rebuilds all 54
from variant 0; the raw texts are kept in ``CmpIsoPrompt.variants``.

Other categories (race, religion) built by the converters
(:mod:`probe.tasks.cmp_iso.convert`, :mod:`probe.tasks.cmp_iso.sources`,
``probe data build cmp_iso``) are written with the authors' file naming
(``<benchmark>_<category>_cot_gen.csv``, :func:`benchmark_file`) and read by
:func:`load_benchmark` with ``category=``.

This module only parses and validates; building the final prompt strings
(direct footer, neutral option, variations) is :mod:`probe.tasks.cmp_iso.prompts`.

>>> pairs = load_benchmark("bbq")                        # doctest: +SKIP
>>> pairs[0].iso_t.parts.task.splitlines()[-1]           # doctest: +SKIP
'Was the woman the secretary? '
"""

from __future__ import annotations

import csv
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from probe.data.paths import dataset_dir
from probe.errors import InputError

#: Our short benchmark names -> released file names (gender category).
BENCHMARK_FILES: dict[str, str] = {
    "stereoset": "stereo_set_gender_cot_gen.csv",
    "redditbias": "reddit_bias_gender_cot_gen.csv",
    "bbq": "bbq_gender_cot_gen.csv",
    "de_gen": "discrim_eval_gen_gender_cot_gen.csv",
    "dt_tox": "dt_toxic_gender_cot_gen.csv",
    "crows_pairs": "crows_pairs_gender_cot_gen.csv",
    "winobias": "wino_bias_gender_cot_gen.csv",
    "mmlu": "mmlu_cot_gen.csv",
}

#: Display names in the paper's table headers.
BENCHMARK_TITLES: dict[str, str] = {
    "stereoset": "StereoSet",
    "redditbias": "RedditBias",
    "bbq": "BBQ",
    "de_gen": "DE-Gen",
    "dt_tox": "DT-Tox",
    "crows_pairs": "CrowS-Pairs",
    "winobias": "WinoBias",
    "mmlu": "MMLU",
}

#: What a positive Parity Gap means per benchmark (t = ``target_1`` of the focused
#: rows, see the module doc; PG > 0 favours t, PG < 0 favours t').
PG_POSITIVE: dict[str, str] = {
    "stereoset": "the stereotypical sentence is judged the odd or unusual one (PG < 0: the anti-stereotypical "
                 "one, the stereotype-consistent judgement)",
    "redditbias": "the original Reddit comment (the stereotype) is judged the odd or unusual one, not its "
                  "group-swapped counterfactual (PG < 0: stereotype-consistent)",
    "crows_pairs": "the more stereotypical sentence is judged the odd or unusual one (PG < 0: stereotype-consistent)",
    "bbq": "the stereotype-consistent person is the answer (for negative and non-negative questions alike), "
           "although the ambiguous context supports neither",
    "de_gen": "the favourable decision goes to the male rather than the female individual",
    "dt_tox": "the toxic text is attributed to a male rather than a female author",
    "winobias": "the pronoun is resolved to the gender-stereotypical occupation",
    "mmlu": "the correct answer is preferred over the wrong one (a knowledge control, not a bias)",
}

#: The sign under which iso/cmp paper reports a benchmark's PG in its tables (Tables 2, 3, 8, E.2, ...), relative
#: to this package's PG (toward t, as the authors' code computes it). The paper re-orients StereoSet, RedditBias
#: and DE-Gen so that a positive value is the direction models prefer: its text says models judge the
#: anti-stereotypical sentence the odd one (StereoSet, RedditBias) and favour the female individual (DE-Gen),
#: both PG < 0 here, while its tables show these benchmarks positive (e.g. Table 2, cmp 0.5-0.8 with ∗); BBQ
#: ("default to stereotypical answers") and DT-Tox ("attribute toxic statements to men") are positive both
#: ways. CrowS-Pairs asks RedditBias's question and "mirrors" its target mapping (appendix E.2), so it is
#: re-oriented with it. Benchmarks not listed keep this package's sign (+1).
PAPER_ORIENTATION: dict[str, int] = {"stereoset": -1, "redditbias": -1, "crows_pairs": -1, "de_gen": -1}


def paper_sign(benchmark: str) -> int:
    """+1 or -1: multiply this package's PG by it to get the orientation iso/cmp paper's tables use.

    >>> paper_sign("stereoset"), paper_sign("bbq")
    (-1, 1)
    """
    return PAPER_ORIENTATION.get(benchmark, 1)


NEUTRAL_SLOT = " {}"  # the released placeholder for the cmp neutral option
N_VARIATIONS = 54  # prompts per row in the authors' prompt-variation CSVs (3 x 3 x 3 x 2)
CATEGORIES = ("gender", "race", "religion")
_REQUIRED = ("instance_id", "context_pair_id", "task_type", "is_focused_p", "target_1", "target_2", "prompts")

TaskType = Literal["iso", "cmp"]


@dataclass(frozen=True)
class PromptParts:
    """The four appendix-D components of one prompt (verbatim, trailing spaces kept)."""

    header: str
    instructions: str
    task: str
    footer: str

    def text(self) -> str:
        """The prompt in template 1 order; for released prompts this is the original string."""
        return "\n".join((self.header, self.instructions, self.task, self.footer))


@dataclass(frozen=True)
class CmpIsoPrompt:
    """One released prompt.

    ``target`` is the target an iso prompt asks about (``"t"`` or ``"t_prime"``);
    ``order`` says which target is option A in a cmp prompt (``"t_first"`` or
    ``"t_prime_first"``); the other field is ``None``.
    """

    benchmark: str
    instance_id: int
    context_pair_id: int | str
    task_type: TaskType
    target: str | None
    order: str | None
    parts: PromptParts
    line: int  # 1-based CSV line (header = line 1), for error messages
    variants: tuple[str, ...] = ()  # all prompt texts of a multi-prompt row (the 54 variations), else ()


@dataclass(frozen=True)
class CmpIsoPair:
    """The four prompts of one context pair and the names of its two targets."""

    benchmark: str
    context_pair_id: int | str
    t_name: str  # e.g. "stereo", "male", "corr"
    t_prime_name: str
    iso_t: CmpIsoPrompt
    iso_t_prime: CmpIsoPrompt
    cmp_t_first: CmpIsoPrompt
    cmp_t_prime_first: CmpIsoPrompt

    def prompts(self) -> tuple[CmpIsoPrompt, ...]:
        return (self.iso_t, self.iso_t_prime, self.cmp_t_first, self.cmp_t_prime_first)


def split_parts(text: str, path: Path | str, line: int, template: int = 1) -> PromptParts:
    """Split a released prompt into header / instructions / task / footer (see module doc).

    ``template`` 2 (header, task, instructions, footer) is the order of the odd
    variations of a multi-prompt row.
    """
    lines = text.split("\n")
    if len(lines) < 4:
        raise InputError(path, line, "prompts", f"expected >= 4 lines (header, instructions, task, footer), got {len(lines)}")
    if template == 2:
        parts = PromptParts(lines[0], lines[-2], "\n".join(lines[1:-2]), lines[-1])
    else:
        parts = PromptParts(lines[0], lines[1], "\n".join(lines[2:-1]), lines[-1])
    if "\\boxed{" not in parts.instructions:
        raise InputError(path, line, "prompts", f"line 2 is not the answer-format instruction: {parts.instructions!r}")
    if "\\boxed{}" not in parts.footer:
        raise InputError(path, line, "prompts", f"last line is not the CoT footer: {parts.footer!r}")
    return parts


def load_csv(path: str | Path, benchmark: str | None = None) -> list[CmpIsoPair]:
    """Load one released CSV into context pairs, validating the 4-rows-per-pair layout."""
    path = Path(path)
    benchmark = benchmark or path.stem
    csv.field_size_limit(1 << 30)
    if not path.is_file():
        raise InputError(path, None, None, "file not found")
    try:
        return _load_csv(path, benchmark)
    except UnicodeDecodeError as exc:
        raise InputError(path, None, None, f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


def _load_csv(path: Path, benchmark: str) -> list[CmpIsoPair]:
    by_pair: dict[int, dict[tuple[str, bool], tuple[dict, int]]] = {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in _REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(path, 1, missing[0], "missing column")
        for row in reader:
            n = reader.line_num  # physical line where the row ends (prompts span lines)
            try:
                cp = int(row["context_pair_id"])
                int(row["instance_id"])
            except ValueError:
                raise InputError(path, n, "context_pair_id", "not an integer") from None
            tt = row["task_type"]
            if tt not in ("iso", "cmp"):
                raise InputError(path, n, "task_type", f"expected 'iso' or 'cmp', got {tt!r}")
            focused = {"True": True, "False": False}.get(row["is_focused_p"])
            if focused is None:
                raise InputError(path, n, "is_focused_p", f"expected True/False, got {row['is_focused_p']!r}")
            slot = by_pair.setdefault(cp, {})
            if (tt, focused) in slot:
                raise InputError(path, n, "context_pair_id", f"duplicate ({tt}, is_focused_p={focused}) row for pair {cp}")
            slot[(tt, focused)] = (row, n)
    return [_build_pair(path, benchmark, cp, slot) for cp, slot in sorted(by_pair.items())]


def _build_pair(path: Path, benchmark: str, cp: int, slot: dict) -> CmpIsoPair:
    keys = [("iso", True), ("iso", False), ("cmp", True), ("cmp", False)]
    for k in keys:
        if k not in slot:
            last_line = max(n for _, n in slot.values())
            raise InputError(path, last_line, "task_type", f"context pair {cp} lacks its {k[0]} row with is_focused_p={k[1]}")
    (iso_t, n1), (iso_tp, n2), (cmp_t, n3), (cmp_tp, n4) = (slot[k] for k in keys)
    t, tp = iso_t["target_1"], iso_tp["target_1"]
    if (cmp_t["target_1"], cmp_t["target_2"]) != (t, tp) or (cmp_tp["target_1"], cmp_tp["target_2"]) != (tp, t):
        raise InputError(path, n3, "target_1", f"context pair {cp}: cmp targets do not match the iso targets ({t!r}, {tp!r})")
    if t == tp:
        raise InputError(path, n1, "target_1", f"context pair {cp}: both targets are {t!r}")

    def prompt(row: dict, n: int, tt: str, target: str | None, order: str | None) -> CmpIsoPrompt:
        try:
            texts = json.loads(row["prompts"])
        except json.JSONDecodeError as exc:
            raise InputError(path, n, "prompts", f"not a JSON list ({exc.msg})") from None
        if not isinstance(texts, list) or not texts or not all(isinstance(x, str) for x in texts):
            raise InputError(path, n, "prompts", "expected a non-empty JSON list of strings")
        if len(texts) not in (1, N_VARIATIONS):
            raise InputError(path, n, "prompts", f"expected 1 prompt or the {N_VARIATIONS} variations per row, "
                                                 f"got {len(texts)}")
        parts = split_parts(texts[0], path, n)
        if tt == "cmp" and parts.task.count(NEUTRAL_SLOT) != 1:
            raise InputError(path, n, "prompts", "cmp prompt lacks its single ' {}' neutral-option slot")
        for k, text in enumerate(texts[1:], start=1):
            # the authors' order: itertools.product(headers, instructions, footers, templates)
            other = split_parts(text, path, n, template=1 + k % 2)
            if other.task != parts.task:
                raise InputError(path, n, "prompts", f"variation {k} has another task than variation 0 "
                                                     "(only header, instructions and footer may vary)")
        return CmpIsoPrompt(benchmark, int(row["instance_id"]), cp, tt, target, order, parts, n,  # type: ignore[arg-type]
                            tuple(texts) if len(texts) > 1 else ())

    return CmpIsoPair(
        benchmark=benchmark,
        context_pair_id=cp,
        t_name=t,
        t_prime_name=tp,
        iso_t=prompt(iso_t, n1, "iso", "t", None),
        iso_t_prime=prompt(iso_tp, n2, "iso", "t_prime", None),
        cmp_t_first=prompt(cmp_t, n3, "cmp", None, "t_first"),
        cmp_t_prime_first=prompt(cmp_tp, n4, "cmp", None, "t_prime_first"),
    )


def benchmark_file(name: str, category: str = "gender") -> str:
    """The CSV file name of benchmark ``name`` in ``category``, the authors' naming.

    >>> benchmark_file("crows_pairs", "race"), benchmark_file("mmlu", "race")
    ('crows_pairs_race_cot_gen.csv', 'mmlu_cot_gen.csv')
    """
    if name not in BENCHMARK_FILES:
        raise ValueError(f"unknown cmp_iso benchmark {name!r}; choose from {sorted(BENCHMARK_FILES)}")
    if category not in CATEGORIES:
        raise ValueError(f"unknown cmp_iso category {category!r}; choose from {list(CATEGORIES)}")
    released = BENCHMARK_FILES[name]
    if "_gender_" not in released:  # MMLU: a control without a demographic category
        return released
    return released.replace("_gender_", f"_{category}_")


def load_benchmark(name: str, root: str | Path | None = None, category: str = "gender") -> list[CmpIsoPair]:
    """Context pairs of benchmark ``name`` (a key of :data:`BENCHMARK_FILES`) in ``category``.

    ``root`` defaults to ``dataset_dir("cmp_iso")`` (honours ``PROBE_DATA``);
    the released files are gender, other categories come from
    ``probe data build cmp_iso`` (written into ``root``).
    """
    base = Path(root) if root is not None else dataset_dir("cmp_iso")
    path = base / benchmark_file(name, category)
    if not path.is_file() and category != "gender":
        raise InputError(path, None, None, f"file not found: build it with 'probe data build cmp_iso --benchmark {name} "
                                           f"--category {category} --output {base}'")
    return load_csv(path, benchmark=name)


def sample_pairs(pairs: list[CmpIsoPair], n: int | None, seed: int = 0) -> list[CmpIsoPair]:
    """A seeded random sample of ``n`` pairs (all of them when ``n`` is None or >= len), in id order."""
    if n is None or n >= len(pairs):
        return list(pairs)
    chosen = random.Random(seed).sample(range(len(pairs)), n)
    return [pairs[i] for i in sorted(chosen)]
