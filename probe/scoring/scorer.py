"""The scorer: requests in, exact log-probabilities out.

>>> from probe.models import load_model                       # doctest: +SKIP
>>> from probe.scoring import Scorer, LabelRequest             # doctest: +SKIP
>>> scorer = Scorer(load_model("smollm2"))                      # doctest: +SKIP
>>> [res] = scorer.score([LabelRequest("q", "Is water wet? Answer Yes or No.\\nAnswer:", ("Yes", "No"))])  # doctest: +SKIP
>>> round(sum(res.probs), 6)                                    # doctest: +SKIP
1.0
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Sequence as Seq

import torch

from probe.scoring.capture import Capturer, Taps
from probe.scoring.engine.batching import MIN_SHARED, Node, build_tree
from probe.scoring.engine.driver import Driver, RowKey, is_oom  # noqa: F401  (is_oom: public here too, as before)
from probe.scoring.engine.forward import Engine, Row, RowOutput, pad_id_of
from probe.scoring.engine.memory import plan as plan_batches
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
from probe.scoring.sampler.sampling import SamplingSpec, sampled_continuation, sampled_label
from probe.scoring.tokens import Encoded, Encoder

if TYPE_CHECKING:
    from probe.scoring.cache import ScoreCache


class Scorer:
    """Scores label, continuation and perplexity requests with one model.

    Parameters
    ----------
    lm:
        a :class:`probe.models.LoadedModel` (or anything with ``.model`` and ``.tokenizer``).
    batch_size:
        most sequences per forward pass, or ``"auto"`` (:mod:`probe.scoring.engine.memory`:
        on a GPU no row limit beyond the token budget; on the CPU 16).
    token_budget:
        most padded tokens per forward pass (prefix and suffix passes alike), or
        ``"auto"``: what the free memory of the model's device holds for this
        model's shape (:func:`probe.scoring.engine.memory.plan`; on the CPU at most 8192).
        What was chosen is :attr:`batching` (a :class:`~probe.scoring.engine.memory.BatchPlan`).
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
    keep_greedy:
        also keep each scored position's argmax token (``scorer.engine.greedy``, what lm-eval's
        ``is_greedy`` compares with a continuation); such calls run the level path.
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
        keep_greedy: bool = False,
    ) -> None:
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
        tok = lm.tokenizer
        self.engine = Engine(lm.model, pad_id=pad_id_of(tok), keep_greedy=keep_greedy)
        #: runs the prefix trees of a call through the engine (path, staging, out-of-memory back-off)
        self.driver = Driver(self.engine, self.batch_size, self.token_budget)
        max_len = getattr(lm, "max_length", None)
        self.encoder = Encoder(tok, max_length=max_len)
        sliding = getattr(self.engine.config, "sliding_window", None)
        self._sliding = int(sliding) if sliding else None
        self._equal = False

    @property
    def packed(self) -> bool:
        """Whether whole prefix trees run in packed passes (on by default); off: the level-by-level KV-cache
        path, which models the packed pass cannot run exactly always use (docs/scoring.md)."""
        return self.driver.packed

    @packed.setter
    def packed(self, value: bool) -> None:
        self.driver.packed = bool(value)

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

        ``sampling``: :class:`~probe.scoring.sampler.sampling.SamplingSpec` s; label and
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
        if taps is None:
            outputs = self._run(encoded, progress, specs)
        else:
            with capture.attach(self.lm.model, taps.record):
                outputs = self._compute(encoded, progress, specs, taps)
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
        """The prefix tree the rows of ``encoded`` run as (see :mod:`probe.scoring.engine.batching`)."""
        longest = max((len(s.ids) for e in encoded for s in e.sequences), default=0)
        # Sliding-window attention counts cache columns, so padding gaps inside a
        # long prompt would shift the window: then only gap-free layouts are used.
        self._equal = bool(self._sliding and longest > self._sliding // 2)
        return build_tree(self.rows(encoded, extra), self.min_shared, share=self.share_prefixes)

    def _run(self, encoded: list[Encoded], progress: bool, specs: tuple[SamplingSpec, ...]) -> dict[RowKey, RowOutput]:
        # cached sequences come from disk and only the rest runs; sampling specs bypass the
        # cache (it holds exact scores only), as does capture (see score)
        if self.cache is not None and not specs:
            return self.cache.outputs(encoded, lambda todo: self._compute(todo, progress), model=self.lm.model)
        return self._compute(encoded, progress, specs)

    def _compute(self, encoded: list[Encoded], progress: bool, specs: tuple[SamplingSpec, ...] = (),
                 taps: Taps | None = None) -> dict[RowKey, RowOutput]:
        """The driver runs the call's prefix tree; capture rows join it, keyed back to their requests."""
        tree = self.plan(encoded, taps.extra_rows() if taps else ())
        keys = {s.ids: (s.ids, s.score_from) for e in encoded for s in e.sequences}
        return self.driver.run(tree, sampling=specs, taps=taps,
                               tap_key=lambda t: (t.row, len(t.row)) if t.extra else keys[t.row],
                               equal_widths=self._equal, progress=progress,
                               raw_tokens=sum(len(s.ids) for e in encoded for s in e.sequences))

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


def _logsumexp(values: list[float]) -> float:
    m = max(values)
    if not math.isfinite(m):
        return m
    return m + math.log(math.fsum(math.exp(v - m) for v in values))


def _shifted(label_logprobs: dict[int, float], prefix: list[float]) -> dict[int, float]:
    """Label sampling log-probs with the shared prefix's (tokens.shared_prefix; none: unchanged) added."""
    pre = math.fsum(prefix) if prefix else 0.0
    return {t: v + pre for t, v in label_logprobs.items()} if pre else dict(label_logprobs)
