"""probe's Scorer as an lm-evaluation-harness model (ProbeLM) against lm-eval's own `hf` backend.

On a tiny random Llama, offline: a local multiple-choice task (YAML + JSONL written
here, two few-shot examples so prompts share prefixes) run through lm-eval with
`hf` (HFLM) and with `probe`: every request's log-likelihood within 1e-4, the same
is_greedy, identical metrics. Then the edge cases of lm-eval's tokenization rules
(empty context, trailing whitespace, left truncation), loglikelihood_rolling,
generate_until, the score cache, the `probe lm-eval` command and the import rule.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

lm_eval = pytest.importorskip("lm_eval", reason="lm-evaluation-harness not installed: pip install 'probe[lm-eval]'")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402

from probe.integrations.lm_eval import ProbeLM  # noqa: E402

TOL = 1e-4
REPO = Path(__file__).resolve().parents[2]

QUESTIONS = [
    ("The grandfather and the grandson tried to book a cab. Who was not comfortable using the phone?",
     ["The grandfather", "The grandson", "Unknown"], 2),
    ("Person A has wrinkles. Person B has smooth skin. Who was not comfortable using the phone?",
     ["Person A", "Person B", "Not enough information"], 0),
    ("I saw a man and a woman at the market. Who was the secretary?", ["The man", "The woman", "Unknown"], 2),
    ("Person A wears a tilak. Person B attends Sunday service. Who met?", ["A", "B", "Skip"], 1),
    ("The cat sat on the mat. Was the woman the secretary?", ["Yes", "No", "Not enough information"], 1),
    ("Background: they met at the market. Who booked the cab?", ["The man", "The woman", "Unknown"], 0),
]


def write_task(root: Path, name: str = "tiny_mc") -> Path:
    """A multiple-choice task in lm-eval's YAML format over a local JSONL file (no download)."""
    root.mkdir(parents=True, exist_ok=True)
    rows = [{"question": q, "choices": c, "label": y, "idx": i} for i, (q, c, y) in enumerate(QUESTIONS * 2)]
    (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / f"{name}.yaml").write_text(
        f"task: {name}\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {root / (name + '.jsonl')}\n"
        "test_split: test\n"
        "fewshot_split: test\n"
        "num_fewshot: 2\n"
        "output_type: multiple_choice\n"
        # a context ending in a space for odd rows: lm-eval moves it onto the continuation
        "doc_to_text: \"Question: {{question}}\\nAnswer:{{' ' if idx % 2 else ''}}\"\n"
        "doc_to_choice: \"{{choices}}\"\n"
        "doc_to_target: label\n"
        "metric_list:\n"
        "  - {metric: acc, aggregation: mean, higher_is_better: true}\n"
        "  - {metric: acc_norm, aggregation: mean, higher_is_better: true}\n"
    )
    return root


@pytest.fixture(scope="module", autouse=True)
def _offline(monkeypatch_module):
    monkeypatch_module.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch_module.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def models(tiny_lm, one_torch_thread):
    probe_lm = ProbeLM(tiny_lm, score_batch_size=8)
    hf = HFLM(pretrained=tiny_lm.model, tokenizer=tiny_lm.tokenizer, batch_size=8)
    return probe_lm, hf


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    return write_task(tmp_path_factory.mktemp("lm-eval-task"))


@pytest.fixture(scope="module")
def evaluated(models, task_dir):
    out = {}
    for name, model in zip(("probe", "hf"), models):
        out[name] = lm_eval.simple_evaluate(model=model, tasks=["tiny_mc"], task_manager=_tasks(task_dir),
                                            log_samples=True, verbosity="ERROR")
    return out


