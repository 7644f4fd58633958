"""Refuse to resume an output with records of another model or of changed inputs.

Every output a run appends to (``records.jsonl``, ``generations.jsonl``, a
``probe score`` output) has a sidecar ``<output>.input.json`` with the model
fingerprint and one digest per request id (:func:`check_input`). Every task
runs through it, so no task can mix two models' records or stale ones.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

from probe.errors import ProbeError
from probe.io import write_json_atomic
from probe.models.fingerprint import combine_parts, fingerprint_parts, same_source, source_identity
from probe.scoring.cache import ENGINE_VERSION

INPUT_CHECK_FORMAT = 1


def input_sidecar(output: Path) -> Path:
    """``<output>.input.json``: the model and the requests behind the records in ``output``."""
    return output.with_name(output.name + ".input.json")


def request_digest(request: Any) -> str:
    """sha256 (hex) of every field of a request (id, kind, prompt or text, labels or options, group, joining rule)."""
    fields = dataclasses.asdict(request) if dataclasses.is_dataclass(request) else dict(vars(request))
    for key in getattr(request, "DIGEST_EXCLUDE", ()):  # callables (a parser): a name stands for them
        fields.pop(key, None)
    if fields.get("kind") == "generation" and fields.get("temperature") is None:
        # greedy decoding ignores the sampling fields: keep the digest greedy requests had before them
        for key in ("temperature", "top_p", "seed"):
            fields.pop(key, None)
    if fields.get("kind") == "parse" and fields.get("answer_residual") is None:
        fields.pop("answer_residual", None)  # parse requests without the conditional target keep their digest
    if fields.get("kind") == "parse" and fields.get("sampler") is None:
        fields.pop("sampler", None)  # parse requests with temperature / top-p only keep their digest
    if fields.get("kind") == "parse" and fields.get("tail") is None:
        fields.pop("tail", None)  # exact-only parse requests keep their digest
    if not fields.get("forms", True):
        del fields["forms"]  # label requests without surface forms keep the digest they had before the field
    text = json.dumps(fields, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def check_input(output: Path, done: set[str], requests: Sequence[Any], lm: Any, write: bool = True) -> None:
    """Refuse to resume ``output`` with records from another model or another request under the same id.

    The sidecar ``<output>.input.json`` holds the model fingerprint (weights,
    tokenizer, dtype, device type, ... see :func:`probe.models.fingerprint.fingerprint_parts`)
    and one digest per request id. It is written before the first record.
    Resuming needs the same model fingerprint, and every id already recorded
    (``done``) that is also in ``requests`` must have the same request digest.
    New ids may be added (they are appended to the sidecar); batch size and
    token budget are not part of it, as they change numbers only by float noise.
    ``write=False`` checks without writing (the non-zero ranks of a sharded run:
    rank 0 writes). Raises :class:`ProbeError` naming the output, the sidecar
    and what differs.
    """

    sidecar = input_sidecar(output)
    # a Runner carries its model's fingerprint (computed once) and the model as ``.lm``
    parts = getattr(lm, "fingerprint_parts", None) or fingerprint_parts(lm, ENGINE_VERSION)
    model_obj = getattr(lm, "lm", lm)
    model = {"fingerprint": combine_parts(parts), "parts": parts,
             "name": str(getattr(model_obj, "name", None)), "source": str(getattr(model_obj, "source", None))}
    current = {str(r.id): request_digest(r) for r in requests}
    sampling = _sampling(lm, requests)
    start_over = f"Choose a new --output, or delete {output} and {sidecar} to start over."
    if not done:
        if write:
            # "sampling" only when specs apply, so the sidecars of exact runs are unchanged
            write_json_atomic(sidecar, {"format": INPUT_CHECK_FORMAT, "model": model, "requests": current,
                                        **({"sampling": sampling} if sampling else {})})
        return
    old = _read_sidecar(output, sidecar, len(done), start_over)
    if old.get("sampling", []) != sampling:
        raise ProbeError(
            f"{output} was scored with other sampling specs ({old.get('sampling', [])} -> {sampling}, as recorded "
            f"in {sidecar}). Resuming would mix records with and without the same sampling scores. {start_over}"
        )
    if old["model"].get("fingerprint") != model["fingerprint"]:
        was = old["model"].get("parts", {})
        diffs = ", ".join(f"{k}: {_short(was.get(k))} -> {_short(v)}" for k, v in parts.items() if was.get(k) != v)
        raise ProbeError(
            f"{output} was scored by a different model or model setting ({diffs or 'fingerprint'}): it came from "
            f"{old['model'].get('name')} ({old['model'].get('source')}), this run uses {model['name']} "
            f"({model['source']}), as recorded in {sidecar}. Resuming would mix their scores. {start_over}"
        )
    recorded = old["requests"]
    unknown = sorted(i for i in done if i not in recorded)
    changed = sorted(i for i in done if i in current and recorded.get(i) != current[i])
    if unknown or changed:
        what = (f"{len(changed)} already-scored id(s) have a different request in this input "
                f"(prompt, labels/options, kind, group or joining rule), e.g. {', '.join(map(repr, changed[:3]))}"
                if changed else
                f"{len(unknown)} record(s) are not listed in {sidecar.name}, e.g. {', '.join(map(repr, unknown[:3]))}")
        raise ProbeError(f"{output} was produced from a different input than this run: {what} "
                         f"(recorded in {sidecar}). Resuming would mix old and new scores. {start_over}")
    merged = {**{i: recorded[i] for i in done}, **current}
    if write and merged != recorded:
        write_json_atomic(sidecar, {**old, "requests": merged})


def check_model_before_load(output: Path, model: Any, where: Path | None = None) -> None:
    """Refuse, before ``model`` loads, to resume ``output`` when its sidecar names other weights.

    ``model``: a name or path (anything else, a loaded model, is checked by :func:`check_input` only). The
    weights' identity is computed from the model's files (:func:`probe.models.fingerprint.source_identity`:
    a GGUF's or the weight files' sha256, a hub id), so a run into another model's directory stops in a
    second, not after the model has loaded; the full fingerprint (tokenizer, dtype, ...) is still checked
    after loading. ``where``: the directory to name (a run directory) instead of the output file.
    """

    sidecar = input_sidecar(output)
    if not isinstance(model, (str, Path)) or not sidecar.is_file() or not output.is_file():
        return
    try:
        old = json.loads(sidecar.read_text(encoding="utf-8"))["model"]
        recorded = old.get("parts", {}).get("weights")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return  # unreadable: check_input names the problem once the model is loaded
    expected = source_identity(str(model))
    if same_source(recorded, expected):
        return
    place = where or output
    raise ProbeError(
        f"{place} holds records of another model: {old.get('name')} ({old.get('source')}, weights "
        f"{_short(recorded)}), this run asks for {model} (weights {_short(expected)}), as recorded in {sidecar}. "
        f"Resuming would mix their scores; nothing was loaded. Choose a new output, or delete {place} to start over"
    )


def _sampling(lm: Any, requests: Sequence[Any]) -> list[dict]:
    """The sampling specs of a Runner's run, as JSON, when they change its records (label or continuation
    requests); [] otherwise (generations and perplexities carry no sampling scores)."""
    specs = getattr(lm, "active_sampling", None)  # a Runner's current call: run options' + the task's specs
    if specs is None:
        specs = getattr(getattr(lm, "options", None), "sampling", ()) or ()
    if not specs or not any(getattr(r, "kind", None) in ("label", "continuation") for r in requests):
        return []
    return [s.to_dict() for s in specs]


def _read_sidecar(output: Path, sidecar: Path, n_done: int, start_over: str) -> dict:
    if not sidecar.is_file():
        raise ProbeError(
            f"{output} already holds {n_done} record(s) but {sidecar} is missing, so it cannot be checked that they "
            f"came from this input and model. {start_over}"
        )
    try:
        old = json.loads(sidecar.read_text(encoding="utf-8"))
        if (not isinstance(old, dict) or old.get("format") != INPUT_CHECK_FORMAT
                or not isinstance(old.get("model"), dict) or not isinstance(old.get("requests"), dict)):
            raise ValueError(f"not a format-{INPUT_CHECK_FORMAT} input record")
    except (OSError, ValueError) as exc:
        raise ProbeError(f"{sidecar} (the input check of {output}) is unreadable: {exc}. {start_over}") from None
    return old


def _short(value: Any) -> str:
    text = str(value)
    return text[:19] + "..." if len(text) > 22 else text
