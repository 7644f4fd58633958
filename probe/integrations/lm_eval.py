"""probe's Scorer as an lm-evaluation-harness model: ``ProbeLM`` (lm-eval name ``probe``).

lm-eval's Hugging Face backend (``--model hf``, ``HFLM``) runs every
(context, continuation) pair as its own padded sequence, so the prompt of a
multiple-choice question is recomputed once per option. ``ProbeLM`` scores the
*same token ids* with probe's :class:`~probe.scoring.Scorer`: all requests of a
call go into one prefix tree, shared prompt prefixes (the question, the
few-shot examples) run once, and only the scored positions are unembedded
(``docs/lm_eval.md``).

What equals ``--model hf`` and why:

* ``ProbeLM`` subclasses ``HFLM`` and keeps its tokenization: lm-eval's
  context/continuation split (trailing whitespace of the context moves to the
  continuation; continuation ids = ``encode(context + continuation)`` after
  ``encode(context)``), its BOS rule (``add_bos_token``, no second BOS on text
  that starts with one), the empty-context rule (``prefix_token_id`` as the
  context), left truncation to ``max_length + 1`` tokens, and the rolling
  windows of ``loglikelihood_rolling``. Only ``_loglikelihood_tokens`` (token
  ids in, ``(log-likelihood, is_greedy)`` out) is replaced.
* ``is_greedy``: whether every continuation token is the argmax of its
  position's logits (``HFLM``'s ``logits.argmax(-1) == cont``), read from the
  logits the engine already computes for the log-probabilities.
* ``generate_until`` is ``HFLM``'s own (Hugging Face ``generate`` on the
  probe-loaded model, the same stop sequences and ``gen_kwargs``), so
  generated texts are those of ``--model hf`` by construction. Generation has
  no shared-prefix scoring to gain from the Scorer.

Numbers: log-likelihoods are float32 log-softmaxes of the same hidden states,
computed with a KV cache over shared prefixes; against ``HFLM`` in float32
they agree to float32 rounding (~1e-6 per token; tests assert 1e-4). In
bfloat16 ``HFLM`` takes its log-softmax in bfloat16 while probe's is in
float32 (``docs/lm_eval.md``).

>>> import lm_eval                                                       # doctest: +SKIP
>>> from probe.integrations.lm_eval import ProbeLM                       # doctest: +SKIP
>>> out = lm_eval.simple_evaluate(model=ProbeLM("smollm2"), tasks=["arc_easy"], limit=10)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Iterator

try:
    from lm_eval import utils as lm_utils
    from lm_eval.api.registry import model_registry
    from lm_eval.models.huggingface import HFLM
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "probe's lm-eval backend needs lm-evaluation-harness: pip install 'probe[lm-eval]' "
        f"(or pip install 'lm-eval>=0.4.13,<0.5'); import failed: {exc}"
    ) from exc


import torch
from accelerate import Accelerator, InitProcessGroupKwargs

from probe.models.fingerprint import model_fingerprint
from probe.runs.shard import detect
from probe.scoring.cache import ENGINE_VERSION, ScoreCache
from probe.scoring.engine import RowOutput
from probe.scoring.requests import ContinuationRequest
from probe.scoring.scorer import Scorer
from probe.scoring.tokens import Encoded, Sequence

__all__ = ["ProbeLM", "MODEL_NAME", "register"]

#: The name ``ProbeLM`` is registered under in lm-eval's model registry.
MODEL_NAME = "probe"

#: HFLM constructor arguments that keep their meaning with a model object passed in
#: (the rest load a model, which probe.models.load_model does here).
_HFLM_ARGS = frozenset({
    "max_length", "add_bos_token", "prefix_token_id", "truncation", "think_end_token",
    "enable_thinking", "chat_template_args", "softmax_dtype", "mixed_precision_dtype",
})
#: HFLM arguments with nothing to do here: scoring keeps no logits cache, and the tokenizer is the one
#: load_model loaded. (``parallelize`` becomes ``device_map="auto"``; ``backend`` must be causal.)
_IGNORED_ARGS = frozenset({"logits_cache", "use_fast_tokenizer", "parallelize", "backend"})


def register() -> None:
    """Register ``ProbeLM`` as lm-eval model ``probe`` (``--model probe``); idempotent."""
    if model_registry.get(MODEL_NAME, None) is not ProbeLM:
        model_registry.register(MODEL_NAME)(ProbeLM)


class _TokenScorer(Scorer):
    """A Scorer whose requests arrive already tokenized (lm-eval tokenized them): ``encode``
    returns the prepared :class:`Encoded` of a request id instead of applying probe's joining rule."""

    def __init__(self, lm: Any, **kwargs: Any) -> None:
        # the engine keeps each scored position's argmax token (HFLM's is_greedy compares the continuation)
        super().__init__(lm, keep_greedy=True, **kwargs)
        self.prepared: dict[str, Encoded] = {}

    def encode(self, request: Any) -> Encoded:
        return self.prepared[request.id]


