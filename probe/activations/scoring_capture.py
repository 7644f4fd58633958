"""Record activations in the very forward passes that score the requests.

:func:`score_and_capture` runs :meth:`probe.scoring.Scorer.score` once and, in
the same forward passes, keeps the selected hooks x positions of every
request: ``'{hook}@{position}'`` -> float32 ``[n_requests, d_model]`` keyed by
request id (an :class:`probe.activations.store.Activations`, so it goes
straight into :mod:`probe.analysis.probes` or an
:class:`~probe.activations.store.ActivationWriter`).

How it stays exact
------------------
The scorer normally shares prefixes: a group's common prefix runs once with a
KV cache and each row's *suffix* runs later, so no single pass holds a row's
whole sequence. While capturing, the scorer runs with prefix sharing off
(``share_prefixes=False``): every row's full sequence is in one right-padded
pass with explicit position ids, so a hook output's column ``t`` of a batch row
is that row's token ``t``. This costs what a plain padded batch costs (as
``probe activations`` always did) and the scores are the scorer's own. The
wrapper checks each pass (no KV cache, right padding, positions ``0..n-1``) and
raises rather than record from a pass that breaks this.

Rows are matched to requests by their token ids, not by batch order, so the
scorer's deduplication, sorting and batching need not be known here. Positions
are defined on the request's *prompt* (its tokens are a prefix of each of its
rows, and causal attention makes prompt positions identical across rows):

* ``last``        the last prompt token (for a continuation request the position
                  before the first option token, the same in every option row);
* ``label``       the first token of ``spec.answer_labels[id]`` joined to the prompt
                  as the scorer joins it. Continuation requests: read in that
                  option's row. Label requests: the label's scored token is
                  appended to the row inside the pass; causal attention leaves
                  every earlier position, hence the label log-probs, unchanged;
* ``span:FIELD``  the last token of ``spec.fields[id][FIELD]`` (a substring of
                  the prompt searched from ``spec.search_from[id]``, or
                  ``[start, end]`` character offsets from there);
* ``mean:FIELD``  the float32 mean over that span's tokens.

A request without the field gets NaN rows and is listed under
``missing_positions`` in its record; a field whose text is not in the prompt
raises ``ValueError``. Perplexity requests are not supported.

>>> # doctest: +SKIP
>>> spec = CaptureSpec(hooks=("blocks.3.hook_resid_post",), positions="last,span:cue",
...                    fields={"q1": {"cue": "has wrinkles"}})
>>> results, acts = score_and_capture(Scorer(lm), requests, spec)
>>> acts["blocks.3.hook_resid_post@last"].shape      # (len(requests), d_model)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch

from probe.activations.hooks import ModelLayout, capture, discover
from probe.activations.positions import PositionSpec, locate, parse_positions, span_tokens
from probe.activations.store import Activations
from probe.scoring.requests import ContinuationRequest, LabelRequest, Request, Result
from probe.scoring.tokens import wants_special_tokens


@dataclass(frozen=True)
class CaptureSpec:
    """What to record while scoring.

    ``hooks``: TransformerLens hook names (see :func:`probe.activations.hooks.hook_names`);
    a comma string is split. ``positions``: a string such as ``"last,span:cue"``,
    a list of such names, or :class:`PositionSpec` objects. ``fields``: request id
    -> {field: substring or ``[start, end]``} for span/mean positions.
    ``answer_labels``: request id -> the label or option read by ``label``.
    ``search_from``: request id -> character offset where span search starts
    (e.g. where the user text begins in a chat-rendered prompt; default 0).
    """

    hooks: tuple[str, ...]
    positions: Any = ("last",)
    fields: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)
    answer_labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    search_from: Mapping[str, int] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        hooks = self.hooks.split(",") if isinstance(self.hooks, str) else self.hooks
        hooks = tuple(dict.fromkeys(h.strip() for h in hooks if h.strip()))
        if not hooks:
            raise ValueError("CaptureSpec needs at least one hook name")
        object.__setattr__(self, "hooks", hooks)
        pos = self.positions
        if isinstance(pos, PositionSpec):
            pos = (pos,)
        if isinstance(pos, str) or not all(isinstance(p, PositionSpec) for p in pos):
            pos = parse_positions(pos if isinstance(pos, str) else [p if isinstance(p, str) else p.name for p in pos])
        object.__setattr__(self, "positions", tuple(dict.fromkeys(pos)))

    @property
    def keys(self) -> list[str]:
        """The ``'{hook}@{position}'`` names, hook-major (as ``probe activations`` stores them)."""
        return [f"{h}@{p.name}" for h in self.hooks for p in self.positions]


@dataclass(frozen=True)
class _Target:
    """Where one request is read: the row (token ids) and token indices per position name."""

    row: tuple[int, ...]
    positions: dict[str, list[int]] = field(hash=False)
    append: int | None = None  # token appended to the row in the pass (label position of a label request)

    @property
    def missing(self) -> list[str]:
        return [name for name, toks in self.positions.items() if not toks]


def resolve(scorer: Any, request: Request, spec: CaptureSpec) -> _Target:
    """Tokenize ``request`` as the scorer does and find its positions (``ValueError`` on bad input)."""
    if not isinstance(request, (LabelRequest, ContinuationRequest)):
        raise ValueError(f"request {request.id!r}: activations are captured for label and continuation "
                         f"requests only, not {type(request).__name__}")
    enc = scorer.encode(request)
    n = enc.n_prompt_tokens
    row = enc.sequences[0].ids
    prompt_ids = row[:n]
    append = None
    positions: dict[str, list[int]] = {}
    offsets = None
    for p in spec.positions:
        if p.kind == "last":
            positions[p.name] = [n - 1]
        elif p.kind == "label":
            answer = spec.answer_labels.get(request.id)
            if answer is None:
                raise ValueError(f"request {request.id!r}: field 'answer_label' is needed for the 'label' position")
            choices = request.labels if isinstance(request, LabelRequest) else request.options
            if answer not in choices:
                raise ValueError(f"request {request.id!r}: field 'answer_label' {answer!r} "
                                 f"is not one of {list(choices)}")
            k = choices.index(answer)
            if isinstance(request, LabelRequest):
                append = enc.label_variants[k][0]  # the label's first scored token
            else:
                row = enc.sequences[k].ids  # that option's row: its token n is the option's first token
            positions[p.name] = [n]
        else:
            value = spec.fields.get(request.id, {}).get(p.field)
            if value in (None, ""):
                positions[p.name] = []
                continue
            if offsets is None:
                text, offsets = _prompt_offsets(scorer, request, prompt_ids)
            where = locate(text, value, int(spec.search_from.get(request.id, 0)))
            toks = span_tokens(offsets, *where) if where else []
            if not toks:
                raise ValueError(f"request {request.id!r}: field {p.field!r}: {value!r} is not in the prompt")
            positions[p.name] = toks[-1:] if p.kind == "span" else toks
    return _Target(tuple(row), positions, append)


def _prompt_offsets(scorer: Any, r: Request, prompt_ids: tuple[int, ...]) -> tuple[str, list[tuple[int, int]]]:
    tok = scorer.encoder.tokenizer
    special = wants_special_tokens(tok, r.prompt) if r.add_special_tokens is None else r.add_special_tokens
    text = r.prompt.rstrip(" ") or r.prompt  # the scorer moves trailing spaces to the label
    enc = tok(text, add_special_tokens=special, return_offsets_mapping=True)
    if tuple(enc["input_ids"]) != tuple(prompt_ids):
        raise ValueError(f"request {r.id!r}: prompt tokenizes differently with offsets; cannot map spans")
    return text, [tuple(o) for o in enc["offset_mapping"]]


class _Recorder:
    """Wraps the engine's decoder call: finds the requests each batch row serves, records them."""

    def __init__(self, targets: list[_Target], spec: CaptureSpec, d_model: int, pad_id: int) -> None:
        self.targets = targets
        self.pad_id = pad_id
        self.names = [p.name for p in spec.positions]
        self.by_row: dict[tuple[int, ...], list[int]] = {}
        self.append: dict[tuple[int, ...], int] = {}
        for i, t in enumerate(targets):
            self.by_row.setdefault(t.row, []).append(i)
            if t.append is not None:
                if self.append.get(t.row, t.append) != t.append:
                    raise ValueError("two label requests with the same prompt tokens ask for different "
                                     "'label' positions; capture them in separate calls")
                self.append[t.row] = t.append
        self.arrays = {k: np.full((len(targets), d_model), np.nan, np.float32) for k in spec.keys}
        self.done = np.zeros(len(targets), dtype=bool)
        self.cap: Any = None

    def wrap(self, decoder_call):
        def _decoder(**kwargs: Any) -> Any:
            if kwargs.get("past_key_values") is not None:
                raise RuntimeError("activation capture needs full-sequence passes, but the scorer passed a KV "
                                   "cache (prefix sharing must be off while capturing)")
            kwargs, pairs = self._prepare(kwargs)
            if not pairs:
                return decoder_call(**kwargs)
            self.cap.positions_fn = self._gather_fn(pairs)
            try:
                out = decoder_call(**kwargs)
                got = self.cap.pop()
            finally:
                self.cap.positions_fn = _nothing
            idx = [t for _, t in pairs]
            for key, arr in got.items():
                self.arrays[key][idx] = arr
            self.done[idx] = True
            return out

        return _decoder

    def _prepare(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[int, int]]]:
        ids, mask, pos = kwargs["input_ids"], kwargs.get("attention_mask"), kwargs.get("position_ids")
        # Without a mask every column is real; without position ids (and no cache) HF counts from 0.
        mask = torch.ones_like(ids) if mask is None else mask
        pos = torch.arange(ids.shape[1], device=ids.device).expand_as(ids) if pos is None else pos
        ids_c, mask_c, pos_c = ids.cpu(), mask.cpu(), pos.cpu()
        lengths = mask_c.sum(dim=1).tolist()
        pairs: list[tuple[int, int]] = []
        appends: list[tuple[int, int, int]] = []
        for b, n in enumerate(lengths):
            if not (bool(mask_c[b, :n].all()) and torch.equal(pos_c[b, :n], torch.arange(n, dtype=pos_c.dtype))):
                raise RuntimeError("activation capture needs right-padded rows with positions 0..n-1 in each pass")
            row = tuple(ids_c[b, :n].tolist())
            for t in self.by_row.get(row, ()):
                if not self.done[t]:
                    pairs.append((b, t))
            if row in self.append:
                appends.append((b, n, self.append[row]))
        if appends:
            # The appended token comes after every prompt position, so (causal attention) no
            # position the scorer reads changes; a full row needs one more padded column.
            width = ids.shape[1] + (1 if any(n == ids.shape[1] for _, n, _ in appends) else 0)
            new_ids = torch.full((ids.shape[0], width), self.pad_id, dtype=ids.dtype)
            new_mask = torch.zeros((ids.shape[0], width), dtype=mask.dtype)
            new_ids[:, : ids.shape[1]] = ids_c
            new_mask[:, : ids.shape[1]] = mask_c
            for b, n, tok in appends:
                new_ids[b, n] = tok
                new_mask[b, n] = 1
            new_pos = torch.arange(width, dtype=pos.dtype).expand(ids.shape[0], width).clone()
            kwargs = {**kwargs, "input_ids": new_ids.to(ids.device), "attention_mask": new_mask.to(mask.device),
                      "position_ids": new_pos.to(pos.device)}
        return kwargs, pairs

    def _gather_fn(self, pairs: list[tuple[int, int]]):
        """Gather function for one pass: row ``k`` of each output is request ``pairs[k][1]``."""
        plans = {}
        for name in self.names:
            # a missing span reads the last prompt token here and is set to NaN afterwards
            idx = [self.targets[t].positions[name] or self.targets[t].positions.get("last", [0])[:1] or [0]
                   for _, t in pairs]
            rows = torch.tensor([b for (b, _), ix in zip(pairs, idx) for _ in ix], dtype=torch.long)
            cols = torch.tensor([c for ix in idx for c in ix], dtype=torch.long)
            seg = torch.tensor([k for k, ix in enumerate(idx) for _ in ix], dtype=torch.long)
            counts = torch.tensor([len(ix) for ix in idx], dtype=torch.float32)
            plans[name] = (rows, cols, seg, counts, all(len(ix) == 1 for ix in idx))

        def fn(h: torch.Tensor) -> dict[str, torch.Tensor]:
            out = {}
            for name, (rows, cols, seg, counts, single) in plans.items():
                picked = h[rows.to(h.device), cols.to(h.device)]
                if single:
                    out[name] = picked
                else:  # mean in float32 whatever the model dtype
                    acc = torch.zeros(len(pairs), h.shape[-1], dtype=torch.float32, device=h.device)
                    acc.index_add_(0, seg.to(h.device), picked.float())
                    out[name] = acc / counts.to(h.device)[:, None]
            return out

        return fn


