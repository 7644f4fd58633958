"""A paper's whole sampler, per path: penalties, temperature, top-k, top-p and min-p.

A :class:`SamplerChain` names every setting a sampled generation used; from
full-vocabulary logits for one or many paths (``[n, vocab]``, any float dtype,
any device) and each path's :class:`TokenHistory`, :func:`step_distribution`
gives the exact per-step distribution the sampler draws from, vectorised over
the batch (rows may carry different chains). The arithmetic runs in float64.

**Order of operations** (``order="transformers"``, the default), as
``GenerationMixin._get_logits_processor`` builds the list in transformers
(``generation/utils.py``; 5.23: penalty at ~line 1466, warpers at ~1596-1620):

1. penalties on the raw logits: the **repetition penalty**
   (``RepetitionPenaltyLogitsProcessor``, ``generation/logits_process.py``):
   every token id present in the path so far, **prompt and generated alike**
   (all ids the model was given, special tokens included; ``generate`` skips
   only left padding), counted once, gets ``logit * r`` if the logit is
   negative, else ``logit / r``; then the OpenAI **frequency and presence
   penalties** on the **generated** tokens only (OpenAI API reference,
   "Parameter details": ``mu[j] - c[j] * frequency_penalty - (c[j] > 0) *
   presence_penalty``, ``c[j]`` = how often token ``j`` was sampled before the
   current position). transformers has no frequency / presence penalty; like
   vLLM (``apply_penalties``: repetition, then frequency, then presence) they
   act on the raw logits, before the temperature;
2. **temperature**: ``logits / T`` (``TemperatureLogitsWarper``);
3. **top-k** (``TopKLogitsWarper``): a token is kept when its score is at least
   the k-th largest, so tokens tied with the k-th are all kept; ``top_k`` at
   least the vocabulary keeps everything; ``0`` is off;
4. **top-p** (``TopPLogitsWarper``) on the softmax of what top-k kept: the
   tokens ranked by score, descending, are kept up to and including the first
   at which the kept mass reaches ``top_p`` (a token is kept iff the mass ranked
   strictly before it is ``< top_p``; transformers' ascending form
   ``cumsum <= 1 - top_p`` removed is the same set). **Ties** are ranked by the
   lower token id first. transformers leaves the order of tied tokens to
   ``torch.sort``, which is not stable: on the CPU it kept the higher ids of a
   5-token tie and the lower ids of a 5000-token tie (checked on torch 2.13), so
   no fixed rule can match it; probe's rule is the one
   :mod:`probe.scoring.sampler.sampling` states;
5. **min-p** (``MinPLogitsWarper``, after top-p): a token is removed when its
   probability under what is left is below ``min_p`` times the top token's.

``order="vllm"`` is vLLM's V1 sampler (``vllm/v1/sample/sampler.py``): the same
penalties, temperature, then min-p on the whole tempered distribution, then
top-k and top-p (same rules as transformers'). The two orders differ only when
min-p is combined with top-k or top-p.

The distribution is ``softmax`` of the final scores: probability exactly 0
(log-probability ``-inf``) outside the kept set. The top token is always kept.

>>> import torch
>>> chain = SamplerChain(temperature=1.0, repetition_penalty=2.0)
>>> history = TokenHistory.from_ids(prompts=[[0]], generated=[[]])
>>> [round(p, 4) for p in step_distribution(torch.tensor([[2.0, 1.0]]), chain, history).probs[0].tolist()]
[0.5, 0.5]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Iterable, Mapping, Sequence

import torch
from transformers import GenerationConfig

from probe.scoring.sampler.sampling import SamplingSpec
from probe.scoring.sampler.steps import Params, penalised, truncated

ORDERS = ("transformers", "vllm")


@dataclass(frozen=True)
class SamplerChain:
    """Every setting of one sampler. Defaults switch a step off (``top_k=0``, ``min_p=0``, penalties 1 / 0).

    ``temperature > 0``; ``0 < top_p <= 1``; ``top_k >= 0``; ``0 <= min_p <= 1``;
    ``repetition_penalty > 0``; frequency / presence penalties any finite number.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    order: str = "transformers"

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name == "order":
                continue
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"SamplerChain: {f.name} must be a finite number, got {value!r}")
            if f.name == "top_k":
                if value != int(value) or value < 0:
                    raise ValueError(f"SamplerChain: top_k must be an integer >= 0 (0 = off), got {value!r}")
                object.__setattr__(self, f.name, int(value))
            else:
                object.__setattr__(self, f.name, float(value))
        checks = (("temperature", self.temperature > 0, "> 0 (greedy decoding is the argmax of the exact scores)"),
                  ("top_p", 0 < self.top_p <= 1, "in (0, 1]"), ("min_p", 0 <= self.min_p <= 1, "in [0, 1]"),
                  ("repetition_penalty", self.repetition_penalty > 0, "> 0"))
        for name, ok, rule in checks:
            if not ok:
                raise ValueError(f"SamplerChain: {name} must be {rule}, got {getattr(self, name)!r}")
        if self.order not in ORDERS:
            raise ValueError(f"SamplerChain: order must be one of {', '.join(ORDERS)}, got {self.order!r}")

    # -- what the chain needs ------------------------------------------------------------------------
    @property
    def uses_history(self) -> bool:
        """Whether the distribution depends on the tokens so far (any penalty)."""
        return self.uses_prompt or self.frequency_penalty != 0 or self.presence_penalty != 0

    @property
    def uses_prompt(self) -> bool:
        """Whether the prompt's tokens count (the repetition penalty does; the OpenAI penalties do not)."""
        return self.repetition_penalty != 1

    @property
    def truncates(self) -> bool:
        """Whether any step can cut tokens (top-k, top-p or min-p)."""
        return self.top_k > 0 or self.top_p < 1 or self.min_p > 0

    def steps(self) -> tuple[str, ...]:
        """The operations this chain applies, in order (steps left at their neutral value are skipped)."""
        out = [n for n, on in (("repetition_penalty", self.repetition_penalty != 1),
                               ("frequency_penalty", self.frequency_penalty != 0),
                               ("presence_penalty", self.presence_penalty != 0),
                               ("temperature", self.temperature != 1)) if on]
        cuts = (("top_k", self.top_k > 0), ("top_p", self.top_p < 1), ("min_p", self.min_p > 0))
        if self.order == "vllm":
            cuts = cuts[2:] + cuts[:2]
        return tuple(out + [n for n, on in cuts if on])

    # -- names and records ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every field (a record of the chain; :meth:`from_dict` reads it back)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, value: Mapping[str, Any], where: str = "sampler") -> "SamplerChain":
        """A chain from a mapping (YAML, JSON); fields left out keep their defaults."""
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: a sampler is a mapping of {', '.join(f.name for f in fields(cls))}, "
                             f"got {value!r}")
        unknown = sorted(set(value) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"{where}: unknown sampler setting {unknown[0]!r} "
                             f"(known: {', '.join(f.name for f in fields(cls))})")
        try:
            return cls(**value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None

    def describe(self) -> str:
        """A short human-readable name: ``"T = 0.7, top-p 0.9"`` (only the steps the chain applies)."""
        parts = [f"T = {self.temperature:g}"]
        parts += [f"{label} {getattr(self, name):g}" for name, label in
                  (("top_k", "top-k"), ("top_p", "top-p"), ("min_p", "min-p"),
                   ("repetition_penalty", "repetition penalty"), ("frequency_penalty", "frequency penalty"),
                   ("presence_penalty", "presence penalty")) if name in self.steps()]
        if self.order != "transformers" and self.min_p > 0 and (self.top_k > 0 or self.top_p < 1):
            parts.append(f"{self.order} order")
        return ", ".join(parts)

    # -- other forms of the same sampler -------------------------------------------------------------
    @classmethod
    def from_spec(cls, spec: Any) -> "SamplerChain":
        """The chain of a :class:`~probe.scoring.sampler.sampling.SamplingSpec` (temperature, top-p): same numbers."""
        return cls(temperature=spec.temperature, top_p=spec.top_p)

    def to_spec(self) -> Any:
        """The :class:`~probe.scoring.sampler.sampling.SamplingSpec` of a chain that only sets temperature and top-p."""

        extra = [s for s in self.steps() if s not in ("temperature", "top_p")]
        if extra:
            raise ValueError(f"SamplerChain: {self.describe()} is not a SamplingSpec (it also sets {', '.join(extra)})")
        return SamplingSpec(self.temperature, self.top_p)

    def generate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for transformers' ``generate`` that sample with this chain.

        Every warper is set explicitly (off ones at their neutral value), so neither
        ``generate``'s own default ``top_k=50`` nor the model's ``generation_config.json``
        adds a step; a config's ``sequence_bias``, ``bad_words_ids`` or suppressed tokens
        are not overridden. transformers has no frequency / presence penalty and applies
        min-p after top-p: a chain with either penalty, or in vLLM's order with min-p and
        another cut, is refused.
        """

        if self.frequency_penalty != 0 or self.presence_penalty != 0:
            raise ValueError(f"SamplerChain: transformers' generate has no frequency / presence penalty "
                             f"({self.describe()})")
        if self.order == "vllm" and self.min_p > 0 and (self.top_k > 0 or self.top_p < 1):
            raise ValueError("SamplerChain: transformers' generate applies min-p after top-k / top-p, "
                             "not in vLLM's order")
        out = {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
               "min_p": self.min_p, "repetition_penalty": self.repetition_penalty, "typical_p": 1.0,
               "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "no_repeat_ngram_size": 0}
        known = GenerationConfig()
        return {k: v for k, v in out.items() if hasattr(known, k)}


@dataclass(frozen=True)
class SamplerPreset:
    """A published sampler as its authors ran it: the chain, the token budget and where each number comes from."""

    name: str
    chain: SamplerChain
    max_new_tokens: int | None
    models: str
    source: str
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sampler": self.chain.to_dict(), "max_new_tokens": self.max_new_tokens,
                "models": self.models, "source": self.source, "notes": list(self.notes)}


class TokenHistory:
    """Each path's tokens so far, as the penalties count them, for a batch of ``n`` paths.

    ``seen``: ``[n, A]`` token ids present in the path (prompt and generated; the
    repetition penalty's set); ``generated``: ``[n, B]`` generated ids with their
    ``counts`` (the OpenAI penalties' ``c[j]``). Padding is ``-1``; repeated ids are
    fine (a set, and counts that add up). Ids at or past the logits' vocabulary are
    ignored, as transformers does. Build with :meth:`from_ids` or :meth:`from_counts`;
    :meth:`extend` and :meth:`select` follow paths step by step.
    """

    def __init__(self, seen: Any, generated: Any, counts: Any) -> None:
        if (seen.dim() != 2 or generated.dim() != 2 or counts.shape != generated.shape
                or seen.shape[0] != generated.shape[0]):
            raise ValueError("TokenHistory: seen [n, A], generated [n, B] and counts [n, B] must agree")
        self.seen, self.generated, self.counts = seen, generated, counts

    def __len__(self) -> int:
        return int(self.seen.shape[0])

    @property
    def device(self) -> Any:
        return self.seen.device

    @classmethod
    def from_ids(cls, prompts: Sequence[Sequence[int]], generated: Sequence[Sequence[int]] | None = None,
                 device: Any = None) -> "TokenHistory":
        """From each path's prompt ids (every id the model was given) and generated ids."""
        generated = [()] * len(prompts) if generated is None else generated
        if len(generated) != len(prompts):
            raise ValueError(f"TokenHistory: {len(prompts)} prompts but {len(generated)} generated paths")
        gen = [list(g) for g in generated]
        seen = [list(p) + g for p, g in zip(prompts, gen)]
        return cls(_padded(seen, device), _padded(gen, device), _padded([[1] * len(g) for g in gen], device, 0))

    @classmethod
    def from_counts(cls, prompt_tokens: Sequence[Iterable[int]], generated_counts: Sequence[Mapping[int, int]],
                    device: Any = None) -> "TokenHistory":
        """From each path's prompt tokens (any iterable, a set will do) and its generated token counts."""
        if len(generated_counts) != len(prompt_tokens):
            raise ValueError(f"TokenHistory: {len(prompt_tokens)} prompts but {len(generated_counts)} count maps")
        gen = [[t for t, c in m.items() if c > 0] for m in generated_counts]
        counts = [[m[t] for t in g] for m, g in zip(generated_counts, gen)]
        seen = [list(p) + g for p, g in zip(prompt_tokens, gen)]
        return cls(_padded(seen, device), _padded(gen, device), _padded(counts, device, 0))

    def extend(self, tokens: Any) -> "TokenHistory":
        """The histories after each path generates ``tokens[i]`` (``[n]`` ids)."""

        col = torch.as_tensor(tokens, dtype=torch.long, device=self.device).reshape(-1, 1)
        if col.shape[0] != len(self):
            raise ValueError(f"TokenHistory.extend: {col.shape[0]} tokens for {len(self)} paths")
        return TokenHistory(torch.cat([self.seen, col], 1), torch.cat([self.generated, col], 1),
                            torch.cat([self.counts, torch.ones_like(col)], 1))

    def select(self, rows: Any) -> "TokenHistory":
        """The histories of ``rows`` (indices; repeat one to branch a path)."""

        idx = torch.as_tensor(rows, dtype=torch.long, device=self.device)
        return TokenHistory(self.seen[idx], self.generated[idx], self.counts[idx])

    def to(self, device: Any) -> "TokenHistory":
        return TokenHistory(self.seen.to(device), self.generated.to(device), self.counts.to(device))


@dataclass(frozen=True)
class StepDistribution:
    """One step's sampling distribution for ``n`` paths (float64, ``[n, vocab]``).

    ``probs``: the distribution (exactly 0 outside the kept set; for a chain that
    only sets temperature and top-p, bit-identical to
    :func:`~probe.scoring.sampler.sampling.sampling_distribution`); ``logprobs``: the same in
    log space (``-inf`` outside; no underflow at low temperatures); ``kept``: the kept
    set; ``kept_logmass``: log of the mass the kept set has under the penalised,
    tempered softmax before any cut (0 when nothing is cut).
    """

    probs: Any
    logprobs: Any
    kept: Any
    kept_logmass: Any

    @property
    def kept_mass(self) -> Any:
        return self.kept_logmass.exp()

    @property
    def n_kept(self) -> Any:
        return self.kept.sum(dim=-1)

    def children(self, row: int, min_prob: float = 0.0) -> tuple[list[int], list[float]]:
        """Row ``row``'s kept tokens with probability ``>= min_prob`` and ``> 0`` (a kept token's
        probability can underflow at low temperatures): ids and probabilities, most probable first
        (ties: lower id first)."""

        p = self.probs[row]
        ids = (self.kept[row] & (p >= min_prob) & (p > 0)).nonzero()[:, 0]
        vals = p[ids]
        order = torch.sort(vals, descending=True, stable=True).indices  # ids ascend: ties keep lower id first
        return ids[order].tolist(), vals[order].tolist()


def step_distribution(logits: Any, chain: SamplerChain | Sequence[SamplerChain],
                      history: TokenHistory | None = None) -> StepDistribution:
    """The sampling distribution of the next token for ``n`` paths.

    ``logits``: ``[n, vocab]`` raw next-token logits (or ``[vocab]`` for one path);
    ``chain``: one chain for every row or one per row; ``history``: each path's
    tokens so far, needed when a chain has a penalty. No Python loop over the
    vocabulary or the rows. A row with a NaN or ``+inf`` logit, or no finite one,
    is refused.
    """

    z = logits.double()
    if z.dim() == 1:
        z = z.unsqueeze(0)
    n, vocab = z.shape
    chains = _per_row(chain, n)
    bad = ~torch.isfinite(z.amax(dim=-1))  # amax is NaN with a NaN, +inf with a +inf, -inf with no finite logit
    if bool(bad.any()):
        raise ValueError(f"step_distribution: row {int(bad.nonzero()[0, 0])} has a NaN or +inf logit, "
                         "or no finite one")
    par = Params(chains, z.device)
    z = penalised(z, par, chains, history)
    z = z / par.temperature
    tempered = z
    cut = torch.zeros(n, dtype=torch.bool, device=z.device)
    if any(c.truncates for c in chains):
        cut = par.truncates
        for order in ORDERS:
            rows = [i for i, c in enumerate(chains) if c.order == order and c.truncates]
            if len(rows) == n:
                z = truncated(z, par, order)
            elif rows:
                idx = torch.tensor(rows, device=z.device)
                z = z.index_copy(0, idx, truncated(z[idx], par.select(idx), order))
    kept = z > -math.inf
    p = torch.softmax(tempered, dim=-1)
    masked = torch.where(kept, p, torch.zeros_like(p))
    probs = torch.where(cut[:, None], masked / masked.sum(dim=-1, keepdim=True), p)
    lse = torch.logsumexp(z, dim=-1, keepdim=True)
    logprobs = z - lse
    kept_logmass = (lse - torch.logsumexp(tempered, dim=-1, keepdim=True))[:, 0]
    return StepDistribution(probs, logprobs, kept, kept_logmass)


def processed_logits(logits: Any, chain: SamplerChain | Sequence[SamplerChain],
                     history: TokenHistory | None = None) -> Any:
    """The final scores (``[n, vocab]`` float64; ``-inf`` outside the kept set): what transformers'
    processors return for the chain, up to a constant per row. Their softmax is the distribution."""

    d = step_distribution(logits, chain, history)
    return torch.where(d.kept, d.logprobs, torch.full_like(d.logprobs, -math.inf))


def sample_next(dist: StepDistribution | Any, generator: Any) -> Any:
    """One token per row drawn from ``dist`` (a :class:`StepDistribution` or ``[n, vocab]`` probabilities).

    ``generator``: one ``torch.Generator`` (the rows draw in order from its stream) or
    one per row (each row's draw depends on nothing else in the batch). A row draws
    one float64 uniform ``u`` and inverts its CDF in token-id order at ``u`` times the
    total, as :mod:`probe.scoring.generate` samples, so the same generator stream
    gives the same tokens; the pick never lands on a token of probability 0.
    """

    probs = dist.probs if isinstance(dist, StepDistribution) else dist
    if probs.dim() == 1:
        probs = probs.unsqueeze(0)
    n = probs.shape[0]
    if isinstance(generator, torch.Generator):
        u = torch.rand(n, generator=generator, dtype=torch.float64, device=generator.device)
    else:
        gens = list(generator)
        if len(gens) != n:
            raise ValueError(f"sample_next: {len(gens)} generators for {n} rows")
        u = torch.cat([torch.rand(1, generator=g, dtype=torch.float64, device=g.device).cpu() for g in gens])
    u = u.to(probs.device)
    cum = torch.cumsum(probs, dim=-1)
    picks = torch.searchsorted(cum, (u * cum[:, -1]).unsqueeze(-1), right=True)[:, 0]
    # u * total can round up to the total: fall back to the last token that has mass
    last = probs.shape[-1] - 1 - torch.argmax((probs.flip(-1) > 0).to(torch.int8), dim=-1)
    return torch.minimum(picks, last)


def sample(logits: Any, chain: SamplerChain | Sequence[SamplerChain], generator: Any,
           history: TokenHistory | None = None) -> Any:
    """Draw the next token of each path: :func:`sample_next` of :func:`step_distribution`."""
    return sample_next(step_distribution(logits, chain, history), generator)


def _per_row(chain: SamplerChain | Sequence[SamplerChain], n: int) -> list[SamplerChain]:
    if isinstance(chain, SamplerChain):
        return [chain] * n
    chains = list(chain)
    if len(chains) != n or not all(isinstance(c, SamplerChain) for c in chains):
        raise ValueError(f"step_distribution: one SamplerChain, or one per row ({n}), expected")
    return chains


def _padded(rows: Sequence[Sequence[int]], device: Any, fill: int = -1) -> Any:
    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), width), fill, dtype=torch.long)
    for i, r in enumerate(rows):
        if len(r):
            out[i, : len(r)] = torch.as_tensor(list(r), dtype=torch.long)
    return out if device is None else out.to(device)
