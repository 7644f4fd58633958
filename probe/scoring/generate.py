"""Generation for chain-of-thought settings (reason first, then score the answer): greedy or sampled.

Both run through the engine's cached extension (:meth:`probe.scoring.engine.Engine.begin`,
:meth:`~probe.scoring.engine.Engine.extend`). Greedy decoding is deterministic. Sampled decoding (``temperature``, nucleus
``top_p``) draws each request's tokens from its own random stream, seeded from
(``seed``, request id) with a process-independent hash, so batch size, request
order, sharding and resume never change a chain. Prompts are left-padded in
batches and each output is cut at the first EOS or stop string.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch
from tqdm.auto import tqdm

from probe.io import stable_hash
from probe.scoring.engine import Engine, left_pad, pad_id_of
from probe.scoring.requests import check_prompt_request
from probe.scoring.sampler.sampling import SamplingSpec, sampling_distribution
from probe.scoring.tokens import wants_special_tokens


@torch.inference_mode()
def greedy_generate(
    lm: Any,
    prompts: Sequence[str],
    max_new_tokens: int = 256,
    batch_size: int = 8,
    stop: Sequence[str] = (),
    progress: bool = False,
) -> list[str]:
    """Greedy continuations of ``prompts`` (rendered strings, as the scorer takes them)."""
    return _generate(lm, prompts, max_new_tokens, batch_size, stop, progress)


@torch.inference_mode()
def sample_generate(
    lm: Any,
    prompts: Sequence[str],
    seeds: Sequence[int],
    temperature: float,
    top_p: float = 1.0,
    max_new_tokens: int = 256,
    batch_size: int = 8,
    stop: Sequence[str] = (),
    progress: bool = False,
) -> list[str]:
    """Sampled continuations of ``prompts``; ``seeds[i]`` seeds prompt ``i``'s own random stream.

    Each step draws from the distribution :func:`probe.scoring.sampler.sampling.sampling_distribution`
    defines (``softmax(logits / T)``, cut to the nucleus, ties by lower token id), by
    inverting its CDF (in token-id order) at one uniform number from the prompt's own CPU
    generator: the draw depends on nothing else in the batch and not on the device.
    """

    if len(seeds) != len(prompts):
        raise ValueError(f"sample_generate: {len(seeds)} seeds for {len(prompts)} prompts")
    spec = SamplingSpec(temperature, top_p)
    return _generate(lm, prompts, max_new_tokens, batch_size, stop, progress,
                     sampler=lambda idx: _RowSampler(spec, [seeds[i] for i in idx]))


class _RowSampler:
    """A logits processor that samples one token per row (each row its own generator) and leaves
    only that token finite, so greedy ``generate`` takes it: HF sampling has one generator per batch."""

    def __init__(self, spec: Any, seeds: Sequence[int]) -> None:
        self.spec = spec
        self.generators = [torch.Generator().manual_seed(int(s) % (1 << 63)) for s in seeds]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        dist = sampling_distribution(scores.float(), self.spec)  # float64, [batch, vocab]
        cum = torch.cumsum(dist, dim=-1)
        # every row draws once per step (finished rows too), so a row's stream never depends on the others
        u = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in self.generators]).to(dist.device)
        picks = torch.searchsorted(cum, (u * cum[:, -1]).unsqueeze(-1), right=True).clamp_(max=dist.shape[-1] - 1)
        out = torch.full_like(scores, -math.inf)
        out.scatter_(-1, picks, 0.0)
        return out


def sample_shared_prefix(lm: Any, prompts: Sequence[str], seeds: Sequence[Sequence[int]], temperature: float,
                         top_p: float = 1.0, max_new_tokens: int = 8) -> list[list[str]]:
    """K sampled continuations per prompt, the prompt's forward pass run once and its KV cache shared.

    ``seeds[i][j]`` seeds sample ``j`` of prompt ``i``; each sample draws from the
    same per-row stream and distribution as :func:`sample_generate` (its row sampler), so a
    sample's text is the one ``sample_generate`` gives for that seed (tested); only the
    prompt's prefill is not repeated K times, which makes K = 20 affordable on a CPU. Each
    text is cut at the first end-of-sequence token. :func:`run_generation` with
    ``share_prefix=True`` (``Runner.generate``) takes this path.
    """

    tok = lm.tokenizer
    engine, config, eos, pad = _decoding(lm)  # the prompt's pass and each step: the engine's extension
    spec = SamplingSpec(temperature, top_p)
    out: list[list[str]] = []
    with torch.inference_mode():
        for prompt, row_seeds in zip(prompts, seeds):
            ids = tuple(tok(prompt, add_special_tokens=wants_special_tokens(tok, prompt))["input_ids"])
            new = _decode(engine, config, [ids], max_new_tokens, eos, pad, _RowSampler(spec, list(row_seeds)),
                          repeat=len(row_seeds))
            out.append([tok.decode(t, skip_special_tokens=True) for t in new])
    return out


def _generate(lm: Any, prompts: Sequence[str], max_new_tokens: int, batch_size: int, stop: Sequence[str],
              progress: bool, sampler: Callable[[list[int]], Any] | None = None) -> list[str]:
    """Batched generation through the engine's extension (:meth:`Engine.begin`, :meth:`Engine.extend`):
    prompts left-padded by the engine's pad rule, one cached step per token, transformers' own logits
    processors for the model's generation config (what its greedy ``generate`` applies), then
    ``sampler(batch indices)`` (None: greedy). Rows that reach an end-of-sequence token take the pad token
    from then on, as ``generate`` does; the batch stops when every row has ended."""
    tok = lm.tokenizer
    engine, config, eos, pad = _decoding(lm)
    results: list[str] = [""] * len(prompts)
    bar = _GenerationBar(len(prompts), max_new_tokens) if progress else None
    # padding would enter a recurrent or state-space state: such a model's batches hold one prompt length each
    for idx, encs in _batches(tok, prompts, batch_size, one_length=bool(engine.capabilities.extend)):
        new = _decode(engine, config, encs, max_new_tokens, eos, pad, sampler(idx) if sampler is not None else None,
                      on_step=bar.step if bar is not None else None)
        for j, i in enumerate(idx):
            text = tok.decode(new[j], skip_special_tokens=True)
            for s in stop:
                if s in text:
                    text = text[: text.index(s)]
            results[i] = text
        if bar is not None:
            bar.batch_done(len(idx))
    if bar is not None:
        bar.close()
    return results


def _batches(tok: Any, prompts: Sequence[str], batch_size: int, one_length: bool = False
             ) -> list[tuple[list[int], list[tuple[int, ...]]]]:
    """Generation's batches: prompt indices, longest text first, ``batch_size`` at a time, with their token ids;
    ``one_length``: each batch's prompts of one token length (no padding)."""
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    ids = {i: tuple(tok(prompts[i], add_special_tokens=wants_special_tokens(tok, prompts[i]))["input_ids"])
           for i in order}
    groups = [order]
    if one_length:
        by_length: dict[int, list[int]] = {}
        for i in order:
            by_length.setdefault(len(ids[i]), []).append(i)
        groups = list(by_length.values())
    return [(g[k : k + batch_size], [ids[i] for i in g[k : k + batch_size]])
            for g in groups for k in range(0, len(g), batch_size)]


