"""Activations read in the scorer's own forward passes, with prefix sharing on.

What to record (hook names, positions, spans) is defined above this layer
(:class:`probe.activations.CaptureSpec`); this module is the mechanism the
:class:`~probe.scoring.Scorer` runs it with. A *capturer* gives, per encoded
request, a :class:`CaptureTarget` (a row of token ids and the token indices to
read per position name) and attaches forward hooks that hand each hook's
output ``[batch, width, d_model]`` to :meth:`Taps.record`.

Why sharing changes nothing: under causal attention with explicit position
ids, the activation at token ``t`` of a row depends only on ``ids[:t+1]``. So a
value is keyed on that prefix, read once in whichever pass computes token
``t`` (a shared segment's pass when ``t`` lies in a segment shared by many
rows, the row's own leaf pass otherwise) and given to every request whose row
has that prefix. Before running, each tree node is told which of its token
indices some row below it needs (:meth:`Taps.plan`); each pass then gathers
only those columns.

A capturer may also *write*: its ``edits`` (``{'{hook}@{position}': vector}``)
replace the hook's output at each request's position in the pass that computes
it (activation patching), keyed on the same prefix, so a shared segment is
patched once for every row that runs through it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Protocol

import numpy as np
import torch

from probe.scoring.engine.batching import Node
from probe.scoring.engine import Row


@dataclass(frozen=True)
class CaptureTarget:
    """Where one request is read: ``row`` (token ids whose prefixes hold the positions) and
    ``positions[name]`` (absolute token indices into ``row``; several: their float32 mean; none:
    the request lacks that span and gets NaN). ``extra``: ``row`` is not scored and runs only for
    capture (a label request's ``label`` position: the label token appended to the prompt)."""

    row: tuple[int, ...]
    positions: dict[str, list[int]] = field(hash=False)
    extra: bool = False

    @property
    def missing(self) -> list[str]:
        return [name for name, toks in self.positions.items() if not toks]


class Capturer(Protocol):
    """What :meth:`Scorer.score` needs from ``capture=`` (see :class:`probe.activations.CaptureSpec`)."""

    hooks: tuple[str, ...]

    def target(self, scorer: Any, encoded: Any) -> CaptureTarget:
        """The row and token indices of one encoded request (``ValueError`` on bad input)."""
        ...

    def attach(self, model: Any, record: Callable[[str, torch.Tensor], torch.Tensor | None]) -> ContextManager[Any]:
        """Forward hooks calling ``record(hook_name, output)`` while the block runs; a tensor it returns
        replaces that output (the capturer's ``edits``)."""
        ...


class Taps:
    """Per call: which node reads which token, the values read, and each request's vectors."""

    def __init__(self, capturer: Capturer, targets: list[CaptureTarget]) -> None:
        self.capturer = capturer
        self.targets = targets
        self.hooks = tuple(capturer.hooks)
        self.need: dict[int, list[int]] = {}  # id(node) -> token indices read in its pass
        self.values: dict[tuple[str, tuple[int, ...]], np.ndarray] = {}
        self._plan: tuple[torch.Tensor, torch.Tensor, list[tuple[int, ...]]] | None = None
        #: (hook, prefix) -> the vector written there (the capturer's ``edits``; patching)
        self.writes: dict[tuple[str, tuple[int, ...]], np.ndarray] = {}
        for key, vec in (getattr(capturer, "edits", None) or {}).items():
            hook, _, pos = key.partition("@")
            for t in targets:
                for tok in t.positions.get(pos, ()):
                    self.writes[(hook, t.row[: tok + 1])] = np.asarray(vec, dtype=np.float32)

    def extra_rows(self) -> list[Row]:
        """Capture-only rows: nothing is scored in them (``score_from`` past the end)."""
        return [Row(t.row, len(t.row)) for t in self.targets if t.extra]

    def plan(self, tree: list[Node], row_of: Callable[[CaptureTarget], tuple]) -> None:
        """Assign every needed token index to the tree node whose pass computes it."""
        by_row: dict[tuple, set[int]] = {}
        for t in self.targets:
            s = by_row.setdefault(row_of(t), set())
            for toks in t.positions.values():
                s.update(toks)

        def walk(node: Node) -> set[int]:
            if node.is_leaf:
                wanted = set(by_row.get((node.row.ids, node.row.score_from), ()))
            else:
                wanted = set().union(*(walk(c) for c in node.children))
            mine = {t for t in wanted if t >= node.start}
            if mine:
                self.need[id(node)] = sorted(mine)
            return wanted - mine

        left = set().union(*(walk(n) for n in tree)) if tree else set()
        if left:  # pragma: no cover - a planning bug, never silently dropped
            raise RuntimeError(f"capture positions {sorted(left)[:5]} fall in no pass")

    def pass_of(self, nodes: list[Node], column: Callable[[int, int], int]):
        """While one forward pass over ``nodes`` runs: gather their needed tokens
        (``column(batch_row, token_index)`` is the token's column in that pass)."""
        return self._gathering([(b, column(b, t), n.ids[: t + 1])
                                for b, n in enumerate(nodes) for t in self.need.get(id(n), ())])

    def pass_at(self, places: list[tuple[Node, int, int]]):
        """While one packed pass runs: gather the needed tokens of each ``(node, row, column of the
        node's first token)`` (probe.scoring.engine.packed)."""
        return self._gathering([(r, c + t - n.start, n.ids[: t + 1])
                                for n, r, c in places for t in self.need.get(id(n), ())])

    @contextlib.contextmanager
    def _gathering(self, reads: list[tuple[int, int, tuple[int, ...]]]):
        """Plan the ``(row, column, key)`` reads of the pass that runs inside this block."""
        self._plan = None
        if reads:
            rows, cols, keys = zip(*reads)
            self._plan = (torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long), list(keys))
        try:
            yield
        finally:
            self._plan = None

    def record(self, hook: str, h: torch.Tensor) -> torch.Tensor | None:
        """Hook callback: keep the planned ``[batch, width, d_model]`` positions, float32 on the CPU (the
        values before any edit). Returns ``h`` with the capturer's edits written in, or None (unchanged)."""
        if self._plan is None:
            return None
        rows, cols, keys = self._plan
        picked = h.detach()[rows.to(h.device), cols.to(h.device)].to("cpu", torch.float32).numpy()
        for k, v in zip(keys, picked):
            self.values[(hook, k)] = v
        hits = [i for i, k in enumerate(keys) if (hook, k) in self.writes] if self.writes else []
        if not hits:
            return None
        h = h.clone()
        for i in hits:
            h[int(rows[i]), int(cols[i])] = torch.from_numpy(self.writes[(hook, keys[i])]).to(h.device, h.dtype)
        return h

    def vectors(self, i: int, d_model: int) -> dict[str, np.ndarray]:
        """``{'{hook}@{position}': float32 [d_model]}`` of request ``i`` (NaN where its span is missing)."""
        t = self.targets[i]
        out: dict[str, np.ndarray] = {}
        for hook in self.hooks:
            for name, toks in t.positions.items():
                if not toks:
                    out[f"{hook}@{name}"] = np.full(d_model, np.nan, np.float32)
                    continue
                vals = [self.values[(hook, t.row[: k + 1])] for k in toks]
                # a mean over a span in float32, whatever the model dtype
                out[f"{hook}@{name}"] = vals[0].copy() if len(vals) == 1 else np.mean(vals, axis=0, dtype=np.float32)
        return out
