"""``--log-samples``: ``samples.jsonl`` holds, per request, the exact text the tokenizer was given, and
re-tokenizing it gives the token ids the scorer scored (tiny models, with and without chat templates, label /
continuation / perplexity requests, every task); samples resume like records (interrupted runs, SIGKILL)."""

from __future__ import annotations

import copy
import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import probe
from probe.cli import main
from probe.prompts.chat import render_prompt
from probe.runs.runner import RunOptions, Runner
from probe.runs.samples import SAMPLES_FILE, SampleLog, read_samples
from probe.runs.task_run import run_task
from probe.scoring import ContinuationRequest, LabelRequest, PerplexityRequest, Scorer
from probe.tasks import available, get

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread):
    """One torch thread: fast and contention-free on a busy machine."""


@pytest.fixture
def encoded(monkeypatch):
    """Every request the Scorer scores in this test, with the Encoded (token ids) it scored: the ground truth."""
    seen: dict[str, object] = {}
    original = Scorer.score

    def spy(self, requests, *a, **kw):
        for r in requests:
            seen[r.id] = (r, self.encode(r), self.encoder.tokenizer)
        return original(self, requests, *a, **kw)

    monkeypatch.setattr(Scorer, "score", spy)
    return seen


def _ids(tok, text: str, special: bool) -> list[int]:
    """Tokenize with the tokenizer itself (not probe's memoizing Encoder)."""
    return list(tok(text, add_special_tokens=special)["input_ids"])


def check_sample(sample: dict, request, enc, tok) -> None:
    """The logged text re-tokenizes to exactly the ids the scorer scored; the logged forms are those summed."""
    assert sample["id"] == request.id and sample["kind"] == request.kind
    seqs = enc.sequences
    if request.kind == "perplexity":
        seq = seqs[0]
        if sample["prefix"]:
            ids = _ids(tok, sample["prefix"] + sample["text"], sample["add_special_tokens"])
            if sample.get("encoded_alone"):
                ids = _ids(tok, sample["prefix"], sample["add_special_tokens"]) + _ids(tok, sample["text"], False)
        else:  # a start token, then the text without special tokens
            assert sample["text"] == request.text
            ids = _ids(tok, sample["start_token"], False) + _ids(tok, sample["text"], False)
        assert ids == list(seq.ids)
        assert sample["n_scored_tokens"] == len(seq.ids) - seq.score_from
        return
    prompt_ids = _ids(tok, sample["prompt"], sample["add_special_tokens"])
    assert prompt_ids == list(seqs[0].ids[: enc.n_prompt_tokens]) and sample["n_prompt_tokens"] == len(prompt_ids)
    if request.kind == "continuation":
        assert sample["options"] == list(request.options)
        for i, (cont, seq) in enumerate(zip(sample["continuations"], seqs)):
            assert cont.endswith(request.options[i])
            whole = _ids(tok, sample["prompt"] + cont, sample["add_special_tokens"])
            if i in sample.get("encoded_alone", ()):
                whole = prompt_ids + _ids(tok, cont, False)
            assert whole == list(seq.ids)
            assert sample["n_continuation_tokens"][i] == len(seq.ids) - seq.score_from
        return
    assert sample["options"] == list(request.labels)
    prefix = list(seqs[0].ids[seqs[0].score_from:])  # the shared whitespace before the labels, if any
    assert (sample.get("shared_prefix") is not None) == bool(prefix)
    for i, forms in enumerate(sample["scored_forms"]):
        assert [f["token_id"] for f in forms] == list(enc.label_variants[i])  # exactly the tokens summed
        for f in forms:
            assert tok.decode([f["token_id"]]) == f["token"]
            if request.forms:  # a form alone is one token (or, for a fallback, starts with it)
                assert f["text"] in request.forms[i]
                assert _ids(tok, f["text"], False)[0] == f["token_id"]
            else:  # the label joined to the prompt: its first token after the prompt (and shared prefix)
                assert f["text"].endswith(request.labels[i])
                after = _ids(tok, sample["prompt"] + f["text"], sample["add_special_tokens"])[len(prompt_ids):]
                if after[: len(prefix)] != prefix or not after[len(prefix):]:
                    after = _ids(tok, f["text"], False)  # encoded alone (a merge across the boundary)
                assert after[len(prefix)] == f["token_id"]
    for i, skipped in enumerate(sample.get("skipped_forms", [[]] * len(request.labels))):
        for text in skipped:  # several tokens, or a token an earlier form of the option already gave
            ids = _ids(tok, text, False)
            assert len(ids) > 1 or ids[0] in enc.label_variants[i] or not request.forms