class _GenerationBar:
    """The generation stage's bar, in token steps (every row of a batch, every step), so it moves while a
    batch of long generations runs (minutes on a CPU), with the prompts finished beside it. A batch that
    ends early (every row reached its end-of-sequence token) moves the bar past the steps it did not need."""

    def __init__(self, n_prompts: int, max_new_tokens: int) -> None:
        self.n, self.max_new, self.done, self.in_batch = n_prompts, max_new_tokens, 0, 0
        self.bar = tqdm(total=n_prompts * max_new_tokens, desc="generating", unit="tok", leave=False)
        self.bar.set_postfix_str(f"0/{n_prompts} prompts", refresh=False)

    def step(self, rows: int) -> None:
        self.in_batch += rows
        self.bar.update(rows)

    def batch_done(self, rows: int) -> None:
        self.bar.update(rows * self.max_new - self.in_batch)
        self.in_batch = 0
        self.done += rows
        self.bar.set_postfix_str(f"{self.done}/{self.n} prompts")

    def close(self) -> None:
        self.bar.close()


def _decoding(lm: Any) -> tuple[Any, Any, list[int], int]:
    """What decoding ``lm`` needs: an engine (padding with the tokenizer's pad token, else the first
    end-of-sequence id), the generation config (:func:`_greedy_config`) and the end-of-sequence ids."""

    config, eos = _greedy_config(lm.model, lm.tokenizer)
    pad = pad_id_of(lm.tokenizer, default=None)
    pad = pad if pad is not None else (eos[0] if eos else 0)
    return Engine(lm.model, pad_id=pad), config, eos, pad


