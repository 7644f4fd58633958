"""The scorer: requests in, exact log-probabilities out.

>>> from probe.models import load_model                       # doctest: +SKIP
>>> from probe.scoring import Scorer, LabelRequest             # doctest: +SKIP
>>> scorer = Scorer(load_model("smollm2"))                      # doctest: +SKIP
>>> [res] = scorer.score([LabelRequest("q", "Is water wet? Answer Yes or No.\\nAnswer:", ("Yes", "No"))])  # doctest: +SKIP
>>> round(sum(res.probs), 6)                                    # doctest: +SKIP
1.0
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable, Iterable, Sequence as Seq

import torch

from probe.scoring.batching import MIN_SHARED, Batch, cluster_ungrouped, make_group, plan_batches
from probe.scoring.engine import Engine, Group, Row, RowOutput
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
from probe.scoring.tokens import Encoded, Encoder

RowKey = tuple[tuple[int, ...], int]


class Scorer:
    """Scores label, continuation and perplexity requests with one model.

    Parameters
    ----------
    lm:
        a :class:`probe.models.LoadedModel` (or anything with ``.model`` and ``.tokenizer``).
    batch_size:
        most sequences per forward pass.
    token_budget:
        most padded tokens per forward pass (prefix and suffix passes alike).
    share_prefixes:
        compute shared token prefixes once (on by default; off gives the plain
        padded-batch computation, used to check that sharing changes nothing).
    """

    def __init__(
        self,
        lm: Any,
        batch_size: int = 16,
        token_budget: int = 8192,
        share_prefixes: bool = True,
        min_shared: int = MIN_SHARED,
    ) -> None:
        if batch_size < 1 or token_budget < 1:
            raise ValueError("batch_size and token_budget must be positive")
        self.lm = lm
        self.batch_size = batch_size
        self.token_budget = token_budget
        self.share_prefixes = share_prefixes
        self.min_shared = min_shared
        tok = lm.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        self.engine = Engine(lm.model, pad_id=pad if pad is not None else 0)
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
        on_hidden: Callable[[torch.Tensor, list[Row], list[int]], None] | None = None,
    ) -> list[Result]:
        """Score ``requests``; results come back aligned with them."""
        encoded = [self.encode(r) for r in requests]
        outputs = self._run(encoded, progress=progress, on_hidden=on_hidden)
        return [self._assemble(e, outputs) for e in encoded]

    def iter_score(self, requests: Iterable[Request], chunk_size: int = 256, progress: bool = False) -> Iterable[list[Result]]:
        """Score in chunks (for runs that record as they go); yields each chunk's results."""
        chunk: list[Request] = []
        for r in requests:
            chunk.append(r)
            if len(chunk) >= chunk_size:
                yield self.score(chunk, progress=progress)
                chunk = []
        if chunk:
            yield self.score(chunk, progress=progress)

    # -- planning and running ----------------------------------------------
    def plan(self, encoded: list[Encoded]) -> list[Batch]:
        longest = max((len(s.ids) for e in encoded for s in e.sequences), default=0)
        # Sliding-window attention counts cache columns, so padding gaps inside a
        # long prompt would shift the window: then only gap-free layouts are used.
        self._equal = bool(self._sliding and longest > self._sliding // 2)
        self._nested = not self._equal
        rows: dict[RowKey, Row] = {}
        grouped: dict[str, list[RowKey]] = defaultdict(list)
        loose: list[RowKey] = []
        for e in encoded:
            r = e.request
            keys = []
            for s in e.sequences:
                key = (s.ids, s.score_from)
                row = rows.get(key)
                if row is None:
                    rows[key] = Row(s.ids, s.score_from, s.label_ids)
                elif s.label_ids and set(s.label_ids) - set(row.label_ids):
                    row.label_ids = tuple(sorted(set(row.label_ids) | set(s.label_ids)))
                keys.append(key)
            if r.group is not None:
                grouped[f"g:{r.group}"].extend(keys)
            elif len(keys) > 1:
                grouped[f"r:{r.id}"].extend(keys)
            else:
                loose.extend(keys)
        groups: list[Group] = []
        taken: set[RowKey] = set()
        for name in sorted(grouped):
            members = [k for k in dict.fromkeys(grouped[name]) if k not in taken]
            taken.update(members)
            if members:
                groups.append(self._group([rows[k] for k in members]))
        free = [rows[k] for k in dict.fromkeys(loose) if k not in taken]
        if self.share_prefixes:
            groups.extend(cluster_ungrouped(free, self.min_shared, max_rows=max(self.batch_size, 1), nested=self._nested))
        else:
            groups.extend(Group((), [r]) for r in free)
        return plan_batches(groups, self.batch_size, self.token_budget, equal_prefix_lengths=self._equal)

    def _group(self, rows: list[Row]) -> Group:
        if not self.share_prefixes:
            return Group((), rows)
        return make_group(rows, self.min_shared, nested=self._nested)

    def _run(self, encoded: list[Encoded], progress: bool, on_hidden=None) -> dict[RowKey, RowOutput]:
        batches = self.plan(encoded)
        outputs: dict[RowKey, RowOutput] = {}
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=sum(b.n_rows for b in batches), unit="seq", desc="scoring", leave=False)
        for batch in batches:
            if batch.prefix_groups:
                self._run_shared(batch, outputs, bar, on_hidden)
            if batch.plain_rows:
                rows = batch.plain_rows
                for row, out in zip(rows, self.engine.run_rows(rows, [0] * len(rows), on_hidden=on_hidden)):
                    outputs[(row.ids, row.score_from)] = out
                if bar:
                    bar.update(len(rows))
        if bar:
            bar.close()
        return outputs

    def _run_shared(self, batch: Batch, outputs: dict[RowKey, RowOutput], bar, on_hidden) -> None:
        groups = batch.prefix_groups
        cache, prefix_mask = self.engine.run_prefixes([g.prefix for g in groups])
        self._run_against(cache, prefix_mask, [(gi, row, len(g.prefix)) for gi, g in enumerate(groups) for row in g.direct], outputs, bar, on_hidden)
        subs = [(gi, sg) for gi, g in enumerate(groups) for sg in g.subgroups]
        for c in range(0, len(subs), self.batch_size):
            part = subs[c : c + self.batch_size]
            segments = [Row(sg.prefix, len(sg.prefix) + 1) for _, sg in part]
            cache2, mask2 = self.engine.run_rows(
                segments,
                [len(groups[gi].prefix) for gi, _ in part],
                cache=cache,
                prefix_mask=prefix_mask,
                cache_rows=[gi for gi, _ in part],
                keep_cache=True,
            )
            flat = [(si, row, len(sg.prefix)) for si, (_, sg) in enumerate(part) for row in sg.rows]
            self._run_against(cache2, mask2, flat, outputs, bar, on_hidden)

    def _run_against(self, cache, prefix_mask, flat, outputs: dict[RowKey, RowOutput], bar, on_hidden) -> None:
        """Run (cache row, row, start) triples against a cache, ``batch_size`` rows at a time.

        Rows are sorted by remaining length and a pass is closed early when
        padding would exceed 30% of its real tokens (short option rows and long
        prompt rows then do not share a padded width)."""
        flat = sorted(flat, key=lambda t: (len(t[1].ids) - t[2], t[1].ids))
        parts: list[list] = []
        for item in flat:
            if parts:
                part = parts[-1]
                lengths = [len(r.ids) - s for _, r, s in part] + [len(item[1].ids) - item[2]]
                if len(part) < self.batch_size and (len(part) < 4 or max(lengths) * len(lengths) <= 1.3 * sum(lengths)):
                    part.append(item)
                    continue
            parts.append([item])
        for part in parts:
            rows = [row for _, row, _ in part]
            results = self.engine.run_rows(
                rows,
                [start for _, _, start in part],
                cache=cache,
                prefix_mask=prefix_mask,
                cache_rows=[gi for gi, _, _ in part],
                on_hidden=on_hidden,
            )
            for row, out in zip(rows, results):
                outputs[(row.ids, row.score_from)] = out
            if bar:
                bar.update(len(rows))

    # -- results -----------------------------------------------------------
    def _assemble(self, e: Encoded, outputs: dict[RowKey, RowOutput]) -> Result:
        r = e.request
        outs = [outputs[(s.ids, s.score_from)] for s in e.sequences]
        if isinstance(r, LabelRequest):
            out = outs[0]
            logprobs = tuple(_logsumexp([out.label_logprobs[t] for t in variant]) for variant in e.label_variants)
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
            )
        raise TypeError(type(r).__name__)


def _logsumexp(values: list[float]) -> float:
    m = max(values)
    if not math.isfinite(m):
        return m
    return m + math.log(math.fsum(math.exp(v - m) for v in values))
