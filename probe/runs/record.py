"""The one record schema: what every task, ``probe score`` and ``probe perplexity`` write per request.

A :class:`Record` is a scorer result plus the task, the model and the item
fields the task put in ``Request.meta``. One JSON line per record, with the
common fields first-class and kind-specific numbers (token counts, perplexity,
sampling estimates) beside them; nothing is packed into ids.

>>> from probe.scoring.requests import LabelResult
>>> res = LabelResult("q1", ("A", "B"), (-0.1, -2.5), (0.9, 0.1), 0.99, ((32,), (33,)), 12,
...                   meta={"category": "age"})
>>> rec = Record.from_result("demo", "abc123", res)
>>> rec.pred_index, rec.mass, rec.meta["category"]
(0, 0.99, 'age')
>>> Record.from_dict(rec.to_dict()) == rec
True
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import pandas as pd

from probe.errors import ProbeError
from probe.io import flatten_meta, read_records
from probe.runs.resume import input_sidecar
from probe.scoring.requests import ContinuationResult, LabelResult


if TYPE_CHECKING:  # pandas is imported lazily: `import probe` stays cheap
    import pandas as pd


#: The common fields, in the order they are written.
COMMON_FIELDS = ("task", "id", "model", "kind", "options", "logprobs", "probs", "pred_index", "mass", "finite",
                 "n_prompt_tokens", "meta")


@dataclass(frozen=True)
class Record:
    """One scored request.

    ``options`` are the labels (label requests), the option texts (continuation)
    or empty (perplexity). ``logprobs`` are raw log-probabilities (label token,
    summed continuation log-likelihood, or the text's total log-likelihood for
    perplexity); ``probs`` their softmax over the options; ``mass`` the total
    probability the options carry in the model's full distribution (label
    requests) or the sum of the options' sequence probabilities (continuation;
    None for perplexity). ``pred_index`` is None when the scores are not finite:
    such a record never becomes an answer. ``details`` holds kind-specific
    numbers (``token_counts``, ``ppl``, ``nll``, ``sampling`` ...), written as
    top-level JSON fields.
    """

    task: str
    id: str
    model: str
    kind: str
    options: tuple[str, ...]
    logprobs: tuple[float, ...]
    probs: tuple[float, ...]
    pred_index: int | None
    mass: float | None
    finite: bool
    n_prompt_tokens: int | None
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False)
    details: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def from_result(cls, task: str, model: str, result: Any) -> "Record":
        """The record of one :mod:`probe.scoring` result."""

        meta = dict(getattr(result, "meta", None) or {})
        # sampling-equivalent scores (probe.scoring.sampler.sampling): only present when specs were asked
        # for, so records of exact runs are unchanged
        sampled = [s.to_dict() for s in getattr(result, "sampling", ())]
        extra = {"sampling": sampled} if sampled else {}
        if isinstance(result, LabelResult):
            finite = bool(result.finite)
            return cls(task, result.id, model, "label", tuple(result.labels), tuple(result.logprobs),
                       tuple(result.probs), result.argmax if finite else None,
                       result.label_mass, finite, result.n_prompt_tokens, meta,
                       # label_mass: the `probe score` output field of earlier versions, kept for scripts
                       {"token_ids": [list(t) for t in result.token_ids], "label_mass": result.label_mass, **extra})
        if isinstance(result, ContinuationResult):
            finite = bool(result.finite)
            probs = result.probs("sum")
            mass = math.fsum(math.exp(lp) for lp in result.logprobs) if finite else math.nan
            return cls(task, result.id, model, "continuation", tuple(result.options), tuple(result.logprobs),
                       tuple(probs), _argmax(probs) if finite else None, mass, finite, result.n_prompt_tokens, meta,
                       {"mean_logprobs": list(result.mean_logprobs),
                        "per_byte_logprobs": list(result.per_byte_logprobs),
                        "token_counts": list(result.token_counts), "byte_counts": list(result.byte_counts), **extra})
        finite = bool(result.finite)
        return cls(task, result.id, model, "perplexity", (), (-result.nll,), (), None, None, finite, None, meta,
                   {"ppl": result.ppl, "nll": result.nll, "n_tokens": result.n_tokens})

    def to_dict(self) -> dict:
        """The JSON object of this record (common fields, then ``details`` at the top level)."""
        out = {k: getattr(self, k) for k in COMMON_FIELDS}
        out["options"], out["logprobs"], out["probs"] = list(self.options), list(self.logprobs), list(self.probs)
        out["meta"] = dict(self.meta)
        clash = set(self.details) & set(out)
        if clash:
            raise ValueError(f"record {self.id!r}: details reuse common field names {sorted(clash)}")
        out.update(self.details)
        return out

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> "Record":
        """Inverse of :meth:`to_dict` (JSON ``null`` scores read back as NaN)."""
        details = {k: v for k, v in obj.items() if k not in COMMON_FIELDS}
        return cls(
            task=str(obj.get("task", "")), id=str(obj["id"]), model=str(obj.get("model", "")),
            kind=str(obj.get("kind", "")), options=tuple(obj.get("options") or ()),
            logprobs=tuple(_num(x) for x in obj.get("logprobs") or ()),
            probs=tuple(_num(x) for x in obj.get("probs") or ()),
            pred_index=obj.get("pred_index"), mass=None if obj.get("mass") is None and obj.get("kind") == "perplexity"
            else _num(obj.get("mass")), finite=bool(obj.get("finite", True)),
            n_prompt_tokens=obj.get("n_prompt_tokens"), meta=dict(obj.get("meta") or {}), details=details,
        )

    @property
    def sampling(self) -> list[dict[str, Any]]:
        """The sampling-equivalent scores, one dict per spec (empty when none were asked for).

        Label records: ``{temperature, top_p, probs, mass}``; continuation records:
        ``{temperature, top_p, logprobs}``. JSON has no infinities: a ``null``
        continuation log-probability of a finite record is ``-inf`` (a token
        outside the nucleus); other ``null`` values read back as NaN.
        """
        out = []
        for s in self.details.get("sampling") or ():
            d = dict(s)
            if "probs" in d:
                d["probs"] = [_num(x) for x in d["probs"]]
                d["mass"] = _num(d.get("mass"))
            if "logprobs" in d:
                d["logprobs"] = [(-math.inf if self.finite else math.nan) if x is None else float(x)
                                 for x in d["logprobs"]]
            out.append(d)
        return out

    @property
    def answers(self) -> bool:
        """Whether this record may count as an answer (finite scores and a prediction)."""
        return self.finite and self.pred_index is not None


def _argmax(probs: Sequence[float]) -> int:
    return max(range(len(probs)), key=lambda i: (probs[i], -i))


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def records_to_frame(records: "str | Path | Iterable[Record | Mapping[str, Any]]") -> "pd.DataFrame":
    """Records (a ``records.jsonl`` path, a run directory, or records) as a DataFrame.

    One row per record; ``meta`` is flattened into columns (a meta key that
    clashes with a record field is prefixed ``meta.``). Lists stay lists.
    Records name their model by its short fingerprint (``model``); read from a
    file, the frame also has ``model_name`` beside it: the name the run's input
    check (``records.jsonl.input.json``) or ``summary.json`` gives that fingerprint
    (the record lines themselves are not changed, so existing runs stay byte-identical).

    >>> df = records_to_frame([{"task": "t", "id": "a", "kind": "label", "options": ["A", "B"],
    ...                         "probs": [0.75, 0.25], "pred_index": 0, "meta": {"category": "age"}}])
    >>> df.loc[0, "category"], int(df.loc[0, "pred_index"])
    ('age', 0)
    """

    if records is None:  # Evaluation.output of a run without an output directory
        raise ProbeError("records_to_frame(None): no records to read (a run without an output directory has no "
                         "records file; its Evaluation.records is already this frame)")
    if isinstance(records, (str, Path)):
        path = Path(records)
        if path.is_dir():
            path = path / "records.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"no records at {path}")
        rows_in: Iterable[Any] = read_records(path)[0]
    else:
        rows_in = records

    rows = [flatten_meta(rec.to_dict() if isinstance(rec, Record) else rec) for rec in rows_in]
    frame = pd.DataFrame(rows)
    names = model_names(path) if isinstance(records, (str, Path)) else {}
    if names and "model" in frame and "model_name" not in frame:
        frame.insert(frame.columns.get_loc("model") + 1, "model_name",
                     [names.get(str(m)) for m in frame["model"]])
    return frame


def model_names(path: "str | Path") -> dict[str, str]:
    """``{short fingerprint: model name}`` for a records file, from its input check
    (``<file>.input.json``: every run output has one) and the run's ``summary.json``; {} when neither names it."""

    path = Path(path)
    out: dict[str, str] = {}
    try:
        model = json.loads(input_sidecar(path).read_text(encoding="utf-8")).get("model") or {}
        if model.get("fingerprint") and model.get("name") not in (None, "None"):
            out[str(model["fingerprint"])[:12]] = str(model["name"])
    except (OSError, ValueError, AttributeError):
        pass
    try:
        summary = json.loads((path.parent / "summary.json").read_text(encoding="utf-8"))
        if summary.get("model_fingerprint") and summary.get("model"):
            out.setdefault(str(summary["model_fingerprint"]), str(summary["model"]))
    except (OSError, ValueError, AttributeError):
        pass
    return out
