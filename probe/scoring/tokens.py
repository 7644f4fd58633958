"""Turn requests into exact token sequences: the one place that decides how a
label or continuation is joined to its prompt.

The joining rule (``docs/scoring.md``):

1. Separator: ``space="auto"`` inserts one space unless the prompt already
   ends in whitespace; ``"space"`` always; ``"none"`` never. ``"both"`` (labels
   only) scores the bare and the spaced variant and adds their probabilities.
2. Trailing spaces (not newlines) of the prompt move to the start of the
   continuation, as lm-evaluation-harness does, because BPE vocabularies carry
   the space on the following word (" A", not "A").
3. The continuation's tokens are those of ``encode(prompt + continuation)``
   after the tokens of ``encode(prompt)``; if the two disagree on the prompt
   part (a merge across the boundary) the continuation is encoded on its own.
4. A label is scored by its *first* token; labels whose first tokens collide
   are an error, since their probabilities could not be told apart. One
   exception: when *every* label's continuation starts with the same
   whitespace token(s) and they differ right after them (SentencePiece splits
   " 1" into "▁" and "1", so " 1", " 2", " 3" all start with "▁"), that shared
   prefix is scored as part of the sequence and each label by its first token
   after it; its log-probability is added to every label's
   (:func:`shared_prefix`), so the label probabilities stay the exact joint
   ones (``space="both"`` excepted: still an error).
5. A label request with ``forms`` skips rules 1-3: the prompt is tokenized as
   is and each label's probability is summed over the distinct tokens of its
   forms that are one token when encoded alone (others are skipped; a label
   with none is scored by the first token of its first form). Rule 4's
   collision check still applies.

Whether a text gets special tokens (BOS) is a tokenizer rule too
(:func:`wants_special_tokens`); the encoder, the generator and the activation
extractors take it from here, so scoring never depends on :mod:`probe.prompts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from probe.scoring.requests import ContinuationRequest, LabelRequest, PerplexityRequest, Request


def wants_special_tokens(tokenizer: Any, text: str) -> bool:
    """Whether tokenizing ``text`` should add special tokens (BOS).

    Text that already starts with the BOS token (chat templates render it) must
    not get a second one; plain text gets the tokenizer's default.
    """
    bos = getattr(tokenizer, "bos_token", None)
    return not (bos and text.startswith(bos))


def shared_prefix(conts: list[tuple[int, ...]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the tokens every continuation starts with, each one's first token after them) when all of them
    share their first token and differ right after the shared part; ``((), ())`` otherwise.

    >>> shared_prefix([(5, 1), (5, 2), (5, 3)])     # "▁1", "▁2", "▁3" as SentencePiece splits them
    ((5,), (1, 2, 3))
    >>> shared_prefix([(1,), (2,)]), shared_prefix([(5, 1), (5, 1, 9)]), shared_prefix([(5, 1), (6, 2)])
    (((), ()), ((), ()), ((), ()))
    """
    if len(conts) < 2 or len({c[0] for c in conts}) > 1:
        return (), ()
    k = 0
    while all(len(c) > k for c in conts) and len({c[k] for c in conts}) == 1:
        k += 1
    if any(len(c) <= k for c in conts):  # one label is the shared prefix itself: nothing tells them apart
        return (), ()
    after = tuple(c[k] for c in conts)
    return (tuple(conts[0][:k]), after) if len(set(after)) == len(after) else ((), ())


@dataclass(frozen=True)
class Sequence:
    """One token sequence to run and the positions to read.

    ``score_from``: index of the first token whose log-probability is read; its
    logits come from position ``score_from - 1``. For label sequences
    ``score_from == len(ids)`` and ``label_ids`` are read at the last position.
    """

    ids: tuple[int, ...]
    score_from: int
    label_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Encoded:
    request: Request
    sequences: tuple[Sequence, ...]
    n_prompt_tokens: int
    label_variants: tuple[tuple[int, ...], ...] = ()  # per label: the token ids whose probabilities add up
    byte_counts: tuple[int, ...] = ()


