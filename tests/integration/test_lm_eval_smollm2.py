"""ProbeLM on the real embedded model (SmolLM2-135M-Instruct) against lm-eval's `hf` backend, offline.

`hf` loads the converted smollm2 directory itself (``HFLM(pretrained=DIR)``, as
``lm_eval --model hf --model_args pretrained=DIR`` does); probe loads ``smollm2``
through ``probe.models.load_model``. On a local multiple-choice task written by
the test (two few-shot examples, so prompts share prefixes): every request's
log-likelihood within 1e-4, the same is_greedy, identical metrics; then
loglikelihood_rolling and generate_until on the same model.
"""

from __future__ import annotations

import pytest

lm_eval = pytest.importorskip("lm_eval", reason="lm-evaluation-harness not installed: pip install 'probe[lm-eval]'")

from lm_eval.api.instance import Instance  # noqa: E402

from tests.unit.test_lm_eval_backend import QUESTIONS, _tasks, write_task  # noqa: E402

pytestmark = pytest.mark.integration
TOL = 1e-4


@pytest.fixture(scope="module")
def backends(smollm2):
    from lm_eval.models.huggingface import HFLM

    from probe.integrations.lm_eval import ProbeLM
    from probe.models.builtins import builtin_gguf_path
    from probe.models.loader import converted_gguf_dir

    model_dir, _ = converted_gguf_dir(builtin_gguf_path("smollm2"))
    hf = HFLM(pretrained=str(model_dir), device="cpu", dtype="float32", batch_size=8)
    return ProbeLM(smollm2, score_batch_size=8), hf


def test_task_through_lm_eval_equals_hf(backends, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    task_dir = write_task(tmp_path / "task")
    runs = {name: lm_eval.simple_evaluate(model=m, tasks=["tiny_mc"], task_manager=_tasks(task_dir), log_samples=True,
                                          verbosity="ERROR")
            for name, m in zip(("probe", "hf"), backends)}
    worst, n = 0.0, 0
    for p, h in zip(runs["probe"]["samples"]["tiny_mc"], runs["hf"]["samples"]["tiny_mc"]):
        assert p["arguments"] == h["arguments"]
        for (pll, pg), (hll, hg) in ((a[0], b[0]) for a, b in zip(p["resps"], h["resps"])):
            worst = max(worst, abs(pll - hll))
            assert pg == hg
            n += 1
    print(f"\nsmollm2 lm-eval task: {n} requests, max |probe - hf| = {worst:.2e}")
    assert n == 3 * 2 * len(QUESTIONS) and worst < TOL
    rp, rh = runs["probe"]["results"]["tiny_mc"], runs["hf"]["results"]["tiny_mc"]
    assert all(rp[k] == rh[k] for k in rh if k.startswith("acc")), (rp, rh)


def test_rolling_and_generation_equal_hf(backends):
    probe_lm, hf = backends
    texts = [q for q, _, _ in QUESTIONS[:3]]
    rolling = [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(texts)]
    got, want = probe_lm.loglikelihood_rolling(rolling, disable_tqdm=True), hf.loglikelihood_rolling(rolling, disable_tqdm=True)
    # every token of a document is scored, and HFLM adds a window's log-probabilities in float32
    # (`logits.sum()`, rounding ~ulp of the total per term) while probe adds them in float64 (math.fsum):
    # the bound is per scored token: 2e-5, about 3 float32 ulps of a total near 100 (measured: 7.5e-6)
    n_tokens = [len(probe_lm.tok_encode(t)) for t in texts]
    worst = max(abs(g - w) / n for g, w, n in zip(got, want, n_tokens))
    print(f"\nsmollm2 rolling: {n_tokens} tokens, max |probe - hf| per token = {worst:.2e}")
    assert worst < TOL / 5, (got, want)
    gen = {"until": ["\n"], "max_gen_toks": 8, "do_sample": False}
    reqs = [Instance("generate_until", {}, (f"Question: {t}\nAnswer:", dict(gen)), i) for i, t in enumerate(texts)]
    again = [Instance("generate_until", {}, r.args, r.idx) for r in reqs]
    assert probe_lm.generate_until(reqs, disable_tqdm=True) == hf.generate_until(again, disable_tqdm=True)
