"""Greedy agreement: does the score argmax say what greedy decoding says?

For every label request of a run, the model greedily decodes a few tokens
after the very prompt that was scored, and the label it wrote is parsed
(:func:`parse_label`). Reported per request kind and overall
(:func:`agreement_summary`): the share of items where the model answers with
a label at all, and among those, how often the score argmax is that label.

Parsing rule: leading whitespace and markdown emphasis/brackets (``*``,
``(``, ``[``, ``"``) are skipped; the answer is the longest label that the
text then starts with, exactly, followed by the end of the text or a
character that is not a letter or digit (so label ``A`` does not match
"Answer", and ``1`` does not match "10"); failing that, the same test without
case (``yes`` for ``Yes``). Anything else is "no label".

>>> parse_label(" B) the doctor", ("A", "B", "C"))
1
>>> parse_label("Answer: A", ("A", "B", "C")) is None
True
>>> parse_label("**2**.", ("1", "2", "3"))
1
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

_SKIP = " \t\n\r*([\"'`"


def parse_label(text: str, labels: Sequence[str]) -> int | None:
    """Index of the label ``text`` answers with (see the module doc), or None."""
    body = text.lstrip(_SKIP)
    for exact in (True, False):
        hits = []
        for i, label in enumerate(labels):
            lab = label.strip()
            head = body[:len(lab)]
            if not lab or (head != lab if exact else head.lower() != lab.lower()):
                continue
            rest = body[len(lab):]
            if not rest or not rest[0].isalnum():
                hits.append((len(lab), -i, i))
        if hits:
            return max(hits)[2]
    return None


def agreement_rows(records: Iterable[Any], texts: Mapping[str, str]) -> list[dict]:
    """One row per label record with a greedy text: its kind, the parsed label and the score argmax."""
    rows = []
    for rec in records:
        if getattr(rec, "kind", None) != "label" or rec.id not in texts:
            continue
        parsed = parse_label(texts[rec.id], tuple(rec.options))
        rows.append({"id": rec.id, "kind": str(rec.meta.get("kind", "label")), "greedy_text": texts[rec.id],
                     "greedy_index": parsed, "pred_index": rec.pred_index})
    return rows


def agreement_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``{"all": stats, "by_kind": {kind: stats}}``; stats: ``n``, ``n_label`` (answered with a label),
    ``share_label``, ``n_agree`` (score argmax = greedy label, among those), ``agreement``.

    >>> agreement_summary([{"kind": "k", "greedy_index": 0, "pred_index": 0},
    ...                    {"kind": "k", "greedy_index": None, "pred_index": 1}])["all"]
    {'n': 2, 'n_label': 1, 'share_label': 0.5, 'n_agree': 1, 'agreement': 1.0}
    """
    def stats(rs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        labelled = [r for r in rs if r["greedy_index"] is not None]
        agree = sum(r["greedy_index"] == r["pred_index"] for r in labelled)
        return {"n": len(rs), "n_label": len(labelled),
                "share_label": len(labelled) / len(rs) if rs else float("nan"),
                "n_agree": agree, "agreement": agree / len(labelled) if labelled else float("nan")}

    by_kind: dict[str, list] = defaultdict(list)
    for r in rows:
        by_kind[r["kind"]].append(r)
    return {"all": stats(rows), "by_kind": {k: stats(v) for k, v in sorted(by_kind.items())}}