class Encoder:
    """Tokenizes requests with a memo for repeated prompts."""

    def __init__(self, tokenizer: Any, max_length: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        self._memo: dict[tuple[str, bool], tuple[int, ...]] = {}
        self.boundary_merges = 0  # continuations encoded on their own (rule 3)

    def ids(self, text: str, add_special_tokens: bool) -> tuple[int, ...]:
        key = (text, add_special_tokens)
        if key not in self._memo:
            if len(self._memo) > 200_000:
                self._memo.clear()
            self._memo[key] = tuple(self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])
        return self._memo[key]

    def _special(self, request: Request, text: str) -> bool:
        flag = request.add_special_tokens
        return wants_special_tokens(self.tokenizer, text) if flag is None else flag

    def join(self, prompt: str, text: str, space: str, special: bool) -> tuple[tuple[int, ...], tuple[int, ...], str]:
        """(prompt ids, continuation ids, continuation text as scored) under the joining rule."""
        sep = " " if space == "space" or (space == "auto" and prompt and not prompt[-1].isspace()) else ""
        cont = sep + text
        stripped = prompt.rstrip(" ")
        if stripped != prompt and stripped:
            cont = prompt[len(stripped):] + cont
            prompt = stripped
        ctx = self.ids(prompt, special) if prompt else ()
        whole = self.ids(prompt + cont, special)
        if whole[: len(ctx)] == ctx and len(whole) > len(ctx):
            return ctx, whole[len(ctx):], cont
        self.boundary_merges += 1
        return ctx, self.ids(cont, False), cont

    def encode(self, request: Request) -> Encoded:
        if isinstance(request, LabelRequest):
            return self._encode_label(request)
        if isinstance(request, ContinuationRequest):
            return self._encode_continuation(request)
        if isinstance(request, PerplexityRequest):
            return self._encode_perplexity(request)
        raise TypeError(f"not a request: {type(request).__name__}")

    def _form_variants(self, r: LabelRequest) -> list[tuple[int, ...]]:
        """Per label, the distinct tokens of its forms that encode to one token on their own."""
        variants = []
        for label, forms in zip(r.labels, r.forms):
            firsts: list[int] = []
            for form in forms:
                ids = self.ids(form, False)
                if len(ids) == 1 and ids[0] not in firsts:  # multi-token forms are skipped, not truncated
                    firsts.append(ids[0])
            if not firsts:  # no one-token form in this vocabulary: the first token of the first form
                firsts.append(self.ids(forms[0], False)[0])
            variants.append(tuple(firsts))
        return variants

    def _encode_label(self, r: LabelRequest) -> Encoded:
        special = self._special(r, r.prompt)
        modes = ("none", "space") if r.space == "both" else (r.space,)
        prompt_ids: tuple[int, ...] | None = None
        variants: list[tuple[int, ...]] = []
        if r.forms:  # explicit surface forms: the prompt as is, each form a whole next token
            prompt_ids = self.ids(r.prompt, special)
            variants = self._form_variants(r)
        conts: list[tuple[int, ...]] = []  # single mode: each label's continuation (rule 4's exception)
        for label in r.labels if not r.forms else ():
            firsts: list[int] = []
            for mode in modes:
                ctx, cont, _ = self.join(r.prompt, label, mode, special)
                if prompt_ids is None:
                    prompt_ids = ctx
                elif ctx != prompt_ids:
                    # trailing-space moves are label-independent, so this means a tokenizer quirk
                    raise ValueError(f"request {r.id!r}: prompt tokenizes differently for label {label!r}")
                if cont[0] not in firsts:
                    firsts.append(cont[0])
                conts.append(cont)
            variants.append(tuple(firsts))
        prefix: tuple[int, ...] = ()
        if len(modes) == 1 and conts:
            prefix, after = shared_prefix(conts)
            if prefix and self.tokenizer.decode(list(prefix)).strip():
                prefix = ()  # only a shared separator; labels that share a word stay an error
            variants = [(t,) for t in after] if prefix else variants
        seen: dict[int, str] = {}
        for label, firsts in zip(r.labels, variants):
            for t in firsts:
                if t in seen:
                    raise ValueError(
                        f"request {r.id!r}: field 'labels': {seen[t]!r} and {label!r} start with the same token "
                        f"({self.tokenizer.convert_ids_to_tokens(t)!r}); use labels with distinct first tokens"
                    )
                seen[t] = label
        assert prompt_ids is not None
        self._check_length(r.id, len(prompt_ids) + len(prefix))
        if not prompt_ids:
            raise ValueError(f"request {r.id!r}: field 'prompt' encodes to no tokens")
        all_ids = tuple(t for firsts in variants for t in firsts)
        # a shared prefix is scored like a continuation (its log-probs in token_logprobs), the labels after it
        seq = Sequence(ids=prompt_ids + prefix, score_from=len(prompt_ids), label_ids=all_ids)
        return Encoded(r, (seq,), len(prompt_ids), label_variants=tuple(variants))

    def _encode_continuation(self, r: ContinuationRequest) -> Encoded:
        special = self._special(r, r.prompt)
        seqs, nbytes = [], []
        prompt_ids: tuple[int, ...] = ()
        for option in r.options:
            ctx, cont, text = self.join(r.prompt, option, r.space, special)
            if not ctx:
                raise ValueError(f"request {r.id!r}: field 'prompt' encodes to no tokens")
            prompt_ids = ctx
            self._check_length(r.id, len(ctx) + len(cont))
            seqs.append(Sequence(ids=ctx + cont, score_from=len(ctx)))
            nbytes.append(len(text.encode("utf-8")))
        return Encoded(r, tuple(seqs), len(prompt_ids), byte_counts=tuple(nbytes))

    def _encode_perplexity(self, r: PerplexityRequest) -> Encoded:
        if r.prefix:
            special = self._special(r, r.prefix)
            ctx, cont, _ = self.join(r.prefix, r.text, r.space, special)
        else:
            # Nothing to condition on: start from BOS (or EOS when there is none),
            # as lm-evaluation-harness's rolling log-likelihood does, so every token is scored.
            start = self.tokenizer.bos_token_id
            if start is None:
                start = self.tokenizer.eos_token_id
            cont = self.ids(r.text, False)
            ctx = (start,) if start is not None else cont[:1]
            if start is None:
                cont = cont[1:]
        if not cont:
            raise ValueError(f"request {r.id!r}: field 'text' has no token to score")
        self._check_length(r.id, len(ctx) + len(cont))
        return Encoded(r, (Sequence(ids=ctx + cont, score_from=len(ctx)),), len(ctx))

    def _check_length(self, request_id: str, n: int) -> None:
        if self.max_length is not None and n > self.max_length:
            raise ValueError(
                f"request {request_id!r}: {n} tokens exceed the model's context window of {self.max_length}"
            )


def eos_ids(lm: Any) -> set[int]:
    """The ids that end a generation, as ``generate`` takes them: the generation config's
    ``eos_token_id`` (an id or a list), else the tokenizer's."""
    gc = getattr(lm.model, "generation_config", None)
    eos = getattr(gc, "eos_token_id", None) if gc is not None else None
    if eos is None:
        eos = lm.tokenizer.eos_token_id
    if eos is None:
        return set()
    return {int(x) for x in (eos if isinstance(eos, (list, tuple)) else [eos])}


def prompt_ids(tok: Any, prompt: str | Sequence[int]) -> tuple[int, ...]:
    """A generation prompt's ids: a text encoded with the tokenizer's special-token rule
    (:func:`wants_special_tokens`), or ids taken as given."""
    if isinstance(prompt, str):
        return tuple(tok(prompt, add_special_tokens=wants_special_tokens(tok, prompt))["input_ids"])
    return tuple(int(x) for x in prompt)