# -- request kinds, with and without chat templates ------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _bos_lm():
    """The tiny model with a tokenizer that adds BOS to plain text (as Llama's does): both BOS paths are used."""
    from tokenizers import processors

    from probe.models import LoadedModel
    from tests.tiny import tiny_lm

    lm = tiny_lm()
    tok = copy.deepcopy(lm.tokenizer)
    bos = tok.bos_token
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, tok.bos_token_id)])
    return LoadedModel(model=lm.model, tokenizer=tok, name="tiny-bos", source="tests")


def _requests(tok, chat: bool) -> list:
    q = "I saw a man and a woman at the market. Who was it? Answer A or B."
    p = render_prompt(tok, q, system="Answer with one letter.", prefill="Answer:", chat_template=chat)
    return [
        LabelRequest("lab", p, ("A", "B")),
        LabelRequest("lab-both", p, ("A", "B"), space="both"),
        LabelRequest("lab-space", p + " ", ("A", "B", "Unknown")),  # trailing space moves to the label
        # tiny vocabulary: " man", "man", " woman" are one token each; "The man", "Woman" are not
        LabelRequest("lab-forms", p, ("man", "woman"), forms=((" man", "The man", "man"),
                                                              (" woman", "Woman", " woman"))),
        ContinuationRequest("cont", p, ("The man", "The woman", "Not enough information")),
        ContinuationRequest("cont-none", p, ("A", "B"), space="none"),
        PerplexityRequest("ppl", "The cat sat on the mat."),
        PerplexityRequest("ppl-prefix", "He was not comfortable.", prefix="I saw a man at the market.",
                          space="space"),
    ]


@pytest.mark.parametrize("chat", [True, False], ids=["chat-template", "plain"])
@pytest.mark.parametrize("which", ["tiny", "tiny-bos"])
def test_logged_text_retokenizes_to_the_scored_ids(chat, which, encoded, tmp_path):
    from tests.tiny import tiny_lm

    lm = tiny_lm() if which == "tiny" else _bos_lm()
    reqs = _requests(lm.tokenizer, chat)
    assert reqs[0].prompt.startswith("<|im_start|>system") == chat
    runner = Runner(lm, RunOptions(progress=False))
    log = SampleLog(tmp_path / SAMPLES_FILE, "t", runner.scorer.encoder)
    records = runner.score(reqs, tmp_path / "records.jsonl", task="t", samples=log)
    log.close()
    samples = {s["id"]: s for s in read_samples(tmp_path)}
    assert list(samples) == [r.id for r in reqs]
    for rec in records:
        r, enc, tok = encoded[rec.id]
        check_sample(samples[rec.id], r, enc, tok)
        if rec.kind == "label":  # the record's token ids are the ones the sample names
            assert [[f["token_id"] for f in forms] for forms in samples[rec.id]["scored_forms"]] == \
                rec.details["token_ids"]
    s = samples
    # the chat template's BOS is in the text, never added twice; plain text gets the tokenizer's BOS rule
    assert s["lab"]["add_special_tokens"] is (not chat)
    first = encoded["lab"][1].sequences[0].ids[0]
    assert (first == lm.tokenizer.bos_token_id) == (chat or which == "tiny-bos")  # BOS from the text or the rule
    assert s["lab"]["prompt"] == reqs[0].prompt  # exactly the rendered string
    assert [f["text"] for f in s["lab"]["scored_forms"][0]] == [" A"]  # "Answer:" + " A"
    assert [f["text"] for f in s["lab-both"]["scored_forms"][0]] == ["A", " A"]
    assert s["lab-space"]["prompt"] == reqs[0].prompt and s["lab-space"]["scored_forms"][2][0]["text"] == " Unknown"
    forms = s["lab-forms"]
    assert [f["text"] for f in forms["scored_forms"][0]] == [" man", "man"]  # one token each
    assert forms["skipped_forms"][0] == ["The man"]  # several tokens: not summed
    assert forms["skipped_forms"][1] == ["Woman", " woman"]  # several tokens; a token already counted once
    assert s["cont"]["continuations"] == [" The man", " The woman", " Not enough information"]
    assert s["cont-none"]["continuations"] == ["A", "B"]
    assert s["ppl"]["prefix"] == "" and s["ppl"]["start_token"] == lm.tokenizer.bos_token
    assert s["ppl-prefix"]["text"] == " He was not comfortable."