def _check_arguments(kwargs: dict[str, Any], device_map: str | None) -> str | None:
    """Refuse model arguments ProbeLM does not take (a ValueError naming them); the device map to load with
    (HFLM's ``parallelize=True`` is a ``device_map="auto"`` load)."""
    unknown = set(kwargs) - _HFLM_ARGS - _IGNORED_ARGS
    if unknown:
        raise ValueError(f"ProbeLM: unknown model argument(s) {sorted(unknown)}; probe's model arguments: "
                         "pretrained, device, dtype, batch_size, score_batch_size, token_budget, score_cache, "
                         "share_prefixes, load_in_8bit, load_in_4bit, device_map, trust_remote_code, revision, "
                         f"attn_implementation, and HFLM's {sorted(_HFLM_ARGS)}")
    if str(kwargs.get("backend", "default")) not in ("default", "causal"):
        raise ValueError(f"ProbeLM scores causal language models only, not backend={kwargs['backend']!r}")
    if _flag(kwargs.get("parallelize", False)) and device_map is None:
        return "auto"
    return device_map


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Silence one logger's warnings (HFLM warns about being given a model object, which is what we do)."""
    log = logging.getLogger(name)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


class ProbeLM(HFLM):
    """An lm-eval model whose log-likelihoods come from probe's Scorer (prefix tree, score cache).

    Parameters
    ----------
    pretrained:
        what :func:`probe.models.load_model` takes (a built-in name such as
        ``smollm2``, a ``.gguf`` file, a local model directory, a hub id), or an
        already loaded :class:`probe.models.LoadedModel`.
    device, dtype, load_in_8bit, load_in_4bit, device_map, trust_remote_code, revision, attn_implementation:
        passed to ``load_model`` (``device``/``dtype`` ``None`` mean ``auto``).
    batch_size:
        lm-eval's batch size: sequences per ``generate`` call (``int`` or ``auto``).
    score_batch_size, token_budget:
        most rows and padded tokens per scoring forward pass (the Scorer's; an
        out-of-memory error halves the rows for the rest of the run). ``auto``
        (the default, as for ``probe run``): 16 rows / 8192 tokens on the CPU,
        sized from free memory on a GPU (:func:`probe.scoring.engine.memory.plan`).
    score_cache:
        a path: scores (and greedy flags) kept in a :class:`probe.scoring.cache.ScoreCache`
        keyed on the model fingerprint and exact token ids, so a rerun scores only new rows.
    share_prefixes:
        ``False`` runs each row on its own (the check that sharing changes nothing).
    **kwargs:
        ``HFLM`` options that apply to a loaded model: ``max_length``,
        ``add_bos_token``, ``prefix_token_id``, ``truncation``, ``think_end_token``,
        ``enable_thinking``, ``chat_template_args``, ``mixed_precision_dtype``
        (generation only), ``softmax_dtype`` (generation only; scores are always
        float32 log-softmaxes).
    """

    def __init__(
        self,
        pretrained: Any = "smollm2",
        device: str | None = None,
        dtype: str | None = None,
        batch_size: int | str | None = 1,
        max_batch_size: int | None = 64,
        score_batch_size: int | str = "auto",
        token_budget: int | str = "auto",
        score_cache: str | None = None,
        share_prefixes: bool = True,
        load_in_8bit: bool = False,
        load_in_4bit: bool = False,
        device_map: str | None = None,
        trust_remote_code: bool = False,
        revision: str | None = None,
        attn_implementation: str | None = None,
        **kwargs: Any,
    ) -> None:
        device_map = _check_arguments(kwargs, device_map)

        procs = detect()  # under accelerate launch / torchrun: one model copy per process, lm-eval splits the docs
        if procs.distributed and device_map is not None:
            raise ValueError(f"device_map/parallelize spreads one model over all GPUs and cannot be combined with "
                             f"{procs.world_size} processes; use one process for device_map, or one GPU per process")
        if isinstance(pretrained, str):
            from probe.models import load_model
            from probe.scoring.engine.capabilities import check_supported

            lm = load_model(pretrained, device=procs.device(device or "auto"), dtype=dtype or "auto",
                            load_in_8bit=_flag(load_in_8bit), load_in_4bit=_flag(load_in_4bit),
                            device_map=device_map, trust_remote_code=_flag(trust_remote_code),
                            revision=revision, attn_implementation=attn_implementation, check_config=check_supported)
        elif hasattr(pretrained, "model") and hasattr(pretrained, "tokenizer"):
            lm = pretrained
        else:
            raise TypeError("ProbeLM: pretrained must be a model name/path or a probe.models.LoadedModel, "
                            f"got {type(pretrained).__name__}")
        self.probe_model = lm
        hf_args = {k: v for k, v in kwargs.items() if k in _HFLM_ARGS}
        with _quiet("lm_eval.models.huggingface"):
            super().__init__(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=batch_size or 1,
                             max_batch_size=max_batch_size, **hf_args)
        if procs.distributed:
            self._join_processes(procs)
        self.pretrained = getattr(lm, "name", None) or str(pretrained)  # results/model_info name, not the object
        self.revision = getattr(lm, "revision", None) or "main"
        cache = fingerprint = None
        if score_cache:
            fingerprint = model_fingerprint(lm, ENGINE_VERSION)
            cache = ScoreCache(score_cache, fingerprint)
        self.scorer = _TokenScorer(lm, batch_size=_int_or_auto(score_batch_size), token_budget=_int_or_auto(token_budget),
                                   share_prefixes=_flag(share_prefixes), cache=cache, fingerprint=fingerprint)

    def _join_processes(self, procs: Any) -> None:
        """Data parallelism as lm-eval's ``HFLM`` does it under ``accelerate launch``: rank and world size from
        an ``Accelerator``, so lm-eval's evaluator gives each process its share of the documents and gathers
        the results on rank 0. (HFLM turns this off for an already loaded model, as probe passes it, with a
        warning lm-eval's logging hides: every process would run every request.)"""

        accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(weeks=52))])
        if accelerator.num_processes != procs.world_size:
            raise ValueError(f"WORLD_SIZE={procs.world_size} but accelerate sees {accelerator.num_processes} "
                             "process(es); start `probe lm-eval` with accelerate launch (or torchrun) so each "
                             "process gets its share, not every request")
        self.accelerator = accelerator
        self._rank = accelerator.process_index
        self._world_size = accelerator.num_processes

    # -- scoring -------------------------------------------------------------------
    def _loglikelihood_tokens(
        self,
        requests: list[tuple[Any, list[int], list[int]]],
        disable_tqdm: bool = False,
        override_bs: int | None = None,
    ) -> list[tuple[float, bool]]:
        """``(log-likelihood, is_greedy)`` of each ``(key, context ids, continuation ids)``, as ``HFLM`` computes it:
        the input is ``(context + continuation)[-(max_length + 1):][:-1]`` and the continuation is scored."""
        rows: list[tuple[tuple[int, ...], int]] = []
        for _, context, continuation in requests:
            if not context or not continuation:
                raise ValueError("lm-eval request with an empty context or continuation after tokenization "
                                 f"(context {len(context)} tokens, continuation {len(continuation)} tokens)")
            if len(continuation) > self.max_length:
                raise ValueError(f"a continuation of {len(continuation)} tokens exceeds max_length {self.max_length}")
            ids = tuple((list(context) + list(continuation))[-(self.max_length + 1):])  # HFLM's left truncation
            rows.append((ids, len(ids) - len(continuation)))
        scored = self._score_rows(rows, progress=not disable_tqdm)
        out = [scored[r] for r in rows]
        for (key, _, _), answer in zip(requests, out):
            if key is not None:  # rolling windows have no key; loglikelihood_rolling caches per document
                self.cache_hook.add_partial("loglikelihood", key, answer)
        return out

    def _score_rows(self, rows: list[tuple[tuple[int, ...], int]], progress: bool = False
                    ) -> dict[tuple[tuple[int, ...], int], tuple[float, bool]]:
        """Score unique rows ``(ids, score_from)`` in one Scorer call (one prefix tree)."""
        unique = list(dict.fromkeys(rows))
        # HFLM feeds ids[:-1] (the last token is only a target); a row of max_length + 1 tokens
        # would make the engine run a position past the window, so such rows run as HFLM runs them
        too_long = [r for r in unique if len(r[0]) > self.max_length]
        result = {r: self._plain_row(*r) for r in too_long}
        todo = [r for r in unique if len(r[0]) <= self.max_length]
        if not todo:
            return result
        scorer = self.scorer
        scorer.engine.greedy.clear()
        reqs = self._prepare(todo)
        results = scorer.score(reqs, progress=progress)
        greedy = dict(scorer.engine.greedy)
        missing = [r for r in todo if r not in greedy]  # rows the score cache answered
        if scorer.cache is not None:
            greedy.update(self._cached_greedy(missing))
            new = {r: greedy[r] for r in todo if r in scorer.engine.greedy}
            scorer.cache.put_many({_greedy_key(r): _greedy_value(g) for r, g in new.items()})
            missing = [r for r in todo if r not in greedy]
            if missing:  # scores cached by another probe command, without greedy flags: run them once more
                cache, scorer.cache = scorer.cache, None
                try:
                    scorer.engine.greedy.clear()
                    scorer.score(self._prepare(missing), progress=progress)
                finally:
                    scorer.cache = cache
                again = dict(scorer.engine.greedy)
                cache.put_many({_greedy_key(r): _greedy_value(again[r]) for r in missing})
                greedy.update(again)
        for (ids, score_from), res in zip(todo, results):
            cont = ids[score_from:]
            argmax = greedy[(ids, score_from)]
            if len(argmax) != len(cont):
                raise RuntimeError(f"probe.integrations.lm_eval: {len(argmax)} greedy tokens for a continuation "
                                   f"of {len(cont)}")
            result[(ids, score_from)] = (float(res.logprobs[0]), tuple(argmax) == tuple(cont))
        return result

    def _prepare(self, rows: list[tuple[tuple[int, ...], int]]) -> list[ContinuationRequest]:
        """One continuation request per row, its token ids fixed (the Scorer's encode returns them)."""
        prepared = self.scorer.prepared
        prepared.clear()
        reqs = []
        for i, (ids, score_from) in enumerate(rows):
            r = ContinuationRequest(id=f"lm-eval-{i}", prompt="<token ids>", options=("<token ids>",), space="none")
            prepared[r.id] = Encoded(r, (Sequence(ids=ids, score_from=score_from),), score_from, byte_counts=(0,))
            reqs.append(r)
        return reqs

    def _cached_greedy(self, rows: list[tuple[tuple[int, ...], int]]) -> dict:
        cache = self.scorer.cache
        assert cache is not None
        found = cache.get_many(_greedy_key(r) for r in rows)
        return {(k[0], -1 - k[1]): tuple(int(t) for t in v.token_logprobs) for k, v in found.items()}

    @torch.inference_mode()
    def _plain_row(self, ids: tuple[int, ...], score_from: int) -> tuple[float, bool]:
        """One row run as HFLM runs it (no cache, the whole window): for rows at the context limit."""
        inp = torch.tensor([ids[:-1]], dtype=torch.long, device=self.device)
        logits = self.model(inp).logits[0, score_from - 1 :].float()
        lp = torch.log_softmax(logits, dim=-1)
        cont = torch.tensor(ids[score_from:], dtype=torch.long, device=lp.device)
        ll = lp.gather(-1, cont[:, None]).sum().item()
        return float(ll), bool((lp.argmax(dim=-1) == cont).all())

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """``HFLM``'s rolling log-likelihood (the same disjoint windows of at most ``max_length`` tokens,
        the first conditioned on ``prefix_token_id``), all windows of all documents in one Scorer call."""
        windows: list[tuple[Any, list[int], list[int]]] = []
        counts = []
        for (string,) in (r.args for r in requests):
            doc = [(None, *w) for w in map(lm_utils.make_disjoint_window, lm_utils.get_rolling_token_windows(
                token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                max_seq_len=self.max_length, context_len=1))]
            windows += doc
            counts.append(len(doc))
        lls = self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)
        out, i = [], 0
        for req, n in zip(requests, counts):
            total = sum(ll for ll, _ in lls[i : i + n])  # summed in window order, as HFLM does
            i += n
            out.append(total)
            self.cache_hook.add_partial("loglikelihood_rolling", (req.args[0],), total)
        return out

    # -- provenance ------------------------------------------------------------------
    def get_model_info(self) -> dict:
        """What lm-eval records under ``config`` in its results JSON: probe's model provenance (no hub lookup)."""
        lm = self.probe_model
        info = lm.info() if hasattr(lm, "info") else {}
        return {
            "model_num_parameters": sum(p.numel() for p in self.model.parameters()),
            "model_dtype": str(getattr(self.model, "dtype", "")),
            "model_revision": self.revision,
            "model_sha": info.get("file_sha256") or "",
            "probe_model": info,
            "probe_scorer": {"score_batch_size": self.scorer.batch_size, "token_budget": self.scorer.token_budget,
                             "share_prefixes": self.scorer.share_prefixes,
                             "score_cache": str(self.scorer.cache.path) if self.scorer.cache else None},
        }


