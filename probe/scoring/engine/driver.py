"""The driver: a prefix tree in, every row's numbers out, through the engine's passes.

It owns what lies between one scoring call and the engine's forward passes: the choice of path (packed
passes over whole trees, or the level-by-level path with KV caches for models the packed pass cannot run
exactly), staging the inputs on the device, the out-of-memory back-off (caps halved, the failed work redone,
grown back after a run of good passes), the capture taps of a call and the engine's counters.
:class:`probe.scoring.Scorer` turns requests into the tree and the numbers back into results; it runs no
pass itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from typing import Any, Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from probe.scoring.engine.batching import Node, build_tree, plan_passes
from probe.errors import ProbeError
from probe.scoring.engine.capabilities import KERNEL_SAFE_TOKENS, LONG_SDPA_BACKENDS
from probe.scoring.engine.forward import HEAD_CHUNK, Engine, RowOutput, sdpa_preference
from probe.scoring.engine.packed import Pass, arrays, layout, pack, row_tokens
from probe.scoring.engine.read_plan import ReadPlan, read_plan, upload
from probe.scoring.engine.rows import Row
from probe.scoring.sampler.sampling import block_rows

RowKey = tuple[tuple[int, ...], int]
_LEVEL = object()  # a packed pass's answer: run its one tree level by level
GROW_AFTER = 8  # good passes after which caps lowered by an out-of-memory error double


class Driver:
    """Runs prefix trees (:mod:`probe.scoring.engine.batching`) through one :class:`Engine`.

    ``batch_size`` and ``token_budget`` are the most rows and padded tokens per pass (the plan); after an
    out-of-memory error :attr:`row_cap` and :attr:`budget_cap` hold the lowered caps in force.
    """

    def __init__(self, engine: Engine, batch_size: int, token_budget: int) -> None:
        self.engine = engine
        self.batch_size = batch_size
        self.token_budget = token_budget
        self.row_cap = batch_size  # lowered after an out-of-memory error (grows back, see _grow)
        self.budget_cap = token_budget  # likewise
        self._good_passes = 0  # passes run since the last out-of-memory error
        #: run whole prefix trees in packed passes (probe.scoring.engine.packed); off: the level-by-level
        #: KV-cache path, which models the packed pass cannot run exactly always use (docs/scoring.md)
        self.packed = True
        sliding = getattr(engine.config, "sliding_window", None)
        self._sliding = int(sliding) if sliding else None
        self._equal = False
        self._plain = False  # the call in progress runs each row alone (the model's capabilities say so)
        self._sampling: tuple = ()  # the sampling specs of the call in progress
        self._taps: Any = None  # the activation capture of the call in progress
        #: rows longer than this run each alone, with SDPA's memory-efficient kernel excluded (it has returned
        #: wrong values past 2^32 query x key pairs in one row); None: no such limit (not a CUDA device)
        self.kernel_limit: int | None = KERNEL_SAFE_TOKENS if engine.device.type == "cuda" else None

    def run(self, tree: list[Node], *, sampling: tuple = (), taps: Any = None,
            tap_key: Callable[[Any], RowKey] | None = None, equal_widths: bool = False,
            raw_tokens: int = 0, progress: bool = False) -> dict[RowKey, RowOutput]:
        """Every leaf row's numbers, keyed ``(ids, score_from)``. ``sampling``: the call's sampling specs (read
        from the same logits); ``taps``: the call's :class:`probe.scoring.capture.Taps`, planned over the
        trees as they run (``tap_key`` maps a tree node to its row key); ``equal_widths``: only gap-free
        layouts on the level path (a sliding window counts cache columns); ``raw_tokens``: the tokens of the
        call's sequences each on its own (the counter sharing is measured against)."""
        self.engine.counters.add(tokens_raw=raw_tokens)
        self._equal = equal_widths
        caps = self.engine.capabilities
        if taps is not None and caps.capture:
            raise ProbeError(f"{caps.model_type}: {caps.capture}")
        tree, long = self._split_long(tree)
        longest = max((len(n.row.ids) for n in _leaves(tree)), default=0)
        passes = None
        # a model no shared-prefix path computes exactly runs each row alone (capabilities.py)
        self._plain = self.engine.capabilities.scoring_path == "plain"
        if self._plain:
            tree = build_tree([n.row for n in _leaves(tree)], share=False)
        elif self.packed and self.engine.packable(longest) is None:
            passes = layout(tree, self._row_target(), self.budget_cap, self.row_cap)
            tree = [f.places[0][0] for p in passes for row in p.trees for f in row]  # the rows' own trees
        if taps is not None:
            taps.plan(tree + long, tap_key)
        outputs: dict[RowKey, RowOutput] = {}
        bar = _bar(sum(n.leaves() for n in tree + long)) if progress else None
        self._sampling, self._taps = tuple(sampling), taps
        try:
            if passes is not None:
                self._run_packed(passes, outputs, bar)
            elif tree:
                self._run_level(tree, None, None, [0] * len(tree), outputs, bar)
            if long:
                self._run_long(long, outputs, bar)
        finally:
            self._sampling, self._taps = (), None
        if bar:
            bar.close()
        return outputs

    def _split_long(self, tree: list[Node]) -> tuple[list[Node], list[Node]]:
        """``tree`` less the rows longer than :attr:`kernel_limit`, and those rows as lone leaves."""
        if self.kernel_limit is None:
            return tree, []
        long = [n.row for n in _leaves(tree) if len(n.row.ids) > self.kernel_limit]
        if not long:
            return tree, []
        return _without(tree, {id(r) for r in long}), build_tree(long, share=False)

    def _run_long(self, long: list[Node], outputs: dict, bar) -> None:
        """Rows past :attr:`kernel_limit`: each alone, unpadded (the plain path), with the SDPA backends that
        have no query x key limit (flash attention takes one causal row of any length); refused in one line
        where none of them takes the model's attention."""
        plain, self._plain = self._plain, True
        try:
            with sdpa_preference(LONG_SDPA_BACKENDS):
                self._run_level(long, None, None, [0] * len(long), outputs, bar)
        except RuntimeError as exc:
            if is_oom(exc) or "no available kernel" not in str(exc).lower():
                raise
            longest = max(len(n.ids) for n in long)
            raise ProbeError(f"{self.engine.capabilities.model_type}: a sequence of {longest} tokens is longer than "
                             f"{self.kernel_limit}, and no attention kernel exact at that length takes this model's "
                             "attention (flash attention needs 16-bit weights)") from None
        finally:
            self._plain = plain

    def _row_target(self) -> int:
        return row_tokens(int(getattr(self.engine.config, "hidden_size", 0) or 0), self.budget_cap)

    # -- the packed path -------------------------------------------------------
    def _run_packed(self, passes: list[Pass], outputs: dict, bar) -> None:
        """Run ``passes`` (probe.scoring.engine.packed); the read stays on the device and comes back in one copy
        at the end. After an out-of-memory error the caps shrink and the trees not yet read are packed
        again; nothing read is read twice."""
        reads: list[tuple[ReadPlan, torch.Tensor]] = []
        while passes:
            staged = self._stage(passes)
            done = 0
            for p, (a, plan, dev, chunks) in zip(passes, staged):
                got = self._packed_pass(a, plan, dev, chunks)
                if got is None:
                    break
                if got is _LEVEL:  # one tree too big for a pass: its levels run one by one, split as needed
                    self._run_level([a.places[0][0]], None, None, [0], outputs, bar)
                    done += 1
                    continue
                reads.append((plan, got))
                done += 1
                self._grow()
                if bar is not None and plan.rows:
                    bar.update(len(plan.rows))
            staged = None  # noqa: F841  (the device inputs of passes not run are freed before repacking)
            todo = [f for p in passes[done:] for row in p.trees for f in row]
            passes = pack(todo, self._row_target(), self.budget_cap, self.row_cap)
        self._hand_out(reads, outputs)

    def _stage(self, passes: list[Pass]) -> list:
        """Per pass: its arrays, read plan, device inputs and head chunks; every pass's integer inputs
        go to the device in one copy."""
        host, plans, parts = [], [], []
        for p in passes:
            a = arrays(p, self.engine.pad_id)
            plan = read_plan(a.places)
            host.append(a)
            plans.append(plan)
            parts += [a.ids, a.pos, a.pre, a.end, plan.pos_row, plan.pos_col, plan.pair_pos, plan.pair_tok]
        moved = upload(parts, self.engine.device)
        self.engine.counters.add(host_device_copies=1)
        step = HEAD_CHUNK
        if self._sampling:
            step = min(step, block_rows(int(getattr(self.engine.config, "vocab_size", 0) or 0)))
        out = []
        for k, (a, plan) in enumerate(zip(host, plans)):
            starts = np.arange(0, plan.n_positions, step)
            bounds = np.searchsorted(plan.pair_pos, np.append(starts, plan.n_positions))
            chunks = [(int(s), int(min(s + step, plan.n_positions)), int(bounds[i]), int(bounds[i + 1]))
                      for i, s in enumerate(starts)]
            out.append((a, plan, moved[8 * k : 8 * k + 8], chunks))
        return out

    def _packed_pass(self, a, plan: ReadPlan, dev: list[torch.Tensor], chunks: list) -> Any:
        """One packed pass and its read (a device tensor); after an out-of-memory error None (caps shrunk:
        pack again) or, for a pass of one tree, ``_LEVEL`` (run that tree level by level)."""
        got = hidden = None
        failed = False
        try:
            with self._tap_at(a.places):
                hidden = self.engine.run_packed(dev[0], dev[1], dev[2], dev[3], int(a.pos.max(initial=0)), a.blocks)
            got = (self.engine.read_packed(hidden, dev[4:], chunks, self._sampling) if plan.n_positions
                   else hidden.new_zeros(0, dtype=torch.float64))
        except (torch.OutOfMemoryError, RuntimeError) as exc:
            if not is_oom(exc):
                raise
            failed = True
        if failed:
            # outside the except block: the failed pass's tensors (pinned by the traceback) are gone
            hidden = got = None  # noqa: F841  and so are the read path's
            self._back_off(a.ids.shape[0], a.ids.size)
            return _LEVEL if a.trees == 1 else None
        del hidden
        self.engine.counters.add(tokens_computed=a.computed, tokens_padded=a.padded, tokens_attended=a.attended)
        return got

    def _grow(self) -> None:
        """After a run of good passes, caps lowered by an out-of-memory error double (up to the plan), so
        one transient error does not slow a long run for good."""
        self._good_passes += 1
        if self._good_passes >= GROW_AFTER and (self.row_cap < self.batch_size or self.budget_cap < self.token_budget):
            self.row_cap = min(self.batch_size, 2 * self.row_cap)
            self.budget_cap = min(self.token_budget, 2 * self.budget_cap)
            self._good_passes = 0

    def _hand_out(self, reads: list[tuple[ReadPlan, torch.Tensor]], outputs: dict) -> None:
        """Copy every pass's read to the host at once and hand each row its numbers."""
        if not reads:
            return
        values = torch.cat([t for _, t in reads]).cpu().numpy()  # the one device-to-host copy of the call
        self.engine.counters.add(host_device_copies=1)
        at, n_specs = 0, len(self._sampling)
        for plan, _ in reads:
            n_pairs, n_pos = len(plan.pair_tok), plan.n_positions
            lp = values[at : at + n_pairs].tolist()
            bad = np.concatenate([[0], np.cumsum(values[at + n_pairs : at + n_pairs + n_pos] == 0)])
            sampled = values[at + n_pairs + n_pos : at + n_pairs * (1 + n_specs) + n_pos].reshape(n_specs, n_pairs).tolist()
            at += n_pairs * (1 + n_specs) + n_pos
            sizes = np.array([(lf[2], lf[3]) for lf in plan.leaves], dtype=np.int64).reshape(-1, 2)
            q = np.concatenate([[0], np.cumsum(sizes[:, 0])])
            finite = (bad[q[1:]] == bad[q[:-1]]).tolist()  # no non-finite position in the leaf's span
            p = 0
            for (row, label, _, n_row_pairs), fin in zip(plan.leaves, finite):
                outputs[(row.ids, row.score_from)] = _row_output(row, label, lp[p : p + n_row_pairs],
                                                                 [x[p : p + n_row_pairs] for x in sampled], fin)
                p += n_row_pairs

    def _tap_at(self, places):
        """The capture context of one packed pass (a no-op without capture)."""
        if self._taps is None:
            return contextlib.nullcontext()
        return self._taps.pass_at(places)

    def _tap(self, nodes: list[Node], column):
        """The capture context of one pass (a no-op without capture)."""
        if self._taps is None:
            return contextlib.nullcontext()
        return self._taps.pass_of(nodes, column)

    def _run_level(self, nodes: list[Node], cache, mask, parents: list[int], outputs, bar) -> None:
        """Run sibling ``nodes`` (children of cache rows ``parents``; no cache: top level), then their subtrees.

        The caches of consecutive passes are merged (up to the token budget)
        so the next level runs the children of many passes together: fewer,
        fuller forward passes. A merged block's subtrees run as soon as the
        block is full, so memory holds one block per level, not the level."""
        if cache is None:  # top level: shared segments in left-padded passes, lone rows as plain rows
            shared = [n for n in nodes if not n.is_leaf]
            lone = [n for n in nodes if n.is_leaf]
            kept = (item for part in self._passes(shared, 0) for item in self._run_top([shared[i] for i in part]))
            for part in self._passes(lone, 0):
                self._run_pass([lone[i] for i in part], None, None, None, outputs, bar)
        else:
            kept = (item for part in self._passes(nodes, mask.shape[1])
                    for item in self._run_pass([nodes[i] for i in part], cache, mask, [parents[i] for i in part],
                                               outputs, bar))
        block: list = []
        for item in kept:
            if block and not self._fits(block + [item]):
                self._descend(block, outputs, bar)
                block = []
            block.append(item)
        if block:
            self._descend(block, outputs, bar)

    def _fits(self, block: list) -> bool:
        """Whether pass caches can merge into one: rows x width within the token budget, and never
        with sliding-window layers (padding gaps would shift the window)."""
        if self._sliding:
            return False
        rows = sum(sum(not n.is_leaf for n in p) for _, _, p in block)
        return rows * max(m.shape[1] for _, m, _ in block) <= self.budget_cap

    def _descend(self, block: list, outputs, bar) -> None:
        """Run the children of the internal nodes of the passes in ``block`` against their (merged) cache."""
        if len(block) == 1:
            cache, mask, part = block[0]
            keep = [i for i, n in enumerate(part) if not n.is_leaf]
        else:
            merged = None
            try:
                merged = self.engine.merge_caches(
                    [(c, m, [i for i, n in enumerate(p) if not n.is_leaf]) for c, m, p in block])
            except torch.OutOfMemoryError:
                pass  # recover below, once the exception (and the tensors its traceback pins) is gone
            if merged is None:
                # nothing of the block has run yet: descend from each pass's own cache instead
                rows = sum(sum(not n.is_leaf for n in p) for _, _, p in block)
                self._back_off(rows, rows * max(m.shape[1] for _, m, _ in block))
                for item in block:
                    self._descend([item], outputs, bar)
                return
            cache, mask = merged
            keep = list(range(mask.shape[0]))
        internal = [n for _, _, p in block for n in p if not n.is_leaf]
        children = [(child, keep[i]) for i, n in enumerate(internal) for child in n.children]
        self._run_level([ch for ch, _ in children], cache, mask, [r for _, r in children], outputs, bar)

    def _run_top(self, part: list[Node]) -> list:
        """A left-padded pass over top-level shared segments; returns its cache for the subtrees."""
        width = max(len(n.ids) for n in part)  # left-padded: token t of node b sits at column width - len + t
        done = None
        try:
            with self._tap(part, lambda b, t: width - len(part[b].ids) + t):
                done = self.engine.run_prefixes([n.ids for n in part])
        except torch.OutOfMemoryError:
            if len(part) == 1:
                raise
        if done is None:
            # out of memory: the halves run after the except block, so the failed pass's tensors
            # (held by the exception's traceback inside it) are freed first
            self._back_off(len(part), len(part) * width)
            k = len(part) // 2
            return self._run_top(part[:k]) + self._run_top(part[k:])
        cache, mask = done
        return [(cache, mask, part)]

    def _run_pass(self, part: list[Node], cache, mask, parents, outputs, bar) -> list:
        """One forward pass over sibling segments: reads the leaves; returns the cache of the
        internal nodes (for their subtrees), if any."""
        keep = any(not n.is_leaf for n in part)
        leaf_at = [i for i, n in enumerate(part) if n.is_leaf]
        rows = [part[i].row for i in leaf_at]
        done = None
        try:
            with self._tap(part, lambda b, t: t - part[b].start):  # right-padded segments from their start
                hidden, cache2, mask2 = self.engine.run_segments(
                    [(n.ids, n.start) for n in part], cache=cache, prefix_mask=mask, cache_rows=parents,
                    keep_cache=keep)
            # the read (head + float32 log-softmax at the scored positions) can run out of memory too
            read = self.engine.read(hidden, rows, [part[i].start for i in leaf_at], leaf_at,
                                    sampling=self._sampling) if leaf_at else []
            done = (read, cache2, mask2)
            del hidden
        except torch.OutOfMemoryError:
            if len(part) == 1:
                raise
        if done is None:
            # out of memory: nothing of this pass was kept; the halves run after the except block, so
            # the failed pass's tensors (held by the exception's traceback inside it) are freed first
            width = max(len(n.ids) - n.start for n in part) + (0 if mask is None else mask.shape[1])
            self._back_off(len(part), len(part) * width)
            k = len(part) // 2
            return (self._run_pass(part[:k], cache, mask, parents and parents[:k], outputs, bar)
                    + self._run_pass(part[k:], cache, mask, parents and parents[k:], outputs, bar))
        read, cache2, mask2 = done
        for row, out in zip(rows, read):
            outputs[(row.ids, row.score_from)] = out
        if bar and rows:
            bar.update(len(rows))
        return [(cache2, mask2, part)] if keep else []

    def _passes(self, nodes: list[Node], cache_width: int) -> list[list[int]]:
        rows = 1 if self._plain else min(self.batch_size, self.row_cap)  # plain: each row alone, unpadded
        return plan_passes(nodes, rows, self.budget_cap, cache_width, equal_widths=self._equal)

    def _back_off(self, rows: int, tokens: int | None = None) -> None:
        """After an out-of-memory error with ``rows`` sequences (``tokens`` padded tokens, cache columns
        included) in a pass or merged cache: at most half as many rows, and half as many tokens, from now on.
        The failed work is redone in halves; nothing it did is kept, so no row is lost or read twice."""
        self.row_cap = max(1, min(self.row_cap, rows // 2))
        if tokens is not None:
            self.budget_cap = max(1, min(self.budget_cap, tokens // 2))
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        warnings.warn(f"out of memory with {rows} sequences ({tokens} padded tokens) in one forward pass; "
                      f"continuing with at most {self.row_cap} sequences and {self.budget_cap} tokens per pass "
                      "(results are unchanged)", RuntimeWarning, stacklevel=2)


def _bar(total: int) -> Any:
    return tqdm(total=total, unit="seq", desc="scoring", leave=False)


def _without(nodes: list[Node], rows: set[int]) -> list[Node]:
    """The tree ``nodes`` less the leaves of ``rows`` (ids of their rows); a segment left with one child is
    folded into it (the child then starts where the segment did)."""
    out = []
    for n in nodes:
        if n.is_leaf:
            if id(n.row) not in rows:
                out.append(n)
            continue
        kids = _without(n.children, rows)
        if len(kids) > 1:
            out.append(dataclasses.replace(n, children=kids))
        elif kids:
            out.append(dataclasses.replace(kids[0], start=n.start))
    return out


def _leaves(nodes: list[Node]):
    for n in nodes:
        if n.is_leaf:
            yield n
        else:
            yield from _leaves(n.children)


def is_oom(exc: BaseException) -> bool:
    """An allocation failure: ``torch.OutOfMemoryError``, or a RuntimeError saying "out of memory"
    (some back-ends and kernels raise that)."""
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _row_output(row: Row, label: bool, lp: list[float], sampled: list[list[float]], finite: bool) -> RowOutput:
    """One row's numbers from its slice of a pass's read (label targets first when ``label``)."""
    k = len(row.label_ids) if label else 0
    out = RowOutput(finite=finite, token_logprobs=lp[k:], sampled_tokens=[x[k:] for x in sampled])
    if label:
        out.label_logprobs = dict(zip(row.label_ids, lp[:k]))
    out.sampled_labels = [dict(zip(row.label_ids, x[:k])) if label else {} for x in sampled]
    return out