def test_shared_whitespace_prefix_is_logged():
    """SentencePiece-like vocabularies: " 1" = "▁" + "1"; the sample names the shared "▁" and each label's token."""
    from tests.unit.test_label_shared_prefix import _sp_lm

    lm = _sp_lm()
    scorer = Scorer(lm)
    req = LabelRequest("q", "Who was it? Answer:", ("1", "2", "3"))
    log = SampleLog(None, "t", scorer.encoder)
    log.write([req])
    [s] = log.samples()
    check_sample(s, req, scorer.encode(req), lm.tokenizer)
    assert s["shared_prefix"] == " " and [f[0]["token"] for f in s["scored_forms"]] == ["1", "2", "3"]


def test_answers_group_the_scored_texts_and_chains_are_attached(tiny_lm):
    from probe.scoring.generate import GenerationRequest

    scorer = Scorer(tiny_lm)
    gen = GenerationRequest("c1", "<|im_start|>user\nThink.<|im_end|>\n", 8, temperature=0.7, top_p=0.9, seed=3)
    req = ContinuationRequest("c1", "Think. So the answer is", ("Man", "The man", "Unknown"),
                              meta={"owner": [0, 0, 1], "answers": ["The man", "Can't answer"]})
    log = SampleLog(None, "t", scorer.encoder, chains={"c1": (gen, " because he sat.")})
    log.write([req, req])  # the same id twice: logged once
    [s] = log.samples()
    assert s["answers"] == [{"answer": "The man", "texts": ["Man", "The man"]},
                            {"answer": "Can't answer", "texts": ["Unknown"]}]
    assert s["chain"] == {"id": "c1", "prompt": gen.prompt, "add_special_tokens": False, "text": " because he sat.",
                          "max_new_tokens": 8, "temperature": 0.7, "top_p": 0.9, "seed": 3}


# -- every task -------------------------------------------------------------------------------------------------
from tests.unit.test_task_hbb import data as hbb_data  # noqa: E402,F401  (fixtures)
from tests.unit.test_task_hbb import descriptors  # noqa: E402,F401


def _short_hbb_prompts(monkeypatch):
    from tests.unit.test_task_crows_pairs import short_two_choice

    short_two_choice(monkeypatch)


