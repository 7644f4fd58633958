"""``--log-samples``: what the model saw, per request (``samples.jsonl`` beside ``records.jsonl``).

The idea and the name follow lm-evaluation-harness's ``--log_samples``; the
fields are probe's own (schema in ``docs/samples.md``). One JSON line per
request, keyed by the record id:

- ``prompt`` (label, continuation, generation) or ``prefix`` + ``text``
  (perplexity): the exact strings given to the tokenizer, after the chat
  template, with ``add_special_tokens`` (whether the tokenizer added BOS);
- label requests: each option's scored surface forms with the token whose
  probability was summed (``scored_forms``), and the forms left out
  (``skipped_forms``: several tokens, or a token an earlier form already gave);
- continuation requests: each option's continuation exactly as scored
  (joining space included) and its token count;
- ``answers``: when a task maps several scored texts to one answer option
  (``meta`` ``owner`` + ``answers``: BBQ, ImplicitBBQ), the texts summed per answer;
- ``chain``: the generated chain (prompt and text) a request's answer follows;
  generations that no scored request follows (HBB-SG variations) get a line
  of their own (``kind: generation``).

Every sample is built from the same :class:`probe.scoring.tokens.Encoder` that
feeds the scorer, and checked against the token ids it scores: a logged text
that would not re-tokenize to the scored ids is an error, never a silent log.
Samples resume like records: a line per id, appended once (crash-safe
:class:`probe.io.RecordWriter`), so a resumed run appends only what is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from probe.errors import ProbeError
from probe.io import read_records
from probe.scoring.tokens import wants_special_tokens

#: The file name beside ``records.jsonl``.
SAMPLES_FILE = "samples.jsonl"
#: Bumped when a field changes meaning.
SCHEMA_VERSION = 1


def _special(tokenizer: Any, request: Any, text: str) -> bool:
    flag = getattr(request, "add_special_tokens", None)
    return wants_special_tokens(tokenizer, text) if flag is None else bool(flag)


def _tok(tokenizer: Any, token_id: int) -> str:
    """One token as text (``" Man"``), as the tokenizer decodes it alone."""
    return tokenizer.decode([int(token_id)])


def _mismatch(request: Any, what: str) -> ProbeError:  # pragma: no cover - would be a logging bug
    return ProbeError(f"--log-samples: request {request.id!r}: the logged {what} does not give the token ids "
                      "the scorer scores; please report this")


def sample_of(encoder: Any, request: Any, task: str, chain: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The sample of one scorer request (label, continuation or perplexity), checked against the
    token ids ``encoder`` gives the scorer. ``chain``: the generation the request follows, if any."""
    enc = encoder.encode(request)
    tok = encoder.tokenizer
    out: dict[str, Any] = {"id": request.id, "task": task, "kind": request.kind, "group": request.group,
                           "schema": SCHEMA_VERSION}
    if request.kind == "perplexity":
        out.update(_perplexity(encoder, request, enc))
    else:
        prompt = request.prompt if request.kind == "label" and request.forms else (request.prompt.rstrip(" ")
                                                                                  or request.prompt)
        special = _special(tok, request, request.prompt)
        ids = encoder.ids(prompt, special)
        if ids != enc.sequences[0].ids[: enc.n_prompt_tokens]:
            raise _mismatch(request, "prompt")
        out.update(prompt=prompt, add_special_tokens=special, n_prompt_tokens=enc.n_prompt_tokens)
        out.update(_label(encoder, request, enc, prompt, special) if request.kind == "label"
                   else _continuation(encoder, request, enc, prompt, special))
    answers = _answers(request)
    if answers:
        out["answers"] = answers
    if chain:
        out["chain"] = dict(chain)
    return out


