"""What to record while scoring (:class:`CaptureSpec`), and helpers around ``Scorer.score(capture=...)``.

The scorer records activations in the very forward passes that compute the
scores, with prefix sharing on (:mod:`probe.scoring.capture`): a position
inside a shared segment is read in the pass that computed that segment and
given to every request whose row runs through it. Positions are defined on the
request's *prompt* and resolved by :func:`probe.activations.positions.resolve`:

* ``last``        the last prompt token (for a continuation request the position
                  before the first option token, the same in every option row);
* ``label``       the first token of the request's answer label (``answer_labels[id]``,
                  else ``meta['answer_label']``). Continuation requests: read in that
                  option's row. Label requests: a capture-only row, the prompt plus
                  the label's scored token, shares the prompt with the scored row;
* ``span:FIELD``  the last token of the request's ``FIELD`` (``fields[id][FIELD]``,
                  else ``meta[FIELD]``): a substring of the prompt searched from
                  ``search_from[id]`` (default 0), or ``[start, end]`` character offsets;
* ``mean:FIELD``  the float32 mean over that span's tokens.

A request without the field gets NaN rows and is listed under
``missing_positions`` in its record; a field whose text is not in the prompt
raises ``ValueError``. Perplexity requests are not supported.

>>> spec = CaptureSpec.parse(["blocks.3.hook_resid_post@last", "blocks.3.hook_resid_post@span:cue"])
>>> spec.hooks, [p.name for p in spec.positions], spec.keys
(('blocks.3.hook_resid_post',), ['last', 'span:cue'], ['blocks.3.hook_resid_post@last', 'blocks.3.hook_resid_post@span:cue'])
>>> results = Scorer(lm).score(requests, capture=spec)                      # doctest: +SKIP
>>> results[0].activations["blocks.3.hook_resid_post@last"].shape         # doctest: +SKIP
(d_model,)
"""

from __future__ import annotations

import contextlib
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch

from probe.activations.hooks import ModelLayout, discover, wire
from probe.activations.positions import PositionSpec, parse_positions, resolve
from probe.activations.store import Activations
from probe.models.tl_adapter import bridge_of, hook_points
from probe.scoring.capture import CaptureTarget
from probe.scoring.requests import LabelResult, Request, Result


@dataclass(frozen=True)
class CaptureSpec:
    """What to record while scoring.

    ``hooks``: TransformerLens hook names (see :func:`probe.activations.hooks.hook_names`);
    a comma string is split. ``positions``: a string such as ``"last,span:cue"``,
    a list of such names, or :class:`PositionSpec` objects. ``fields``: request id
    -> {field: substring or ``[start, end]``} for span/mean positions (default: the
    request's ``meta``). ``answer_labels``: request id -> the label or option read by
    ``label`` (default: ``meta['answer_label']``). ``search_from``: request id ->
    character offset where span search starts (e.g. where the user text begins in a
    chat-rendered prompt; default 0). ``select``: keep only these ``hook@position``
    keys (:meth:`parse` sets it; default every hook x position). ``edits``:
    ``{'{hook}@{position}': float32 [d_model]}`` written into the forward pass at
    that hook and each request's position (activation patching,
    :mod:`probe.analysis.patching`); the recorded values are those before the edit.
    """

    hooks: tuple[str, ...]
    positions: Any = ("last",)
    fields: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)
    answer_labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    search_from: Mapping[str, int] = field(default_factory=dict, hash=False)
    select: tuple[str, ...] = ()
    edits: Mapping[str, Any] = field(default_factory=dict, hash=False)

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
        object.__setattr__(self, "select", tuple(dict.fromkeys(self.select)))
        names = {p.name for p in self.positions}
        for key in self.edits:
            hook, _, pos = key.partition("@")
            if hook not in hooks or pos not in names:
                raise ValueError(f"edit {key!r} names no captured HOOK@POSITION (hooks {list(hooks)}, "
                                 f"positions {sorted(names)})")

    @classmethod
    def parse(cls, keys: str | Iterable[str], n_layers: int | None = None, **kwargs: Any) -> "CaptureSpec":
        """From ``HOOK@POSITION`` strings (``--capture``), e.g. ``blocks.5.hook_resid_post@last``; a layer
        selection (``blocks.*.`` every layer, ``blocks.0,5,-1.``) and a comma list of positions expand
        (:func:`expand_keys`; a selection needs ``n_layers``)."""
        items = expand_keys(keys, n_layers)
        hooks, positions, select = [], [], []
        for k in items:
            hook, _, pos = k.partition("@")
            spec = parse_positions(pos)
            hooks.append(hook)
            positions.append(spec[0])
            select.append(f"{hook}@{spec[0].name}")
        return cls(tuple(hooks), tuple(positions), select=tuple(select), **kwargs)

    @property
    def keys(self) -> list[str]:
        """The ``'{hook}@{position}'`` names kept, hook-major (as ``probe activations`` stores them)."""
        every = [f"{h}@{p.name}" for h in self.hooks for p in self.positions]
        return [k for k in every if k in self.select] if self.select else every

    def check(self, model: torch.nn.Module, layout: ModelLayout | None = None) -> int:
        """Raise ``KeyError`` for a hook the model does not have; returns its ``d_model``."""
        points = hook_points(model)
        if points is not None:  # TransformerLens backend: its own hook names (probe.models.tl_adapter)
            missing = [h for h in self.hooks if h not in points]
            if missing:
                raise KeyError(f"TransformerBridge has no hook {missing[0]!r} (e.g. {', '.join(list(points)[:4])})")
            return int(bridge_of(model).cfg.d_model)
        layout = layout or discover(model)
        for h in self.hooks:
            layout.module_for(h)
        return layout.d_model

    # -- the scorer's Capturer protocol (probe.scoring.capture) --------------------------------
    def target(self, scorer: Any, encoded: Any) -> CaptureTarget:
        """Where ``encoded`` (a request as ``scorer`` encodes it) is read."""
        r = encoded.request
        answer = self.answer_labels.get(r.id) if self.answer_labels else None
        if answer is None and any(p.kind == "label" for p in self.positions):
            answer = (r.meta or {}).get("answer_label")
        return resolve(scorer.encoder, encoded, self.positions, fields=self.fields.get(r.id) if self.fields else None,
                       answer_label=answer, search_from=int(self.search_from.get(r.id, 0)) if self.search_from else 0)

    @contextlib.contextmanager
    def attach(self, model: torch.nn.Module, record: Callable[[str, torch.Tensor], torch.Tensor | None]
               ) -> Iterator[None]:
        """Taps on the one hook wiring (:func:`probe.activations.hooks.wire`) calling ``record(hook_name,
        output)``; a tensor it returns replaces the output (``edits``). Removed on exit. On a
        TransformerLens-bridged model (``--backend tl``) they go on the bridge's own ``HookPoint`` s."""
        tap = record
        if hook_points(model) is not None:
            d_model = self.check(model)

            def tap(name: str, out: torch.Tensor) -> torch.Tensor | None:
                # positions index dim 1 and vectors are d_model wide; hook_z, hook_pattern, mlp.hook_pre... are not
                if out.ndim != 3 or out.shape[-1] != d_model:
                    raise ValueError(f"capture reads [batch, pos, d_model] hooks; {name!r} gives {tuple(out.shape)}")
                return record(name, out)

        with wire(model, self.hooks, tap):
            yield