def _task_case(name: str, tmp_path: Path, shared: Path, request) -> tuple[dict, int | None]:
    """The task config values and limit for a small tiny-model run of ``name`` (its fixture or shared data)."""
    if name == "demo":
        return {}, 6
    if name == "bbq":
        return {"categories": ["Age"], "answer_formats": ["oneword", "labels"], "n_boot": 0}, 3
    if name == "implicitbbq":  # one item per cell of zero-shot and CoT (greedy chains, 4 tokens)
        return {"dimensions": ["age"], "strategies": ["zero_shot", "cot"], "per_cell": {"zero_shot": 1, "cot": 1},
                "answer_formats": ["oneword", "labels"], "cot_chains": 0, "cot_max_new_tokens": 4,
                "n_boot": 10}, 2
    if name == "cmp_iso":  # direct and CoT (2 sampled chains of 4 tokens)
        return {"benchmarks": ["stereoset"], "settings": [{"reasoning": "direct"}, {"reasoning": "cot"}],
                "cot_chains": 2, "max_new_tokens": 4, "n_iter": 10, "n_boot": 10,
                "data_dir": str(shared / "cmp_iso")}, 1
    if name == "hbb":  # MCQ labels, HBB-SG perplexities after generated variations, CrowS-Pairs both protocols
        request.getfixturevalue("descriptors")
        return {"data_dir": str(request.getfixturevalue("hbb_data")), "categories": ["ses"], "n_boot": 10,
                "swap_order": False, "sg_n": 2, "sg_max_new_tokens": 4, "crows_pairs": True, "crows_limit": 1,
                "crows_protocol": "both"}, 2
    if name == "crows_pairs":
        return {"n_boot": 10, "protocol": "both"}, 2
    case = get(name).check_case()  # any other task: its own quick run (probe.testing.check_task's)
    return dict(case.values), case.limit


@pytest.mark.parametrize("name", list(available()))
def test_every_task_logs_every_request(name, tiny_lm, tmp_path, shared_data, monkeypatch, encoded, request):
    _short_hbb_prompts(monkeypatch)  # HBB / CrowS / StereoSet MCQ instructions: short for the tiny model
    if name == "hbb":  # the tiny random model writes no "Sentence:" lines: stand in for the parse
        import probe.tasks.hbb.prompts as prompts

        monkeypatch.setattr(prompts, "parse_variations", lambda text, limit=None: ["[[X]] one.", "[[X]] two."][:limit])
    values, limit = _task_case(name, tmp_path, shared_data, request)
    task = get(name)
    out = tmp_path / "run"
    e = run_task(task, task.make_config(values), tiny_lm, output=out, limit=limit,
                 options=RunOptions(progress=False, log_samples=True, chunk_size=4))
    samples = read_samples(out)
    ids = [s["id"] for s in samples]
    assert len(ids) == len(set(ids)), "a sample logged twice"
    scored = [s for s in samples if s["kind"] not in ("generation", "parse")]
    assert sorted(s["id"] for s in scored) == sorted(e.records["id"])  # one per record, no more
    parse = [s for s in samples if s["kind"] == "parse"]  # the enumerated generations of the parse stage
    assert all(s["id"] == s["record_id"] + "#parsed" and s["record_id"] in set(e.records["id"]) for s in parse)
    assert [s["id"] for s in e.samples] == (list(e.records["id"]) + [s["id"] for s in samples if s["kind"] == "generation"]
                                            + [s["id"] for s in parse])
    assert {s["task"] for s in samples} == {name}
    for s in scored:
        r, enc, tok = encoded[s["id"]]
        check_sample(s, r, enc, tok)
    kinds = {s["kind"] for s in scored}
    gens = {}
    if (out / "generations.jsonl").is_file():
        gens = {g["id"]: g for g in map(json.loads, (out / "generations.jsonl").read_text().splitlines())}
    chained = [s for s in scored if "chain" in s]
    alone = [s for s in samples if s["kind"] == "generation"]
    for s in chained + alone:  # the generated text and its prompt, as generations.jsonl has them
        chain = s.get("chain", s)
        assert chain["text"] == gens[s["id"]]["text"] and chain["prompt"]
    assert len(chained) + len(alone) == len(gens)
    if name in ("implicitbbq", "cmp_iso"):  # CoT: the answer is scored after its chain
        assert chained and all(s["prompt"].startswith(s["chain"]["prompt"]) for s in chained)
        assert all(s["chain"]["text"] in s["prompt"] for s in chained)
    if name == "cmp_iso":
        assert all(s["chain"]["temperature"] == 0.7 and "seed" in s["chain"] for s in chained)
    if name == "hbb":
        assert kinds == {"label", "perplexity"} and alone and not chained  # the HBB-SG variations
    if name in ("bbq", "implicitbbq"):  # one-word answers: every text summed per answer option
        cont = next(s for s in scored if s["kind"] == "continuation")
        texts = [t for a in cont["answers"] for t in a["texts"]]
        assert sorted(texts) == sorted(cont["options"]) and len(cont["answers"]) == 3
    if name == "cmp_iso":  # the authors' y/n/s surface forms, each one token
        lab = next(s for s in scored if s["kind"] == "label")
        assert all(len(forms) >= 1 for forms in lab["scored_forms"])
    # resumed: nothing new, nothing twice
    before = (out / SAMPLES_FILE).read_bytes()
    run_task(task, task.make_config(values), tiny_lm, output=out, limit=limit,
             options=RunOptions(progress=False, log_samples=True, chunk_size=4))
    assert (out / SAMPLES_FILE).read_bytes() == before