def _greedy_config(model: Any, tok: Any) -> tuple[Any, list[int]]:
    """``model``'s generation config as its greedy ``generate`` prepares it (None when it has none), and the
    end-of-sequence ids it stops at (else the tokenizer's)."""

    gc = getattr(model, "generation_config", None)
    eos: Any = None
    if not (hasattr(model, "_prepare_special_tokens") and hasattr(model, "_get_logits_processor")):
        gc = None  # not a transformers generation model: no processors, the tokenizer's end-of-sequence
    if gc is not None:
        gc = copy.deepcopy(gc)
        gc.do_sample = False
        model._prepare_special_tokens(gc, True, device=next(model.parameters()).device)
        eos = gc._eos_token_tensor
        eos = eos.flatten().tolist() if eos is not None else None
    if eos is None:
        eos = tok.eos_token_id
    return gc, [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])]


def _decode(engine: Any, config: Any, prompts: list[tuple[int, ...]], max_new_tokens: int, eos: list[int],
            pad: int, sampler: Any, repeat: int = 1, on_step: Callable[[int], None] | None = None) -> list[list[int]]:
    """The new tokens of each prompt (ending at its end-of-sequence token, padded after it), decoded
    greedily after transformers' logits processors for ``config`` (:func:`_greedy_config`) and ``sampler``;
    ``repeat``: rows per prompt, the prompt's pass run once and its cache repeated (consecutive rows);
    ``on_step(rows)``: called after each step with the batch's row count (a progress bar)."""

    ids, _, _ = left_pad(list(prompts), pad)
    processors = None
    if config is not None:  # the list transformers' generate builds (repetition penalty, suppressed tokens, ...)
        processors = engine.model._get_logits_processor(generation_config=config, input_ids_seq_length=ids.shape[1],
                                                        device=engine.device) or None
    ext, logits = engine.begin(prompts)
    if repeat > 1:
        ext.repeat(repeat)
        ids, logits = ids.repeat_interleave(repeat, dim=0), logits.repeat_interleave(repeat, dim=0)
    seqs = ids.to(logits.device)  # what the processors see: the padded prompts and the tokens so far
    done = torch.zeros(seqs.shape[0], dtype=torch.bool, device=logits.device)
    eos_t = torch.tensor(eos, dtype=torch.long, device=logits.device)
    for step in range(max_new_tokens):
        scores = processors(seqs, logits) if processors else logits
        if sampler is not None:
            scores = sampler(seqs, scores)
        pick = torch.where(done, torch.full_like(done, pad, dtype=torch.long), scores.argmax(dim=-1))
        seqs = torch.cat([seqs, pick[:, None]], dim=1)
        done |= torch.isin(pick, eos_t)
        if on_step is not None:
            on_step(seqs.shape[0])
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        logits = engine.extend(ext, pick.tolist())
    return seqs[:, ids.shape[1]:].tolist()