def _label(encoder: Any, r: Any, enc: Any, prompt: str, special: bool) -> dict[str, Any]:
    tok = encoder.tokenizer
    scored: list[list[dict[str, Any]]] = []
    skipped: list[list[str]] = []
    if r.forms:  # each form alone, one token, the prompt as is (probe.scoring.tokens rule 5)
        for forms in r.forms:
            got: list[dict[str, Any]] = []
            left: list[str] = []
            for form in forms:
                ids = encoder.ids(form, False)
                if len(ids) == 1 and all(g["token_id"] != ids[0] for g in got):
                    got.append({"text": form, "token_id": ids[0], "token": _tok(tok, ids[0])})
                else:
                    left.append(form)
            if not got:  # no one-token form: the first token of the first form
                first = encoder.ids(forms[0], False)[0]
                got.append({"text": forms[0], "token_id": first, "token": _tok(tok, first)})
                left.remove(forms[0])
            scored.append(got)
            skipped.append(left)
        prefix: tuple[int, ...] = ()
    else:  # the joining rule: the label after its separator, scored by its first token
        seq = enc.sequences[0]
        prefix = seq.ids[seq.score_from:]  # rule 4's exception: whitespace every label starts with
        modes = ("none", "space") if r.space == "both" else (r.space,)
        for label, want in zip(r.labels, enc.label_variants):
            got, left = [], []
            for mode in modes:
                ctx, cont, text = encoder.join(r.prompt, label, mode, special)
                token = cont[len(prefix)] if prefix else cont[0]
                if any(g["token_id"] == token for g in got):
                    left.append(text)
                else:
                    got.append({"text": text, "token_id": token, "token": _tok(tok, token)})
            scored.append(got)
            skipped.append(left)
    for got, want in zip(scored, enc.label_variants):
        if tuple(g["token_id"] for g in got) != tuple(want):
            raise _mismatch(r, "label forms")
    out: dict[str, Any] = {"options": list(r.labels), "scored_forms": scored}
    if any(skipped):
        out["skipped_forms"] = skipped
    if prefix:
        out["shared_prefix"] = tok.decode(list(prefix))
    return out


def _continuation(encoder: Any, r: Any, enc: Any, prompt: str, special: bool) -> dict[str, Any]:
    texts, counts, alone = [], [], []
    for i, (option, seq) in enumerate(zip(r.options, enc.sequences)):
        ctx, cont, text = encoder.join(r.prompt, option, r.space, special)
        if ctx + cont != seq.ids:
            raise _mismatch(r, f"continuation {option!r}")
        if encoder.ids(prompt + text, special) != seq.ids:
            alone.append(i)  # a merge across the boundary: the continuation was tokenized on its own (rule 3)
        texts.append(text)
        counts.append(len(cont))
    out: dict[str, Any] = {"options": list(r.options), "continuations": texts, "n_continuation_tokens": counts}
    if alone:
        out["encoded_alone"] = alone
    return out


def _perplexity(encoder: Any, r: Any, enc: Any) -> dict[str, Any]:
    tok = encoder.tokenizer
    seq = enc.sequences[0]
    if r.prefix:
        special = _special(tok, r, r.prefix)
        ctx, cont, text = encoder.join(r.prefix, r.text, r.space, special)
        prefix = r.prefix.rstrip(" ") or r.prefix
        if ctx + cont != seq.ids or encoder.ids(prefix, special) != ctx:
            raise _mismatch(r, "text")
        out = {"prefix": prefix, "text": text, "add_special_tokens": special}
        if encoder.ids(prefix + text, special) != seq.ids:
            out["encoded_alone"] = True
    else:  # scored from a start token (BOS, else EOS), the text tokenized without special tokens
        start = seq.ids[: seq.score_from]
        out = {"prefix": "", "text": r.text, "add_special_tokens": False,
               "start_token": tok.decode(list(start)) if start else None}
    out.update(n_prompt_tokens=seq.score_from, n_scored_tokens=len(seq.ids) - seq.score_from)
    return out


def _answers(r: Any) -> list[dict[str, Any]]:
    """The scored texts per answer option, when the task maps texts to options (``meta`` owner + answers)."""
    meta = getattr(r, "meta", None) or {}
    owner, answers = meta.get("owner"), meta.get("answers")
    texts = r.labels if r.kind == "label" else getattr(r, "options", ())
    if not owner or not answers or len(owner) != len(texts):
        return []
    return [{"answer": a, "texts": [t for t, o in zip(texts, owner) if o == i]} for i, a in enumerate(answers)]