def test_off_by_default(tiny_lm, tmp_path):
    e = probe.evaluate(tiny_lm, "demo", limit=2, output=tmp_path / "run", progress=False)
    assert e.samples is None and not (tmp_path / "run" / SAMPLES_FILE).exists()


def test_in_memory_evaluate(tiny_lm):
    e = probe.evaluate(tiny_lm, "demo", limit=3, log_samples=True, progress=False)
    assert [s["id"] for s in e.samples] == list(e.records["id"]) and e.output is None


# -- resume -----------------------------------------------------------------------------------------------------
def _demo_args(model_dir: Path, out: Path, limit: int, *extra: str) -> list[str]:
    return ["run", "demo", "--model", str(model_dir), "--limit", str(limit), "--output", str(out), "--no-progress",
            "--threads", "1", "--chunk-size", "4", *extra]


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, model_dir) -> Path:
    out = tmp_path_factory.mktemp("ref") / "run"
    assert main(_demo_args(model_dir, out, 24, "--log-samples")) == 0
    return out


def test_cli_flag_writes_one_sample_per_record(reference):
    samples, records = _lines(reference / SAMPLES_FILE), _lines(reference / "records.jsonl")
    assert [s["id"] for s in samples] == [r["id"] for r in records] and len(samples) == 24


def test_interrupted_run_appends_only_the_missing_samples(model_dir, tmp_path, reference, monkeypatch, encoded):
    """A run stopped after its first chunk, re-run: every sample once, byte-identical to an uninterrupted run."""
    out = tmp_path / "run"
    calls = {"n": 0}
    original = Runner._timed

    def stop_after_one_chunk(self, part, fn):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return original(self, part, fn)

    monkeypatch.setattr(Runner, "_timed", stop_after_one_chunk)
    assert main(_demo_args(model_dir, out, 24, "--log-samples")) == 130
    first = len(_lines(out / "records.jsonl"))
    assert 0 < first < 24 and len(_lines(out / SAMPLES_FILE)) == first  # one chunk, in both files
    monkeypatch.setattr(Runner, "_timed", original)
    encoded.clear()
    assert main(_demo_args(model_dir, out, 24, "--log-samples")) == 0
    assert len(encoded) == 24 - first  # the other chunks only
    assert (out / SAMPLES_FILE).read_bytes() == (reference / SAMPLES_FILE).read_bytes()


