"""StereoSet loader (Nadeem et al., 2021): ``stereoset/dev.json``, the public dev split.

Layout (the upstream ``data/dev.json``)::

    {"version": ..., "data": {"intrasentence": [EXAMPLE, ...], "intersentence": [EXAMPLE, ...]}}
    EXAMPLE = {"id", "target", "bias_type", "context",
               "sentences": [{"id", "sentence", "gold_label", "labels": [...]}, x3]}

``gold_label`` is ``stereotype``, ``anti-stereotype`` or ``unrelated``, once each per example.
Intrasentence contexts hold a ``BLANK`` the three sentences fill (each sentence is complete);
intersentence contexts are one sentence and the three candidates follow it. The dev split has
2,106 intrasentence and 2,123 intersentence examples (the HBB paper's SS-intra / SS-inter counts).

>>> import json, tempfile, pathlib
>>> ex = {"id": "e1", "target": "chess player", "bias_type": "profession", "context": "The chess player was BLANK.",
...       "sentences": [{"id": f"s{i}", "sentence": s, "gold_label": g} for i, (s, g) in
...                     enumerate([("The chess player was asian.", "stereotype"), ("The chess player was hispanic.",
...                                "anti-stereotype"), ("The chess player was fox.", "unrelated")])]}
>>> p = pathlib.Path(tempfile.mkdtemp()) / "dev.json"
>>> _ = p.write_text(json.dumps({"version": "1.0", "data": {"intrasentence": [ex], "intersentence": []}}))
>>> e = load_stereoset(p)[0]
>>> e.split, e.sentence("stereotype"), e.id
('intrasentence', 'The chess player was asian.', 'intrasentence:e1')
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from probe.errors import InputError

__all__ = ["GOLD_LABELS", "SPLITS", "DEFAULT_FILE", "StereoSetExample", "load_stereoset"]

DEFAULT_FILE = "dev.json"
SPLITS = ("intrasentence", "intersentence")
GOLD_LABELS = ("stereotype", "anti-stereotype", "unrelated")


@dataclass(frozen=True)
class StereoSetExample:
    """One example: a context and its three sentences, keyed by gold label."""

    id: str  # "{split}:{upstream id}"
    split: str
    target: str
    bias_type: str
    context: str
    sentences: tuple[tuple[str, str, str], ...]  # (gold_label, sentence id, sentence), in the file's order

    def sentence(self, gold: str) -> str:
        return next(s for g, _, s in self.sentences if g == gold)


def _line_of(text: str, needle: str) -> int | None:
    """The 1-based line where ``needle`` first occurs (the file is usually one line)."""
    pos = text.find(needle)
    return text.count("\n", 0, pos) + 1 if pos >= 0 else None


def load_stereoset(path: str | Path | None = None, splits: tuple[str, ...] = SPLITS) -> list[StereoSetExample]:
    """Read ``dev.json`` (default: ``dataset_dir("stereoset") / DEFAULT_FILE``); errors name the example and field."""
    if path is None:
        from probe.data.paths import dataset_dir

        path = dataset_dir("stereoset") / DEFAULT_FILE
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        raw = json.loads(text)
    except OSError as exc:
        raise InputError(path, None, None, f"cannot read ({exc.__class__.__name__}: {exc})") from None
    except json.JSONDecodeError as exc:
        raise InputError(path, exc.lineno, None, f"not valid JSON ({exc.msg})") from None
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        raise InputError(path, None, None, f"cannot read ({exc.__class__.__name__}: {exc})") from None
    data = raw.get("data") if isinstance(raw, dict) else None
    if not isinstance(data, dict):
        raise InputError(path, 1, "data",
                         "missing: expected {'data': {'intrasentence': [...], 'intersentence': [...]}}")
    out: list[StereoSetExample] = []
    for split in splits:
        if split not in SPLITS:
            raise ValueError(f"unknown StereoSet split {split!r}; choose from {', '.join(SPLITS)}")
        rows = data.get(split)
        if not isinstance(rows, list):
            raise InputError(path, 1, f"data.{split}", "missing or not a list")
        for i, ex in enumerate(rows):
            where = f"data.{split}[{i}]"
            if not isinstance(ex, dict):
                raise InputError(path, None, where, "not an object")
            line = _line_of(text, f'"{ex.get("id")}"') if ex.get("id") else None
            for key in ("id", "target", "bias_type", "context"):
                if not isinstance(ex.get(key), str) or not ex[key].strip():
                    raise InputError(path, line, f"{where}.{key}", "missing or empty")
            sents = ex.get("sentences")
            if not isinstance(sents, list):
                raise InputError(path, line, f"{where}.sentences", "missing or not a list")
            triples = []
            for j, s in enumerate(sents):
                if not isinstance(s, dict) or not isinstance(s.get("sentence"), str) or not s["sentence"].strip():
                    raise InputError(path, line, f"{where}.sentences[{j}].sentence", "missing or empty")
                if s.get("gold_label") not in GOLD_LABELS:
                    raise InputError(path, line, f"{where}.sentences[{j}].gold_label",
                                     f"must be one of {GOLD_LABELS}, got {s.get('gold_label')!r}")
                triples.append((s["gold_label"], str(s.get("id", f"{ex['id']}:{j}")), s["sentence"]))
            if sorted(g for g, _, _ in triples) != sorted(GOLD_LABELS):
                raise InputError(path, line, f"{where}.sentences",
                                 f"needs one sentence per gold label {GOLD_LABELS}, got {[g for g, _, _ in triples]}")
            out.append(StereoSetExample(f"{split}:{ex['id']}", split, ex["target"], ex["bias_type"],
                                        ex["context"], tuple(triples)))
    if len({e.id for e in out}) != len(out):
        raise InputError(path, None, "id", "duplicate example ids")
    return out