def _greedy_key(row: tuple[tuple[int, ...], int]) -> tuple[tuple[int, ...], int, tuple[int, ...]]:
    """The score-cache key holding a row's argmax tokens: a negative ``score_from`` no real row has."""
    ids, score_from = row
    return (ids, -1 - score_from, ())


def _greedy_value(argmax: tuple[int, ...]) -> Any:
    return RowOutput({}, [float(t) for t in argmax], True)  # token ids are exact in float64


def _int_or_auto(value: Any) -> Any:
    """A size argument: an integer, or ``auto`` where the Scorer accepts it (sized from free memory)."""
    return "auto" if str(value).strip().lower() == "auto" else int(value)


def _flag(value: Any) -> bool:
    """A boolean model argument that may arrive as a string from lm-eval's command line."""
    if isinstance(value, str):
        if value.strip().lower() in ("1", "true", "yes", "on"):
            return True
        if value.strip().lower() in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"ProbeLM: not a boolean: {value!r}")
    return bool(value)


if __name__ == "__main__":
    # `python -m probe.integrations.lm_eval --model probe --model_args pretrained=smollm2 --tasks ...`:
    # lm-eval's own command line with `probe` registered (lm-eval 0.4 finds models by name only,
    # never through installed entry points). The importable module registers its class, not this copy's.
    from lm_eval.__main__ import cli_evaluate

    import probe.integrations.lm_eval  # noqa: F401

    cli_evaluate()
else:
    register()