def test_samples_of_records_scored_without_the_flag_are_added_without_scoring(model_dir, tmp_path, reference,
                                                                               encoded):
    out = tmp_path / "run"
    assert main(_demo_args(model_dir, out, 24)) == 0
    assert not (out / SAMPLES_FILE).exists()
    encoded.clear()
    assert main(_demo_args(model_dir, out, 24, "--log-samples")) == 0
    assert encoded == {}  # nothing scored again
    assert (out / SAMPLES_FILE).read_bytes() == (reference / SAMPLES_FILE).read_bytes()


@pytest.mark.parametrize("cut", ["mid_line", "whole_lines"])
def test_torn_or_short_samples_file_is_completed(model_dir, tmp_path, reference, cut):
    """A crash can leave a torn last sample, or records whose samples were not written yet: both are redone."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(reference, out)
    data = (reference / SAMPLES_FILE).read_bytes()
    starts = [0] + [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    (out / SAMPLES_FILE).write_bytes(data[: starts[7] + 30] if cut == "mid_line" else data[: starts[5]])
    assert main(_demo_args(model_dir, out, 24, "--log-samples")) == 0
    assert (out / SAMPLES_FILE).read_bytes() == data


def test_sigkill_then_resume_no_duplicates_nothing_lost(model_dir, tmp_path, reference):
    """A real ``probe run --log-samples`` process killed with SIGKILL mid-run, then re-run to completion."""
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "probe.cli", *_demo_args(model_dir, out, 24, "--log-samples", "--batch-size", "1")]
    log = tmp_path / "stderr.txt"
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
    killed_at = None
    try:
        for _ in range(60 * 200):  # bounded polling; each step waits at most 5 ms on the process
            n = (out / SAMPLES_FILE).read_bytes().count(b"\n") if (out / SAMPLES_FILE).exists() else 0
            if n >= 4:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                killed_at = n
                break
            try:
                proc.wait(timeout=0.005)
            except subprocess.TimeoutExpired:
                continue
            break
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert killed_at is not None and killed_at < 24, log.read_text(errors="replace")[-2000:]
    assert main(_demo_args(model_dir, out, 24, "--log-samples")) == 0
    samples = _lines(out / SAMPLES_FILE)
    ids = [s["id"] for s in samples]
    assert len(ids) == len(set(ids)) == 24
    ref = {s["id"]: s for s in _lines(reference / SAMPLES_FILE)}
    assert all(s == ref[s["id"]] for s in samples)


# -- config and command line ------------------------------------------------------------------------------------
def test_config_key_and_set(model_dir, tmp_path):
    cfg = tmp_path / "demo.yaml"
    cfg.write_text(f"task: demo\nmodel: {model_dir}\nlog_samples: true\nprogress: false\nthreads: 1\n")
    assert main(["run", str(cfg), "--limit", "2", "--output", str(tmp_path / "a")]) == 0
    assert len(_lines(tmp_path / "a" / SAMPLES_FILE)) == 2
    assert main(_demo_args(model_dir, tmp_path / "b", 2, "--set", "log_samples=true")) == 0
    assert len(_lines(tmp_path / "b" / SAMPLES_FILE)) == 2


def test_bad_value_is_an_error(model_dir, tmp_path, capsys):
    assert main(_demo_args(model_dir, tmp_path / "c", 2, "--set", "log_samples=maybe")) != 0
    assert "log_samples must be true or false" in capsys.readouterr().err


def test_probe_run_bbq_from_an_empty_directory(model_dir, tmp_path, monkeypatch, shared_data):
    """`probe run bbq --limit 12 --output out --log-samples` in an empty directory (the tiny model stands in)."""
    work = tmp_path / "empty"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["run", "bbq", "--model", str(model_dir), "--limit", "12", "--output", "out", "--log-samples",
                 "--no-progress", "--threads", "1", "--set", "n_boot=0"]) == 0
    samples, records = _lines(work / "out" / SAMPLES_FILE), _lines(work / "out" / "records.jsonl")
    assert sorted(s["id"] for s in samples) == sorted(r["id"] for r in records) and len(records) >= 12
    assert all(s["prompt"] and s["answers"] for s in samples)