@dataclass(frozen=True)
class GenerationRequest:
    """Generation after a rendered ``prompt`` (chain-of-thought settings), cut at ``stop`` strings.

    ``temperature`` None decodes greedily; otherwise tokens are sampled at that
    temperature within the ``top_p`` nucleus from a stream seeded by
    (``seed``, ``id``) (:func:`generation_seed`), so a chain is reproducible.
    """

    id: str
    prompt: str
    max_new_tokens: int = 1024
    stop: tuple[str, ...] = ()
    group: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False)
    kind: str = field(default="generation", init=False)
    temperature: float | None = None
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_prompt_request("generation", self.id, self.prompt, self.max_new_tokens)
        if self.temperature is not None and not (isinstance(self.temperature, (int, float))
                                                 and not isinstance(self.temperature, bool)
                                                 and math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"generation request {self.id!r}: temperature must be > 0 or None (greedy), "
                             f"got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"generation request {self.id!r}: top_p must be in (0, 1], got {self.top_p!r}")

    @property
    def sampled(self) -> bool:
        return self.temperature is not None

    def settings(self) -> dict[str, Any]:
        """The decoding settings a generation record carries (none for greedy, as before sampling existed)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed} if self.sampled else {}


def generation_seed(seed: int, request_id: str) -> int:
    """The seed of one request's random stream: a process-independent hash of (seed, id)."""
    return stable_hash("generation", seed, request_id)


def run_generation(lm: Any, requests: Sequence[GenerationRequest], batch_size: int = 8,
                   share_prefix: bool = False, progress: bool = False) -> list[str]:
    """Texts for ``requests`` (in order); requests with the same limits, stops and sampling are batched together.
    ``progress``: a bar counting prompts as each batch finishes (a chunk of long generations takes minutes).

    ``share_prefix``: sampled requests with the same prompt (and ``group``) are drawn together from one
    forward pass over the prompt (:func:`sample_shared_prefix`; the same texts as without it, each
    request from its own seeded stream), for many samples of one prompt."""
    out: list[str] = [""] * len(requests)
    by_setting: dict[tuple, list[int]] = {}
    for i, r in enumerate(requests):
        by_setting.setdefault((r.max_new_tokens, r.stop, r.temperature, r.top_p), []).append(i)
    for (max_new, stop, temperature, top_p), idx in by_setting.items():
        prompts = [requests[i].prompt for i in idx]
        if temperature is None:
            texts = greedy_generate(lm, prompts, max_new_tokens=max_new, batch_size=batch_size, stop=stop,
                                    progress=progress)
        else:
            seeds = [generation_seed(requests[i].seed, requests[i].id) for i in idx]
            if share_prefix:
                texts = _shared(lm, [requests[i] for i in idx], seeds, temperature, top_p, max_new, stop)
            else:
                texts = sample_generate(lm, prompts, seeds, temperature, top_p, max_new_tokens=max_new,
                                        batch_size=batch_size, stop=stop, progress=progress)
        for i, t in zip(idx, texts):
            out[i] = t
    return out


def _shared(lm: Any, requests: Sequence[GenerationRequest], seeds: Sequence[int], temperature: float, top_p: float,
            max_new_tokens: int, stop: Sequence[str]) -> list[str]:
    """:func:`sample_shared_prefix` over the requests grouped by (``group``, prompt), texts back in order."""
    rows: dict[tuple, list[int]] = {}
    for i, r in enumerate(requests):
        rows.setdefault((r.group, r.prompt), []).append(i)
    keys = list(rows)
    done = sample_shared_prefix(lm, [p for _, p in keys], [[seeds[i] for i in rows[k]] for k in keys], temperature,
                                top_p, max_new_tokens)
    out = [""] * len(requests)
    for key, texts in zip(keys, done):
        for i, text in zip(rows[key], texts):
            for s in stop:
                if s in text:
                    text = text[: text.index(s)]
            out[i] = text
    return out
