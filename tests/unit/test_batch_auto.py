"""``batch_size="auto"`` / ``token_budget="auto"``: passes sized from free memory and the model's shape,
shrunk and retried on out-of-memory without losing or repeating a request.

The memory limit is simulated on the CPU: the decoder is wrapped so that a
pass holding more than ``limit`` padded tokens (its cache columns included)
raises ``torch.OutOfMemoryError`` before computing anything, as CUDA does.
"""

from __future__ import annotations

import collections
import json

import pytest
import torch

from probe.scoring import ContinuationRequest, LabelRequest, PerplexityRequest, Scorer
from probe.scoring.engine import memory
from probe.scoring.engine.memory import BatchPlan, ModelShape, fit_token_budget, plan


@pytest.fixture(scope="module")
def tiny_lm():
    from tests.tiny import tiny_lm as make

    return make()


def _requests(n: int = 24) -> list:
    """Labels, continuations and perplexities; pairs share long prefixes (tree levels), some repeat."""
    ctx = ("Background: Person A wears a tilak. Person B attends Sunday service. Context: they met at the market "
           "and talked about the cab. ")
    out: list = []
    for i in range(n):
        q = f"{ctx}Question {i % 7}: who was not comfortable using the phone? Answer:"
        out.append(LabelRequest(f"l{i}", q, ("A", "B", "C"), group=f"g{i % 3}"))
        out.append(ContinuationRequest(f"c{i}", q, ("Person A", "the grandson", "Not enough information")))
        if i % 4 == 0:
            out.append(PerplexityRequest(f"p{i}", f"The grandfather and the grandson {i} tried to book a cab."))
    return out


class _Limit:
    """A forward pre-hook on the decoder: a pass over more than ``limit`` padded tokens runs out of memory
    (raised before anything is computed, as CUDA's allocator does). Use as a context manager."""

    def __init__(self, decoder, limit: int) -> None:
        self.decoder, self.limit = decoder, limit
        self.refused = 0
        self.largest = 0
        self._handle = None

    def _hook(self, module, args, kwargs):
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        # rows x columns: a packed pass's (its mask is [rows, 1, width, width]), or a level pass's with its cache
        tokens = int(ids.numel() if mask.ndim == 4 else mask.numel())
        if tokens > self.limit:
            self.refused += 1
            raise torch.OutOfMemoryError(f"CUDA out of memory (simulated: {tokens} > {self.limit} tokens)")
        self.largest = max(self.largest, tokens)

    def __enter__(self) -> "_Limit":
        self._handle = self.decoder.register_forward_pre_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()


LIMIT = 300  # padded tokens: below the largest pass the automatic plan makes (2 packed rows), above a row


def _reads(scorer: Scorer) -> collections.Counter:
    """Counts how often each unique row is read (unembedded) by the scorer's engine: in packed passes
    (handed out once per call) and in level passes."""
    seen: collections.Counter = collections.Counter()
    real, real_hand_out = scorer.engine.read, scorer.driver._hand_out

    def read(hidden, rows, starts, index=None, sampling=()):
        seen.update((r.ids, r.score_from) for r in rows)
        return real(hidden, rows, starts, index, sampling=sampling)

    def hand_out(reads, outputs):
        seen.update((r.ids, r.score_from) for plan, _ in reads for r in plan.rows)
        return real_hand_out(reads, outputs)

    scorer.engine.read = read
    scorer.driver._hand_out = hand_out
    return seen


def _values(results) -> list[float]:
    out = []
    for r in results:
        out += list(getattr(r, "logprobs", ())) or [r.nll]
    return out


# -- the model's shape and the plan ------------------------------------------------
def test_model_shape_and_bytes_per_token_by_hand(tiny_lm):
    """tests/tiny.py: 2 layers, d_model 64, 4 heads, 2 KV heads (head_dim 16), d_ff 128, float32."""
    s = ModelShape.of(tiny_lm.model)
    assert (s.n_layers, s.d_model, s.n_heads, s.n_kv_heads, s.head_dim, s.d_ff, s.dtype_bytes) == (2, 64, 4, 2, 16, 128, 4)
    assert s.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4 == 512
    stream, qkv, mlp = 3 * 64 * 4, (4 + 2 * 2) * 16 * 4, 3 * 128 * 4
    scores = 4 * 16 * (4 + 4) if s.eager else 16 * 4
    assert s.activation_bytes_per_token(16) == stream + qkv + mlp + scores
    assert s.bytes_per_token(16) == memory.KV_COPIES * 512 + stream + qkv + mlp + scores
    bf16 = ModelShape.of(tiny_lm.model, "bfloat16")  # a quantized model's compute dtype
    assert bf16.dtype_bytes == 2 and bf16.kv_bytes_per_token == 256