def chain_of(tokenizer: Any, request: Any, text: str) -> dict[str, Any]:
    """A generation as logged: its exact prompt (tokenized as the generator does), what was generated,
    and how (greedy, or sampled: temperature, top_p, seed)."""

    return {"id": request.id, "prompt": request.prompt,
            "add_special_tokens": wants_special_tokens(tokenizer, request.prompt), "text": text,
            "max_new_tokens": request.max_new_tokens, **request.settings()}


def generation_sample(tokenizer: Any, request: Any, text: str, task: str) -> dict[str, Any]:
    """The sample of a generation no scored request follows (HBB-SG variations)."""
    chain = chain_of(tokenizer, request, text)
    return {"id": request.id, "task": task, "kind": "generation", "group": request.group, "schema": SCHEMA_VERSION,
            **{k: v for k, v in chain.items() if k != "id"}}


class SampleLog:
    """The samples of one run: appended to ``path`` once per id (resumable), or kept in memory (``path`` None).

    ``chains``: generation id -> (GenerationRequest, generated text); a scored request with the same id
    follows that chain and logs it. Built from the scorer's own ``encoder``.
    """

    def __init__(self, path: str | Path | None, task: str, encoder: Any,
                 chains: Mapping[str, tuple[Any, str]] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.task = task
        self.encoder = encoder
        self.chains = dict(chains or {})
        self._writer: Any = None
        self._memory: dict[str, dict[str, Any]] = {}

    def _done(self) -> set[str]:
        if self.path is None:
            return set(self._memory)
        if self._writer is None:
            from probe.io import RecordWriter

            self._writer = RecordWriter(self.path)  # drops a torn last line, like the records
        return self._writer.done

    def _put(self, samples: list[dict[str, Any]]) -> None:
        if not samples:
            return
        if self.path is None:
            self._memory.update((s["id"], s) for s in samples)
        else:
            self._writer.write_many(samples)

    def write(self, requests: Iterable[Any]) -> int:
        """Log the scorer requests not logged yet; returns how many were added."""
        done = self._done()
        new, seen = [], set()
        for r in requests:
            if r.id in done or r.id in seen:
                continue
            seen.add(r.id)
            gen = self.chains.get(r.id)
            new.append(sample_of(self.encoder, r, self.task,
                                 chain_of(self.encoder.tokenizer, *gen) if gen is not None else None))
        self._put(new)
        return len(new)

    def write_generations(self, requests: Sequence[Any], texts: Mapping[str, str]) -> int:
        """Log generations (``texts`` by id) as lines of their own, when not logged yet."""
        done = self._done()
        new = [generation_sample(self.encoder.tokenizer, g, texts[g.id], self.task)
               for g in requests if g.id not in done and g.id in texts]
        self._put(new)
        return len(new)

    def write_parsed(self, requests: Sequence[Any], parsed: Mapping[str, Mapping[str, Any]]) -> int:
        """Log the parse stage (``id#parsed``): the generation prompt, the sampling, the parser, and the
        most probable enumerated generations with their mass and answer, when not logged yet."""
        done = self._done()
        new = []
        for r in requests:
            sid = f"{r.id}#parsed"
            d = parsed.get(r.id)
            if sid in done or d is None:
                continue
            new.append({"id": sid, "task": self.task, "kind": "parse", "record_id": r.id, "prompt": r.prompt,
                        "temperature": r.temperature, "top_p": r.top_p, "max_new_tokens": r.max_new_tokens,
                        "parser": r.parser_name, "generations": list(d.get("top", [])),
                        "probs": dict(d.get("probs", {})), "rejected": d.get("rejected"),
                        "residual": d.get("residual")})
        self._put(new)
        return len(new)

    def samples(self, ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The logged samples (of ``ids``, in that order; else all, in file order)."""
        if self.path is None:
            rows = self._memory
        else:

            rows = {str(s["id"]): s for s in read_records(self.path)[0]} if self.path.is_file() else {}
        return list(rows.values()) if ids is None else [rows[i] for i in ids if i in rows]

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def read_samples(run: str | Path) -> list[dict[str, Any]]:
    """The samples of a run directory (or a ``samples.jsonl`` path), in file order."""

    path = Path(run)
    if path.is_dir():
        path = path / SAMPLES_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no samples at {path} (run with --log-samples)")
    return read_records(path)[0]