def expand_keys(keys: str | Iterable[str], n_layers: int | None = None) -> list[str]:
    """The one syntax that chooses activations (``probe run --capture``, ``probe activations --capture``,
    the ``probe analyze`` analyses): ``HOOK@POSITION[,POSITION...]``, where a hook ``blocks.L.hook_KIND`` may
    select layers with ``L`` = ``*`` (every layer) or a comma list (negative counts from the end). Returns
    one ``hook@position`` per layer and position, in that order.

    >>> expand_keys(["blocks.*.hook_resid_post@last,mean:cue", "blocks.-1.hook_mlp_out@last"], n_layers=2)
    ['blocks.0.hook_resid_post@last', 'blocks.0.hook_resid_post@mean:cue', 'blocks.1.hook_resid_post@last', 'blocks.1.hook_resid_post@mean:cue', 'blocks.1.hook_mlp_out@last']
    """

    items = [k.strip() for k in (keys.split() if isinstance(keys, str) else keys) if k.strip()]
    if not items:
        raise ValueError("no HOOK@POSITION given")
    out: list[str] = []
    for k in items:
        hook, sep, pos = k.partition("@")
        if not sep or not hook or not pos:
            raise ValueError(f"{k!r}: expected HOOK@POSITION, e.g. blocks.5.hook_resid_post@last")
        names = [p.name for p in parse_positions(pos)]
        m = re.fullmatch(r"blocks\.([^.]+)\.(.+)", hook)
        hooks = [hook]
        if m and not m.group(1).isdigit():
            if n_layers is None:
                raise ValueError(f"{k!r}: a layer selection needs the model (its number of layers)")
            sel = m.group(1)
            try:
                idx = list(range(n_layers)) if sel == "*" else [int(x) for x in sel.split(",") if x.strip()]
            except ValueError:
                raise ValueError(f"{k!r}: layers are *, N or a comma list such as 0,5,-1") from None
            for i in idx:
                if not -n_layers <= i < n_layers:
                    raise ValueError(f"{k!r}: layer {i} is out of range for a model with {n_layers} layers")
            hooks = [f"blocks.{i % n_layers}.{m.group(2)}" for i in idx]
        out += [f"{h}@{p}" for h in hooks for p in names]
    return list(dict.fromkeys(out))