def test_fit_token_budget_by_hand(tiny_lm):
    s = ModelShape.of(tiny_lm.model)
    free = 10 * 1024**2
    want = int((memory.HEADROOM * free - s.head_reserve) // s.bytes_per_token())
    assert fit_token_budget(s, free) == want
    assert fit_token_budget(s, 0) == memory.MIN_TOKEN_BUDGET  # nothing free: the back-off takes over
    assert fit_token_budget(s, 10**15) == memory.MAX_TOKEN_BUDGET


def test_fixed_values_pass_through_and_bad_ones_are_refused(tiny_lm):
    p = plan(tiny_lm, 8, 4096)
    assert (p.batch_size, p.token_budget, p.free_bytes) == (8, 4096, None)
    for bad in (0, -1, "many", 2.5, True):
        with pytest.raises(ValueError, match="positive integer or 'auto'"):
            plan(tiny_lm, bad, 4096)
        with pytest.raises(ValueError, match="token_budget"):
            Scorer(tiny_lm, token_budget=bad)


def test_auto_on_the_cpu_keeps_the_fixed_defaults_unless_ram_is_short(tiny_lm):
    p = plan(tiny_lm, "auto", "auto", free=10**12)
    assert (p.batch_size, p.token_budget) == (memory.DEFAULT_BATCH_SIZE, memory.DEFAULT_TOKEN_BUDGET)
    short = plan(tiny_lm, "auto", "auto", free=4 * 1024**2)
    assert short.token_budget == fit_token_budget(ModelShape.of(tiny_lm.model), 4 * 1024**2) < 8192
    assert plan(tiny_lm, 4, "auto", free=10**12).batch_size == 4


def test_auto_on_a_gpu_is_sized_from_free_memory(tiny_lm, monkeypatch):
    """A (simulated) GPU: the token budget is what the free memory holds; no row limit beyond it."""
    monkeypatch.setattr(memory, "model_devices", lambda model: [torch.device("cuda:0")])
    monkeypatch.setattr(memory, "free_bytes", lambda device: 256 * 1024**2)
    p = plan(tiny_lm, "auto", "auto")
    want = fit_token_budget(ModelShape.of(tiny_lm.model), 256 * 1024**2)
    assert (p.token_budget, p.batch_size, p.free_bytes, p.device) == (want, want, 256 * 1024**2, "cuda:0")
    assert want > memory.DEFAULT_TOKEN_BUDGET  # a GPU gets bigger passes than the CPU default
    assert plan(tiny_lm, "auto", 1000).batch_size == 1000
    assert json.dumps(p.as_dict())  # provenance-ready


def test_free_bytes_on_the_cpu_is_available_ram():
    psutil = pytest.importorskip("psutil")
    got = memory.free_bytes("cpu")
    assert 0 < got <= psutil.virtual_memory().total


# -- out of memory: shrink, retry, nothing lost or repeated ------------------------------
def test_auto_under_a_simulated_memory_limit_scores_every_request_once(tiny_lm, monkeypatch):
    reqs = _requests()
    want = Scorer(tiny_lm, batch_size=2, token_budget=512).score(reqs)  # a fixed small batch size

    monkeypatch.setattr(memory, "model_devices", lambda model: [torch.device("cuda:0")])
    monkeypatch.setattr(memory, "free_bytes", lambda device: 256 * 1024**2)  # plans far more than the limit
    scorer = Scorer(tiny_lm, batch_size="auto", token_budget="auto")
    assert scorer.token_budget > 8192
    reads = _reads(scorer)
    with _Limit(scorer.engine.decoder, limit=LIMIT) as limit, pytest.warns(RuntimeWarning, match="out of memory"):
        got = scorer.score(reqs)

    assert limit.refused > 0 and limit.largest <= LIMIT
    assert scorer.driver.budget_cap < scorer.token_budget and scorer.driver.row_cap < scorer.batch_size  # shrunk for good
    rows = scorer.rows([scorer.encode(r) for r in reqs])
    assert len(reads) == len(rows) and set(reads.values()) == {1}  # every unique sequence read exactly once
    assert [r.id for r in got] == [r.id for r in reqs]
    diff = max(abs(a - b) for a, b in zip(_values(want), _values(got)))
    assert diff <= 1e-4, diff  # float32 rounding of differently shaped products only


def test_out_of_memory_while_merging_caches_descends_pass_by_pass(tiny_lm, monkeypatch):
    reqs = _requests(12)
    want = Scorer(tiny_lm, batch_size=2).score(reqs)
    scorer = Scorer(tiny_lm, batch_size=2)  # small passes: their caches are merged for the next level
    scorer.packed = False  # the level-by-level path (models the packed pass cannot run exactly)
    calls = {"merge": 0}

    def merge(parts):
        calls["merge"] += 1
        raise torch.OutOfMemoryError("simulated")

    scorer.engine.merge_caches = merge
    reads = _reads(scorer)
    with pytest.warns(RuntimeWarning, match="out of memory"):
        got = scorer.score(reqs)
    assert calls["merge"] >= 1
    assert set(reads.values()) == {1}
    assert max(abs(a - b) for a, b in zip(_values(want), _values(got))) <= 1e-4


def test_the_runner_writes_every_record_once_under_the_limit(tiny_lm, monkeypatch, tmp_path):
    from probe.runs.runner import RunOptions, Runner

    reqs = _requests(16)
    monkeypatch.setattr(memory, "model_devices", lambda model: [torch.device("cuda:0")])
    monkeypatch.setattr(memory, "free_bytes", lambda device: 256 * 1024**2)
    runner = Runner(tiny_lm, RunOptions(batch_size="auto", token_budget="auto", chunk_size=10, progress=False))
    out = tmp_path / "scores.jsonl"
    with _Limit(runner.scorer.engine.decoder, limit=LIMIT), pytest.warns(RuntimeWarning, match="out of memory"):
        records = runner.score(reqs, out)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(x["id"] for x in lines) == sorted(r.id for r in reqs)  # none lost, none twice
    assert [r.id for r in records] == [r.id for r in reqs]
    assert isinstance(runner.scorer.batching, BatchPlan) and runner.scorer.batching.requested_token_budget == "auto"


def test_generation_batch_size_of_a_plan():
    """Generation has no back-off: an automatic GPU plan gives it at most 64 rows; the CPU keeps 16."""
    from probe.scoring.engine.memory import generation_batch_size

    gpu = BatchPlan(50_000, 50_000, "auto", "auto", "cuda:0")
    assert generation_batch_size(gpu) == 24  # 50,000 // 2048
    assert generation_batch_size(BatchPlan(500_000, 500_000, "auto", "auto", "cuda:0")) == 64
    assert generation_batch_size(BatchPlan(16, 8192, "auto", "auto", "cpu")) == 16  # as before auto existed
    assert generation_batch_size(BatchPlan(7, 4096, 7, "auto", "cuda:0")) == 7  # a fixed batch size is kept


def test_a_model_without_a_readable_config_falls_back_to_the_defaults(tiny_lm, monkeypatch):
    """No shape, no estimate: the fixed defaults, and the out-of-memory back-off does the rest."""
    def unreadable(*a, **k):
        raise AttributeError("no config")

    monkeypatch.setattr(ModelShape, "of", classmethod(lambda cls, *a, **k: unreadable()))
    monkeypatch.setattr(memory, "model_devices", lambda model: [torch.device("cuda:0")])
    monkeypatch.setattr(memory, "free_bytes", lambda device: 10**10)
    p = plan(tiny_lm, "auto", "auto")
    assert (p.token_budget, p.bytes_per_token) == (memory.DEFAULT_TOKEN_BUDGET, None)


def test_a_failed_pass_is_freed_before_its_halves_run(tiny_lm):
    """On a GPU the tensors of a pass that ran out of memory are pinned by the exception's traceback
    while its ``except`` block runs: the halves must run after it, or they start with that memory
    still taken (and fail again down to one row)."""
    import weakref

    reqs = _requests(12)
    want = Scorer(tiny_lm, batch_size=16).score(reqs)
    scorer = Scorer(tiny_lm, batch_size=16)
    held: list = []
    alive_at_retry: list[bool] = []

    def hook(module, args, kwargs):
        if held:
            alive_at_retry.append(held[-1]() is not None)
        if kwargs["input_ids"].numel() > 300:  # a big pass (the packed pass of 12 requests: about 500 tokens): allocate, then fail as CUDA's allocator does
            activation = torch.empty(1024, 1024)  # noqa: F841 - held by this frame, hence by the traceback
            held.append(weakref.ref(activation))
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    handle = scorer.engine.decoder.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with pytest.warns(RuntimeWarning, match="out of memory"):
            got = scorer.score(reqs)
    finally:
        handle.remove()
    assert held and alive_at_retry and not any(alive_at_retry)
    assert max(abs(a - b) for a, b in zip(_values(want), _values(got))) <= 1e-4


def test_out_of_memory_in_the_read_is_backed_off_like_the_forward(tiny_lm):
    """The head and float32 log-softmax at the scored positions run after the forward and can run out
    of memory too: the pass is redone in halves, every row read once."""
    reqs = _requests(12)
    want = Scorer(tiny_lm, batch_size=16).score(reqs)
    scorer = Scorer(tiny_lm, batch_size=16)
    real_read = scorer.engine.read_packed
    refused = {"n": 0}
    reads = _reads(scorer)

    def read(hidden, *a, **k):
        if hidden.shape[0] * hidden.shape[1] > 300:
            refused["n"] += 1
            raise torch.OutOfMemoryError("CUDA out of memory (simulated, in the read)")
        return real_read(hidden, *a, **k)

    scorer.engine.read_packed = read
    with pytest.warns(RuntimeWarning, match="out of memory"):
        got = scorer.score(reqs)
    assert refused["n"] >= 1 and scorer.driver.row_cap < 16
    assert set(reads.values()) == {1}
    assert [r.id for r in got] == [r.id for r in reqs]
    assert max(abs(a - b) for a, b in zip(_values(want), _values(got))) <= 1e-4