def _nothing(_h: torch.Tensor) -> dict[str, torch.Tensor]:
    return {}


def score_and_capture(scorer: Any, requests: Sequence[Request], spec: CaptureSpec, progress: bool = False,
                      layout: ModelLayout | None = None) -> tuple[list[Result], Activations]:
    """Score ``requests`` with ``scorer`` and record ``spec``'s activations in the same passes.

    Returns the results (as ``scorer.score(requests)`` returns them) and an
    :class:`Activations` whose ``ids`` are the request ids in request order,
    ``arrays[key]`` float32 ``[len(requests), d_model]``, ``records`` one dict
    per request (``id``, ``missing_positions`` when a span field was absent).
    ``scorer`` itself is not modified: a shallow copy runs with prefix sharing
    off and a wrapped decoder call. Request ids must be unique. The hooks sit on
    the shared model for the duration: do not run that model from another
    thread meanwhile.
    """
    ids = [r.id for r in requests]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"request ids must be unique to key activations; {dup!r} repeats")
    layout = layout or discover(scorer.lm.model)
    targets = [resolve(scorer, r, spec) for r in requests]
    engine = getattr(scorer, "engine", None)
    if engine is None or not callable(getattr(engine, "_decoder", None)):
        raise RuntimeError("this scorer has no engine._decoder to capture from")
    rec = _Recorder(targets, spec, layout.d_model, int(getattr(engine, "pad_id", 0)))
    run = copy.copy(scorer)
    run.share_prefixes = False
    run.engine = copy.copy(engine)
    run.engine._decoder = rec.wrap(engine._decoder)  # the original call still counts the forward passes
    with capture(scorer.lm.model, spec.hooks, _nothing, layout) as cap:
        rec.cap = cap
        results = run.score(requests, progress=progress)
    engine.tokens_run = run.engine.tokens_run  # the copy started from the same count
    if requests and not rec.done.all():
        lost = [ids[i] for i in np.flatnonzero(~rec.done)[:3]]
        raise RuntimeError(f"no forward pass held the rows of requests {lost}; cannot record their activations")
    records = []
    for r, t in zip(requests, targets):
        record: dict[str, Any] = {"id": r.id}
        if t.missing:
            record["missing_positions"] = t.missing
        records.append(record)
    for i, t in enumerate(targets):  # absent spans are NaN, never a silent stand-in
        for name in t.missing:
            for h in spec.hooks:
                rec.arrays[f"{h}@{name}"][i] = np.nan
    manifest = {"hooks": list(spec.hooks), "positions": [p.name for p in spec.positions], "keys": spec.keys,
                "d_model": layout.d_model}
    return results, Activations(list(ids), rec.arrays, records, manifest)


def iter_score_and_capture(scorer: Any, requests: Iterable[Request], spec: CaptureSpec, chunk_size: int = 256,
                           progress: bool = False) -> Iterator[tuple[list[Result], Activations]]:
    """:func:`score_and_capture` over chunks of ``chunk_size`` requests (bounded memory);
    yields each chunk's results and activations, e.g. into an ``ActivationWriter``::

        for results, acts in iter_score_and_capture(scorer, reqs, spec):
            writer.add(acts.records, acts.arrays)
    """
    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    layout = discover(scorer.lm.model)
    chunk: list[Request] = []
    for r in requests:
        chunk.append(r)
        if len(chunk) >= chunk_size:
            yield score_and_capture(scorer, chunk, spec, progress, layout)
            chunk = []
    if chunk:
        yield score_and_capture(scorer, chunk, spec, progress, layout)