def layer_count(model: torch.nn.Module) -> int:
    """The number of decoder blocks (the bridge's when the model is TransformerLens-wrapped)."""
    bridge = bridge_of(model)
    if bridge is not None:
        return int(bridge.cfg.n_layers)
    return discover(model).n_layers


def capture_record(result: Result, missing: Sequence[str] = ()) -> dict[str, Any]:
    """The metadata row of one captured request (``probe activations``' table): id, labels and their
    log-probs / probabilities / mass / argmax as the scorer computed them, the request's meta."""

    # a perplexity result has no prompt: its token count is the scored text's
    n = getattr(result, "n_prompt_tokens", None)
    rec: dict[str, Any] = {"id": result.id, "n_tokens": n if n is not None else getattr(result, "n_tokens", None)}
    if isinstance(result, LabelResult):
        finite = bool(result.finite)
        rec.update(labels=list(result.labels), label_logprobs=list(result.logprobs), label_probs=list(result.probs),
                   label_mass=result.label_mass, pred_index=result.argmax if finite else None)
    if missing:
        rec["missing_positions"] = list(missing)
    rec["meta"] = dict(result.meta or {})
    return rec


def missing_positions(result: Result, spec: CaptureSpec) -> list[str]:
    """Position names whose span the request lacked (their rows are NaN)."""
    out = []
    for p in spec.positions:
        keys = [k for k in (f"{h}@{p.name}" for h in spec.hooks) if k in result.activations]
        if keys and np.isnan(result.activations[keys[0]]).all():
            out.append(p.name)
    return out


def store_results(writer: Any, spec: CaptureSpec, results: Sequence[Result]) -> None:
    """Write the activations of ``results`` not stored yet (by id) as one shard of ``writer`` now: a run
    calls it per chunk, before the chunk's records, so a record on disk always has its activations."""
    new = [r for r in results if r.id not in writer.done]
    if new:
        writer.add([capture_record(r, missing_positions(r, spec)) for r in new],
                   {k: np.stack([r.activations[k] for r in new]) for k in spec.keys})
        writer.flush()


_DEPRECATED = ("{name}() is deprecated and will be removed: it scores past the Runner (no score cache, resume or "
               "--shard). Use Runner(lm, RunOptions(...)).score(requests, capture=spec): the records come back "
               "and runner.activations holds the vectors (or pass output= for a resumable store)")


def score_and_capture(scorer: Any, requests: Sequence[Request], spec: CaptureSpec, progress: bool = False,
                      ) -> tuple[list[Result], Activations]:
    """Deprecated: ``Runner(lm).score(requests, capture=spec)`` (:class:`probe.runs.runner.Runner`) records
    the same vectors on the run's road. ``scorer.score(requests, capture=spec)`` with the vectors gathered as
    an :class:`Activations`: ``ids`` the request ids in request order, ``arrays[key]`` float32
    ``[len(requests), d_model]``, ``records`` one dict per request (``id``, ``missing_positions`` when a span
    field was absent)."""
    warnings.warn(_DEPRECATED.format(name="score_and_capture"), DeprecationWarning, stacklevel=2)
    return _score_and_capture(scorer, requests, spec, progress)


def _score_and_capture(scorer: Any, requests: Sequence[Request], spec: CaptureSpec, progress: bool = False,
                       ) -> tuple[list[Result], Activations]:
    results = scorer.score(requests, progress=progress, capture=spec)
    d_model = spec.check(scorer.lm.model)
    # per key: one [d_model] vector per request -> [n_requests, d_model]
    arrays = {k: np.stack([r.activations[k] for r in results]) if results else np.empty((0, d_model), np.float32)
              for k in spec.keys}
    records = []
    for r in results:
        rec: dict[str, Any] = {"id": r.id}
        miss = missing_positions(r, spec)
        if miss:
            rec["missing_positions"] = miss
        records.append(rec)
    manifest = {"hooks": list(spec.hooks), "positions": [p.name for p in spec.positions], "keys": spec.keys,
                "d_model": d_model}
    return results, Activations([r.id for r in requests], arrays, records, manifest)


def iter_score_and_capture(scorer: Any, requests: Iterable[Request], spec: CaptureSpec, chunk_size: int = 256,
                           progress: bool = False) -> Iterator[tuple[list[Result], Activations]]:
    """Deprecated (as :func:`score_and_capture`; a Runner chunks by itself: ``RunOptions(chunk_size=...)``).
    :func:`score_and_capture` over chunks of ``chunk_size`` requests (bounded memory)."""
    warnings.warn(_DEPRECATED.format(name="iter_score_and_capture"), DeprecationWarning, stacklevel=2)
    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    chunk: list[Request] = []
    for r in requests:
        chunk.append(r)
        if len(chunk) >= chunk_size:
            yield _score_and_capture(scorer, chunk, spec, progress)
            chunk = []
    if chunk:
        yield _score_and_capture(scorer, chunk, spec, progress)
