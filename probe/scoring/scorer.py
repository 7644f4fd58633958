"""The scorer: requests in, exact log-probabilities out.

>>> from probe.models import load_model                       # doctest: +SKIP
>>> from probe.scoring import Scorer, LabelRequest             # doctest: +SKIP
>>> scorer = Scorer(load_model("smollm2"))                      # doctest: +SKIP
>>> [res] = scorer.score([LabelRequest("q", "Is water wet? Answer Yes or No.\\nAnswer:", ("Yes", "No"))])  # doctest: +SKIP
>>> round(sum(res.probs), 6)                                    # doctest: +SKIP
1.0
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings
from typing import TYPE_CHECKING, Any, Sequence as Seq

import numpy as np
import torch

from probe.scoring.batching import MIN_SHARED, Node, build_tree, plan_passes
from probe.scoring.capture import Capturer, Taps
from probe.scoring.engine import HEAD_CHUNK, Engine, Row, RowOutput, cache_bytes, pad_id_of
from probe.scoring.packed import Pass, ReadPlan, arrays, layout, pack, read_plan, row_tokens, upload
from probe.scoring.requests import (
    ContinuationRequest,
    ContinuationResult,
    LabelRequest,
    LabelResult,
    PerplexityRequest,
    PerplexityResult,
    Request,
    Result,
    softmax,
)
from probe.scoring.sampling import SamplingSpec, sampled_continuation, sampled_label
from probe.scoring.tokens import Encoded, Encoder

if TYPE_CHECKING:
    from probe.scoring.cache import ScoreCache

RowKey = tuple[tuple[int, ...], int]
_LEVEL = object()  # a packed pass's answer: run its one tree level by level
GROW_AFTER = 8  # good passes after which caps lowered by an out-of-memory error double


class Scorer:
    """Scores label, continuation and perplexity requests with one model.

    Parameters
    ----------
    lm:
        a :class:`probe.models.LoadedModel` (or anything with ``.model`` and ``.tokenizer``).
    batch_size:
        most sequences per forward pass, or ``"auto"`` (:mod:`probe.scoring.memory`:
        on a GPU no row limit beyond the token budget; on the CPU 16).
    token_budget:
        most padded tokens per forward pass (prefix and suffix passes alike), or
        ``"auto"``: what the free memory of the model's device holds for this
        model's shape (:func:`probe.scoring.memory.plan`; on the CPU at most 8192).
        What was chosen is :attr:`batching` (a :class:`~probe.scoring.memory.BatchPlan`).
    share_prefixes:
        compute shared token prefixes once (on by default; off gives the plain
        padded-batch computation, used to check that sharing changes nothing).
    min_shared:
        a shared segment must save at least this many tokens to run once.
    cache:
        a :class:`probe.scoring.cache.ScoreCache` opened for this model's
        fingerprint: sequences scored before are read from it, new ones added.
    fingerprint:
        the model's fingerprint (:func:`probe.models.fingerprint.model_fingerprint`), computed by the
        caller: a ``cache`` opened for another fingerprint is refused (the engine never loads a model).
    """

    def __init__(
        self,
        lm: Any,
        batch_size: int | str = 16,
        token_budget: int | str = 8192,
        share_prefixes: bool = True,
        min_shared: int = MIN_SHARED,
        cache: "ScoreCache | None" = None,
        fingerprint: str | None = None,
    ) -> None:
        from probe.scoring.memory import plan as plan_batches

        #: the batch size and token budget in use and how they were found (``auto``: from free memory)
        self.batching = plan_batches(lm, batch_size, token_budget)
        self.lm = lm
        self.batch_size = self.batching.batch_size
        self.token_budget = self.batching.token_budget
        self.share_prefixes = share_prefixes
        self.min_shared = min_shared
        if cache is not None and fingerprint is not None:
            if cache.fingerprint != fingerprint:
                raise ValueError(f"score cache {cache.path} was opened for another model fingerprint")
        self.cache = cache
        self._row_cap = self.batch_size  # lowered after an out-of-memory error (grows back, see _grow)
        self._budget_cap = self.token_budget  # likewise
        self._good_passes = 0  # passes run since the last out-of-memory error
        #: run whole prefix trees in packed passes (probe.scoring.packed); off: the level-by-level
        #: KV-cache path, which models the packed pass cannot run exactly always use (docs/scoring.md)
        self.packed = True
        self._equal = False
        self._sampling: tuple[SamplingSpec, ...] = ()  # the specs of the call in progress
        self._taps: Taps | None = None  # the activation capture of the call in progress
        tok = lm.tokenizer
        self.engine = Engine(lm.model, pad_id=pad_id_of(tok))
        max_len = getattr(lm, "max_length", None)
        self.encoder = Encoder(tok, max_length=max_len)
        sliding = getattr(self.engine.config, "sliding_window", None)
        self._sliding = int(sliding) if sliding else None

    # -- public API ----------------------------------------------------------
    def encode(self, request: Request) -> Encoded:
        """Tokenize one request (raises ValueError naming the request and field)."""
        return self.encoder.encode(request)

    @torch.inference_mode()
    def score(
        self,
        requests: Seq[Request],
        progress: bool = False,
        sampling: Seq[SamplingSpec] = (),
        capture: Capturer | None = None,
    ) -> list[Result]:
        """Score ``requests``; results come back aligned with them.

        ``sampling``: :class:`~probe.scoring.sampling.SamplingSpec` s; label and
        continuation results then carry, per spec in this order, what sampling
        under it would do (``result.sampling``), read from the same forward pass.
        ``capture``: a :class:`probe.activations.CaptureSpec`; each result then
        carries ``result.activations`` (``{'{hook}@{position}': float32 [d_model]}``),
        read in the same passes as the scores, prefix sharing on
        (:mod:`probe.scoring.capture`). The score cache is bypassed for a call
        with either (it stores exact scores only).
        """
        specs = tuple(sampling)
        if any(not isinstance(x, SamplingSpec) for x in specs):
            raise TypeError("sampling must hold SamplingSpec objects")
        encoded = [self.encode(r) for r in requests]
        taps = None
        if capture is not None:
            ids = [r.id for r in requests]
            if len(set(ids)) != len(ids):
                dup = next(i for i in ids if ids.count(i) > 1)
                raise ValueError(f"request ids must be unique to key activations; {dup!r} repeats")
            taps = Taps(capture, [capture.target(self, e) for e in encoded])
        self._sampling = specs
        try:
            if taps is None:
                outputs = self._run(encoded, progress=progress)
            else:
                with capture.attach(self.lm.model, taps.record):
                    outputs = self._compute(encoded, progress, taps)
        finally:
            self._sampling = ()
        results = [self._assemble(e, outputs, specs) for e in encoded]
        if taps is not None:
            d_model = int(getattr(self.engine.config, "hidden_size", 0) or 0)
            results = [dataclasses.replace(r, activations=taps.vectors(i, d_model)) for i, r in enumerate(results)]
        return results

    # -- planning and running ----------------------------------------------
    def rows(self, encoded: list[Encoded], extra: Seq[Row] = ()) -> list[Row]:
        """The unique token sequences behind ``encoded`` (identical requests collapse to one row),
        then the capture-only ``extra`` rows not among them."""
        rows: dict[RowKey, Row] = {}
        for e in encoded:
            for s in e.sequences:
                key = (s.ids, s.score_from)
                row = rows.get(key)
                if row is None:
                    rows[key] = Row(s.ids, s.score_from, s.label_ids)
                elif s.label_ids and set(s.label_ids) - set(row.label_ids):
                    row.label_ids = tuple(sorted(set(row.label_ids) | set(s.label_ids)))
        for r in extra:
            rows.setdefault((r.ids, r.score_from), r)
        return list(rows.values())

    def plan(self, encoded: list[Encoded], extra: Seq[Row] = ()) -> list[Node]:
        """The prefix tree the rows of ``encoded`` run as (see :mod:`probe.scoring.batching`)."""
        longest = max((len(s.ids) for e in encoded for s in e.sequences), default=0)
        # Sliding-window attention counts cache columns, so padding gaps inside a
        # long prompt would shift the window: then only gap-free layouts are used.
        self._equal = bool(self._sliding and longest > self._sliding // 2)
        return build_tree(self.rows(encoded, extra), self.min_shared, share=self.share_prefixes)

    def _run(self, encoded: list[Encoded], progress: bool) -> dict[RowKey, RowOutput]:
        # cached sequences come from disk and only the rest runs; sampling specs bypass the
        # cache (it holds exact scores only), as does capture (see score)
        if self.cache is not None and not self._sampling:
            return self.cache.outputs(encoded, lambda todo: self._compute(todo, progress), model=self.lm.model)
        return self._compute(encoded, progress)

    def _compute(self, encoded: list[Encoded], progress: bool, taps: Taps | None = None) -> dict[RowKey, RowOutput]:
        tree = self.plan(encoded, taps.extra_rows() if taps else ())
        self.engine.tokens_raw += sum(len(s.ids) for e in encoded for s in e.sequences)
        longest = max((len(n.row.ids) for n in _leaves(tree)), default=0)
        passes = None
        if self.packed and self.engine.packable(longest) is None:
            passes = layout(tree, self._row_target(), self._budget_cap, self._row_cap)
            tree = [f.places[0][0] for p in passes for row in p.trees for f in row]  # the rows' own trees
        if taps is not None:
            keys = {s.ids: (s.ids, s.score_from) for e in encoded for s in e.sequences}
            taps.plan(tree, lambda t: (t.row, len(t.row)) if t.extra else keys[t.row])
        self._taps = taps
        outputs: dict[RowKey, RowOutput] = {}
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=sum(n.leaves() for n in tree), unit="seq", desc="scoring", leave=False)
        try:
            if passes is not None:
                self._run_packed(passes, outputs, bar)
            else:
                self._run_level(tree, None, None, [0] * len(tree), outputs, bar)
        finally:
            self._taps = None
        if bar:
            bar.close()
        return outputs

    def _row_target(self) -> int:
        return row_tokens(int(getattr(self.engine.config, "hidden_size", 0) or 0), self._budget_cap)

    # -- the packed path -------------------------------------------------------
    def _run_packed(self, passes: list[Pass], outputs: dict, bar) -> None:
        """Run ``passes`` (probe.scoring.packed); the read stays on the device and comes back in one copy
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
            passes = pack(todo, self._row_target(), self._budget_cap, self._row_cap)
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
        self.engine.host_copies += 1
        step = HEAD_CHUNK
        if self._sampling:
            from probe.scoring.sampling import block_rows

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
        self.engine.tokens_run += a.computed
        self.engine.tokens_padded += a.padded
        self.engine.tokens_attended += a.attended
        return got

    def _grow(self) -> None:
        """After a run of good passes, caps lowered by an out-of-memory error double (up to the plan), so
        one transient error does not slow a long run for good."""
        self._good_passes += 1
        if self._good_passes >= GROW_AFTER and (self._row_cap < self.batch_size or self._budget_cap < self.token_budget):
            self._row_cap = min(self.batch_size, 2 * self._row_cap)
            self._budget_cap = min(self.token_budget, 2 * self._budget_cap)
            self._good_passes = 0

    def _hand_out(self, reads: list[tuple[ReadPlan, torch.Tensor]], outputs: dict) -> None:
        """Copy every pass's read to the host at once and hand each row its numbers."""
        if not reads:
            return
        values = torch.cat([t for _, t in reads]).cpu().numpy()  # the one device-to-host copy of the call
        self.engine.host_copies += 1
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
        return rows * max(m.shape[1] for _, m, _ in block) <= self._budget_cap

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
            self.engine.kv_bytes_copied += cache_bytes(cache)
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
        return plan_passes(nodes, min(self.batch_size, self._row_cap), self._budget_cap, cache_width,
                           equal_widths=self._equal)

    def _back_off(self, rows: int, tokens: int | None = None) -> None:
        """After an out-of-memory error with ``rows`` sequences (``tokens`` padded tokens, cache columns
        included) in a pass or merged cache: at most half as many rows, and half as many tokens, from now on.
        The failed work is redone in halves; nothing it did is kept, so no row is lost or read twice."""
        self._row_cap = max(1, min(self._row_cap, rows // 2))
        if tokens is not None:
            self._budget_cap = max(1, min(self._budget_cap, tokens // 2))
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        warnings.warn(f"out of memory with {rows} sequences ({tokens} padded tokens) in one forward pass; "
                      f"continuing with at most {self._row_cap} sequences and {self._budget_cap} tokens per pass "
                      "(results are unchanged)", RuntimeWarning, stacklevel=2)

    # -- results -----------------------------------------------------------
    def _assemble(self, e: Encoded, outputs: dict[RowKey, RowOutput], specs: tuple[SamplingSpec, ...] = ()) -> Result:
        r = e.request
        outs = [outputs[(s.ids, s.score_from)] for s in e.sequences]
        if isinstance(r, LabelRequest):
            out = outs[0]
            # tokens every label starts with (tokens.shared_prefix; none: 0) count in each label's log-prob
            pre = math.fsum(out.token_logprobs)
            logprobs = tuple(_logsumexp([out.label_logprobs[t] for t in variant]) + pre
                             for variant in e.label_variants)
            finite = out.finite and all(math.isfinite(x) for x in logprobs)
            mass = sum(math.exp(x) for x in logprobs) if finite else math.nan
            return LabelResult(
                id=r.id,
                labels=r.labels,
                logprobs=logprobs,
                probs=softmax(logprobs) if finite else tuple(math.nan for _ in logprobs),
                label_mass=mass,
                token_ids=e.label_variants,
                n_prompt_tokens=e.n_prompt_tokens,
                finite=finite,
                meta=r.meta,
                sampling=tuple(sampled_label(spec, _shifted(out.sampled_labels[k], out.sampled_tokens[k]),
                                             e.label_variants, finite)
                               for k, spec in enumerate(specs)),
            )
        if isinstance(r, ContinuationRequest):
            token_lps = tuple(tuple(o.token_logprobs) for o in outs)
            return ContinuationResult(
                id=r.id,
                options=r.options,
                logprobs=tuple(math.fsum(t) for t in token_lps),
                token_logprobs=token_lps,
                token_counts=tuple(len(t) for t in token_lps),
                byte_counts=e.byte_counts,
                n_prompt_tokens=e.n_prompt_tokens,
                finite=all(o.finite for o in outs),
                meta=r.meta,
                sampling=tuple(sampled_continuation(spec, [o.sampled_tokens[k] for o in outs])
                               for k, spec in enumerate(specs)),
            )
        if isinstance(r, PerplexityRequest):
            lps = tuple(outs[0].token_logprobs)
            nll = -math.fsum(lps)
            return PerplexityResult(
                id=r.id,
                ppl=math.exp(nll / len(lps)),
                nll=nll,
                n_tokens=len(lps),
                token_logprobs=lps,
                finite=outs[0].finite and math.isfinite(nll),
                meta=r.meta,
            )
        raise TypeError(type(r).__name__)


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


def _logsumexp(values: list[float]) -> float:
    m = max(values)
    if not math.isfinite(m):
        return m
    return m + math.log(math.fsum(math.exp(v - m) for v in values))


def _shifted(label_logprobs: dict[int, float], prefix: list[float]) -> dict[int, float]:
    """Label sampling log-probs with the shared prefix's (tokens.shared_prefix; none: unchanged) added."""
    pre = math.fsum(prefix) if prefix else 0.0
    return {t: v + pre for t, v in label_logprobs.items()} if pre else dict(label_logprobs)