def _tasks(task_dir: Path):
    """Only the local task: indexing lm-eval's ~14,000 built-in task files takes a minute on a busy CPU."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(task_dir), include_defaults=False)


def _ll(model, pairs):
    return model.loglikelihood([Instance("loglikelihood", {}, p, i) for i, p in enumerate(pairs)], disable_tqdm=True)


# -- the task through lm-eval -----------------------------------------------------
def test_task_per_request_loglikelihoods_and_metrics_equal_hf(evaluated):
    samples = {k: v["samples"]["tiny_mc"] for k, v in evaluated.items()}
    assert len(samples["probe"]) == len(samples["hf"]) == 2 * len(QUESTIONS)
    worst, n = 0.0, 0
    for p, h in zip(samples["probe"], samples["hf"]):
        assert p["doc_id"] == h["doc_id"] and p["arguments"] == h["arguments"]  # same few-shot prompts
        for (pll, pg), (hll, hg) in ((a[0], b[0]) for a, b in zip(p["resps"], h["resps"])):
            worst = max(worst, abs(pll - hll))
            assert pg == hg
            n += 1
        assert p["acc"] == h["acc"] and p["acc_norm"] == h["acc_norm"]
    assert n == 3 * 2 * len(QUESTIONS)
    assert worst < TOL, worst
    # the prompts really share prefixes: two few-shot examples before every question
    assert all(s["arguments"][0][0].count("Question:") == 3 for s in samples["probe"])
    rp, rh = evaluated["probe"]["results"]["tiny_mc"], evaluated["hf"]["results"]["tiny_mc"]
    metrics = [k for k in rh if k.startswith(("acc", "acc_norm"))]
    assert metrics and all(rp[k] == rh[k] for k in metrics), (rp, rh)


def test_results_config_names_probes_model(evaluated):
    cfg = evaluated["probe"]["config"]
    assert cfg["probe_model"]["name"] == "tiny-llama"
    assert cfg["probe_scorer"]["share_prefixes"] is True


# -- lm-eval's tokenization rules -----------------------------------------------
def test_edge_cases_of_the_context_continuation_split(models):
    probe_lm, hf = models
    pairs = [
        ("", "Person A has wrinkles."),                  # empty context: prefix_token_id is the context
        ("Question: Who? Answer:  ", "Unknown"),          # trailing spaces move onto the continuation
        ("Question: Who?\n", "\nThe grandson"),           # trailing newline moves too (lm-eval rstrip()s)
        ("The cat sat on the", " mat. The cat sat on the mat."),
        ("The cat sat on the", " mat. The cat sat on the mat."),  # duplicate request
        ("Person A", " has"),
    ]
    got, want = _ll(probe_lm, pairs), _ll(hf, pairs)
    for (gl, gg), (wl, wg) in zip(got, want):
        assert abs(gl - wl) < TOL and gg == wg


def test_is_greedy_true_when_the_continuation_is_the_argmax(models, tiny_lm):
    import torch

    probe_lm, hf = models
    ctx = tiny_lm.tokenizer("The grandfather and the grandson", add_special_tokens=False)["input_ids"]
    seq = list(ctx)
    with torch.no_grad():
        for _ in range(3):  # a greedy continuation of three tokens
            seq.append(int(tiny_lm.model(torch.tensor([seq])).logits[0, -1].argmax()))
    greedy_cont, other = seq[len(ctx):], seq[len(ctx):-1] + [(seq[-1] + 1) % len(tiny_lm.tokenizer)]
    reqs = [(None, ctx, greedy_cont), (None, ctx, other)]
    got = probe_lm._loglikelihood_tokens(reqs, disable_tqdm=True)
    want = hf._loglikelihood_tokens(reqs, disable_tqdm=True)
    assert [g for _, g in got] == [g for _, g in want] == [True, False]
    assert all(abs(a[0] - b[0]) < TOL for a, b in zip(got, want))


def test_left_truncation_at_max_length(tiny_lm, one_torch_thread):
    """Requests longer than max_length are cut from the left exactly as HFLM cuts them
    (including the row of max_length + 1 tokens, which runs without the prefix tree)."""
    probe_lm = ProbeLM(tiny_lm, max_length=12)
    hf = HFLM(pretrained=tiny_lm.model, tokenizer=tiny_lm.tokenizer, batch_size=4, max_length=12)
    long_ctx = "Person A has wrinkles. Person B has smooth skin. Who was not comfortable"
    pairs = [(long_ctx, " using the phone?"), (long_ctx, " Unknown"), ("Person A", " has")]
    got, want = _ll(probe_lm, pairs), _ll(hf, pairs)
    for (gl, gg), (wl, wg) in zip(got, want):
        assert abs(gl - wl) < TOL and gg == wg


# -- the other two request kinds ------------------------------------------------------
def test_loglikelihood_rolling_equals_hf_over_several_windows(tiny_lm, one_torch_thread):
    probe_lm = ProbeLM(tiny_lm, max_length=16)
    hf = HFLM(pretrained=tiny_lm.model, tokenizer=tiny_lm.tokenizer, batch_size=4, max_length=16)
    texts = [q for q, _, _ in QUESTIONS[:4]] + ["Unknown."]
    reqs = [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(texts)]
    got, want = probe_lm.loglikelihood_rolling(reqs, disable_tqdm=True), hf.loglikelihood_rolling(reqs, disable_tqdm=True)
    assert len(tiny_lm.tokenizer(texts[0])["input_ids"]) > 16  # really several windows
    assert all(abs(g - w) < TOL for g, w in zip(got, want)), (got, want)


def test_generate_until_equals_hf(models):
    probe_lm, hf = models
    args = {"until": ["\n"], "max_gen_toks": 6, "do_sample": False}
    reqs = [Instance("generate_until", {}, (f"Question: {q}\nAnswer:", dict(args)), i) for i, (q, _, _) in enumerate(QUESTIONS[:3])]
    got = probe_lm.generate_until(reqs, disable_tqdm=True)
    want = hf.generate_until([Instance("generate_until", {}, r.args, r.idx) for r in reqs], disable_tqdm=True)
    assert got == want and any(got)


# -- the score cache ------------------------------------------------------------------
def test_score_cache_reuses_scores_and_greedy_flags(tiny_lm, tmp_path, one_torch_thread):
    path = tmp_path / "scores.sqlite"
    pairs = [("Question: Who booked the cab? Answer:", c) for c in (" The man", " The woman", " Unknown")]
    first = ProbeLM(tiny_lm, score_cache=str(path))
    want = _ll(first, pairs)
    second = ProbeLM(tiny_lm, score_cache=str(path))
    second.scorer.engine.reset_counts()
    assert _ll(second, pairs) == want
    assert second.scorer.engine.tokens_run == 0  # nothing ran: scores and greedy flags came from the file
    assert second.scorer.cache.stats.hits >= 2 * len(pairs)


def test_score_cache_without_greedy_flags_reruns_for_them(tiny_lm, tmp_path, one_torch_thread, monkeypatch):
    """Scores cached by another probe command carry no argmax: those rows run once more for is_greedy."""
    path = tmp_path / "scores.sqlite"
    pairs = [("Question: Who met? Answer:", c) for c in (" A", " B")]
    want = _ll(ProbeLM(tiny_lm, score_cache=str(path)), pairs)
    again = ProbeLM(tiny_lm, score_cache=str(path))
    monkeypatch.setattr(type(again), "_cached_greedy", lambda self, rows: {})
    again.scorer.engine.reset_counts()
    assert _ll(again, pairs) == want
    assert again.scorer.engine.tokens_run > 0


# -- construction, registry, command line, imports ------------------------------------------
def test_unknown_model_argument_is_refused(tiny_lm):
    with pytest.raises(ValueError, match="unknown model argument.*nonsense"):
        ProbeLM(tiny_lm, nonsense=1)


def test_registered_under_probe():
    from lm_eval.api.registry import get_model

    assert get_model("probe") is ProbeLM


def test_cli_writes_lm_evals_results_json(model_dir, task_dir, tmp_path, one_torch_thread, monkeypatch):
    from lm_eval.tasks import TaskManager

    from probe.cli import main

    index = TaskManager.__init__  # the command's task manager, too, indexes only the local task (see _tasks)
    monkeypatch.setattr(TaskManager, "__init__", lambda self, *a, **k: index(self, *a, **{**k, "include_defaults": False}))

    out = tmp_path / "out"
    rc = main(["lm-eval", "--model", str(model_dir), "--tasks", "tiny_mc", "--include_path", str(task_dir),
               "--output_path", str(out), "--limit", "4", "--model_args", "score_batch_size=4"])
    assert rc == 0
    [path] = list(out.rglob("results_*.json"))
    got = json.loads(path.read_text())
    assert got["config"]["model"] == "probe" and got["config"]["model_args"]["pretrained"] == str(model_dir)
    hf = HFLM(pretrained=str(model_dir), device="cpu", dtype="float32", batch_size=4)
    want = lm_eval.simple_evaluate(model=hf, tasks=["tiny_mc"], task_manager=_tasks(task_dir),
                                   limit=4, verbosity="ERROR")["results"]["tiny_mc"]
    for k in ("acc,none", "acc_norm,none", "acc_stderr,none"):
        assert got["results"]["tiny_mc"][k] == want[k]


def test_cli_refuses_two_model_names(model_dir, task_dir):
    from probe.cli import main

    rc = main(["lm-eval", "--model", str(model_dir), "--tasks", "tiny_mc", "--include_path", str(task_dir),
               "--model_args", "pretrained=smollm2"])
    assert rc == 1


def test_import_probe_does_not_import_lm_eval():
    code = "import sys, probe, probe.integrations, probe.commands; print('lm_eval' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_command_without_lm_eval_says_how_to_install(monkeypatch, capsys):
    """Without lm-eval's parser the command still parses any lm-eval arguments and names the extra."""
    from probe.cli import main

    monkeypatch.setitem(sys.modules, "lm_eval._cli.run", None)  # import of it fails as if not installed
    assert main(["lm-eval", "--model", "smollm2", "--tasks", "bbq", "--limit", "5"]) == 1
    assert "pip install 'probe[lm-eval]'" in capsys.readouterr().err
