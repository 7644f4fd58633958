"""HBB-SG sentence variations: the option templates per concept pair, from our JSONL
(:func:`load_sg_variations`) or the authors' released CSV (:func:`load_authors_variations`).
Re-exported by :mod:`probe.tasks.hbb.data`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from probe.data.paths import data_root
from probe.errors import InputError
from probe.io import iter_jsonl
from probe.paths import cache_dir

__all__ = ["AUTHORS_VARIATIONS_COLUMNS", "AUTHORS_VARIATIONS_FILE", "AUTHORS_VARIATIONS_REMOTE",
           "authors_variations_path", "load_authors_variations", "load_sg_variations"]

def load_sg_variations(path: str | Path) -> dict[int, tuple[tuple[str, ...], tuple[str, ...]]]:
    """HBB-SG sentence variations: JSONL ``{"concept_id": int, "s1": [str...], "s2": [str...]}``.

    Each string is an option template with ``[[X]]`` slots, like ``s1``/``s2`` in
    questions.csv (the paper generated n = 10 per option; the shared data has
    none beyond the option itself, i.e. n = 1).
    """

    out: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for line, obj in iter_jsonl(path, required=("concept_id", "s1", "s2")):
        for key in ("s1", "s2"):
            v = obj[key]
            if not isinstance(v, list) or not v or not all(isinstance(x, str) and x.strip() for x in v):
                raise InputError(path, line, key, "must be a non-empty list of non-empty strings")
        if not isinstance(obj["concept_id"], int):
            raise InputError(path, line, "concept_id", "must be an integer")
        if obj["concept_id"] in out:
            raise InputError(path, line, "concept_id", f"duplicate concept_id {obj['concept_id']}")
        out[obj["concept_id"]] = (tuple(obj["s1"]), tuple(obj["s2"]))
    return out


#: The authors' HBB-SG variation set (JP-25/Hidden-Bias-Benchmark): its path in their repository and its
#: name in ours (``probe data fetch hbb`` stores it beside questions.csv, or alone as data set ``hbb_sg``)
AUTHORS_VARIATIONS_REMOTE = "Questions/20241207-0945_all_data_more_contexts_questions.csv"
AUTHORS_VARIATIONS_FILE = "sg_variations.csv"
#: columns the loader needs; ``bias type1`` / ``bias type2`` / ``Context``, when present, are checked
AUTHORS_VARIATIONS_COLUMNS = ("id", "s1", "s2")


def authors_variations_path(data_dir: str | Path | None = None) -> Path | None:
    """Where the authors' variation set was fetched, or None: ``data_dir`` (a config's), then the data
    root (``PROBE_DATA``), then the probe cache, each in ``hbb/`` and ``hbb_sg/``."""

    dirs = [Path(data_dir)] if data_dir else []
    for root in dict.fromkeys([data_root(), cache_dir() / "data"]):
        dirs += [root / "hbb", root / "hbb_sg"]
    return next((d / AUTHORS_VARIATIONS_FILE for d in dirs if (d / AUTHORS_VARIATIONS_FILE).is_file()), None)


def load_authors_variations(path: str | Path, concepts: Sequence[Any] | None = None
                            ) -> dict[int, tuple[tuple[str, ...], tuple[str, ...]]]:
    """The authors' HBB-SG variations (``all_data_more_contexts_questions.csv``): per concept pair, its
    ``s1`` and ``s2`` option templates (``[[X]]`` slots), row j of an ``id`` pairing s1_j with s2_j.

    The file has 15,470 rows, 10 per concept pair; ``id`` is the 0-based row of ``questions.csv``
    (``concept_id``). Their notebook (``src/questions_final.ipynb``, last cells) reads the same three
    columns and fills the slots per identity. With ``concepts`` (:class:`probe.tasks.hbb.data.HBBConcept` s)
    the ids must be known concept pairs and,
    where the file has them, ``bias type1`` / ``bias type2`` / ``Context`` must equal the concept's
    (a file joined to the wrong rows is an error, never silently scored). Errors name the file, the
    line and the field.
    """
    path = Path(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except Exception as exc:  # pandas raises several parser error types
        raise InputError(path, None, None, f"not a readable CSV ({exc})") from None
    missing = [c for c in AUTHORS_VARIATIONS_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(path, 1, missing[0], f"missing column(s) {missing}; has {list(df.columns)}")
    by_id = {c.concept_id: c for c in concepts} if concepts is not None else None
    checks = [(col, attr) for col, attr in (("bias type1", "concept_1"), ("bias type2", "concept_2"),
                                             ("Context", "context")) if col in df.columns]
    out: dict[int, tuple[list[str], list[str]]] = {}
    for i, row in enumerate(df.itertuples(index=False)):
        line = i + 2  # the header is line 1
        r = dict(zip(df.columns, row))
        raw = r["id"].strip()
        try:
            cid = int(float(raw)) if raw and float(raw).is_integer() else None
        except ValueError:
            cid = None
        if cid is None or cid < 0:
            raise InputError(path, line, "id", f"must be a concept row (integer >= 0), got {raw!r}")
        for key in ("s1", "s2"):
            if not r[key].strip():
                raise InputError(path, line, key, "empty option template")
        if by_id is not None:
            if cid not in by_id:
                raise InputError(path, line, "id", f"no concept pair {cid} in questions.csv")
            for col, attr in checks:
                if r[col].strip() != str(getattr(by_id[cid], attr)).strip():
                    raise InputError(path, line, col, f"{r[col]!r} is not concept pair {cid}'s "
                                     f"{getattr(by_id[cid], attr)!r}: the file does not match questions.csv")
        a, b = out.setdefault(cid, ([], []))
        a.append(r["s1"].strip())
        b.append(r["s2"].strip())
    if not out:
        raise InputError(path, None, None, "no variation rows")
    return {cid: (tuple(a), tuple(b)) for cid, (a, b) in out.items()}
