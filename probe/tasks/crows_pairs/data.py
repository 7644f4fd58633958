"""CrowS-Pairs loader (Nangia et al., 2020): ``crows_pairs/crows_pairs_anonymized.csv``.

Each row is a minimal pair: ``sent_more`` (the more stereotypical sentence, i.e.
the one about the historically disadvantaged group for ``stereo`` rows and the one
violating a stereotype about it for ``antistereo`` rows - the data set's own
convention) and ``sent_less``. The overt-bias baseline the HBB paper compares
against (its Table 1, column CS) is the percentage of pairs where the model gives
``sent_more`` the higher likelihood; see :mod:`probe.tasks.crows_pairs.metrics`.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "c.csv"
>>> _ = p.write_text("sent_more,sent_less,stereo_antistereo,bias_type\\nA x.,B x.,stereo,age\\n")
>>> load_crows_pairs(p)[0].direction
'stereo'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from probe.errors import InputError

__all__ = ["CrowsPair", "load_crows_pairs", "DEFAULT_FILE"]

DEFAULT_FILE = "crows_pairs_anonymized.csv"
_DIRECTIONS = ("stereo", "antistereo")


@dataclass(frozen=True)
class CrowsPair:
    """One CrowS-Pairs row."""

    id: str  # "crows:{row}" with the 0-based data row (the CSV's unnamed index column when present)
    sent_more: str
    sent_less: str
    direction: str  # "stereo" | "antistereo"
    bias_type: str


def load_crows_pairs(path: str | Path | None = None) -> list[CrowsPair]:
    """Read the CSV (default: ``dataset_dir("crows_pairs") / DEFAULT_FILE``); errors name line and field."""
    if path is None:
        from probe.data.paths import dataset_dir

        path = dataset_dir("crows_pairs") / DEFAULT_FILE
    path = Path(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as exc:  # ParserError, EmptyDataError and UnicodeDecodeError are ValueErrors
        raise InputError(path, None, None, f"cannot read CSV ({exc.__class__.__name__}: {exc})") from None
    for col in ("sent_more", "sent_less", "stereo_antistereo", "bias_type"):
        if col not in df.columns:
            raise InputError(path, 1, col, "missing column")
    index_col = "Unnamed: 0" if "Unnamed: 0" in df.columns else None
    pairs = []
    for i, rec in enumerate(df.to_dict("records")):
        line = i + 2  # approximate for rows with embedded newlines; the released file has none
        for col in ("sent_more", "sent_less", "bias_type"):
            if not rec[col].strip():
                raise InputError(path, line, col, "empty")
        if rec["stereo_antistereo"] not in _DIRECTIONS:
            raise InputError(path, line, "stereo_antistereo", f"must be one of {_DIRECTIONS}, got {rec['stereo_antistereo']!r}")
        rid = rec[index_col] if index_col and rec[index_col].strip() else str(i)
        pairs.append(CrowsPair(f"crows:{rid}", rec["sent_more"], rec["sent_less"], rec["stereo_antistereo"], rec["bias_type"]))
    if len({p.id for p in pairs}) != len(pairs):
        raise InputError(path, None, index_col, "duplicate row ids")
    return pairs
