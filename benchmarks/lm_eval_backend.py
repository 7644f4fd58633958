"""An lm-eval task on BBQ through lm-eval's `hf` backend and through probe's (`ProbeLM`), one process, one model.

Two BBQ-shaped local tasks, written at run time from the BBQ files in
``$PROBE_DATA/bbq/data`` (never committed): ``--n`` documents, whole template
instances (the 4 items sharing a template, people and answers) drawn evenly
over the categories by a stable hash.

* ``--task three`` (default): prompt ``{context}\\n\\nQ: {question}\\nA:`` (lm-eval's
  bbq prompt), the three answers as continuations, metrics ``acc`` and ``acc_norm``;
* ``--task builtin``: lm-evaluation-harness's own ``bbq`` task (its YAML is
  ``include``d, only the data source is swapped): 12 choices per document (the
  two people + ten "unknown" phrasings), its accuracy and bias-score metrics.

Both backends get the same loaded model object and batch size (``hf``:
``batch_size``; probe: ``score_batch_size``). Timed: each backend's
``loglikelihood`` call (the model work) and the whole ``simple_evaluate``
(task building and metrics included, the same for both). Checked: every
request's log-likelihood (max |delta|), is_greedy, and every metric.

    python benchmarks/lm_eval_backend.py                      # smollm2, 200 documents, 3 answers
    python benchmarks/lm_eval_backend.py --task builtin --n 48
    python benchmarks/lm_eval_backend.py --n 24 --model DIR   # smoke test

The last line is ``probe/hf=X.XX (loglikelihood; CPU time C.CC) evaluate=Y.YY max_abs_diff=Z metrics_identical=True``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PROBE_DATA", str((ROOT.parent / "shared" / "data").resolve()))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from probe.io import stable_hash  # noqa: E402
from vs_lm_eval import round_robin  # noqa: E402


def select_docs(data_dir: Path, categories: list[str], n: int, seed: int = 0) -> list[dict]:
    """``n`` BBQ rows, whole template instances at a time, round-robin over categories (stable hash order)."""
    per_cat = []
    for cat in categories:
        quads: dict[str, list[dict]] = defaultdict(list)
        with open(data_dir / f"{cat}.jsonl", encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                key = f"{row['question_index']}|{'|'.join(sorted((row['ans0'], row['ans1'], row['ans2'])))}"
                quads[key].append(row)
        per_cat.append(sorted(quads.values(), key=lambda q: stable_hash(seed, q[0]["category"], q[0]["example_id"])))
    return round_robin(per_cat, n)


def write_task(root: Path, docs: list[dict], kind: str) -> str:
    """A local task over a local JSONL: lm-eval's own bbq (included) or the three-answer form."""
    import lm_eval

    name = f"bbq_local_{kind}"
    data = root / f"{name}.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    source = f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
    if kind == "builtin":
        builtin = Path(lm_eval.__file__).parent / "tasks" / "bbq" / "bbq_multiple_choice.yaml"
        text = f"include: {builtin}\ntask: {name}\ntag: []\ndataset_name: null\n" + source
    else:
        text = (f"task: {name}\n" + source + "test_split: test\noutput_type: multiple_choice\n"
                'doc_to_text: "{{context}}\\n\\nQ: {{question}}\\nA:"\n'
                'doc_to_choice: "{{[ans0, ans1, ans2]}}"\ndoc_to_target: label\n'
                "metric_list:\n  - {metric: acc, aggregation: mean, higher_is_better: true}\n"
                "  - {metric: acc_norm, aggregation: mean, higher_is_better: true}\n")
    (root / f"{name}.yaml").write_text(text, encoding="utf-8")
    return name


class Timed:
    """Wraps a model's ``loglikelihood`` to add up the wall and CPU seconds spent in it."""

    def __init__(self, model: Any) -> None:
        self.seconds = self.cpu_seconds = 0.0  # wall; CPU of the process (all threads: steadier under load)
        inner = model.loglikelihood

        def timed(requests, *a, **k):
            t, c = time.perf_counter(), time.process_time()
            try:
                return inner(requests, *a, **k)
            finally:
                self.seconds += time.perf_counter() - t
                self.cpu_seconds += time.process_time() - c

        model.loglikelihood = timed


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--n", type=int, default=200, help="BBQ documents (>= 200 for the recorded run)")
    ap.add_argument("--task", choices=("three", "builtin"), default="three",
                    help="three answers (acc, acc_norm) or lm-eval's own bbq task (12 choices, bias scores)")
    ap.add_argument("--categories", default="Age,Nationality,Religion")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--num-fewshot", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write every number here")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    for name in ("lm_eval", "lm-eval", "lm_eval.models.huggingface"):
        logging.getLogger(name).setLevel(logging.ERROR)

    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from probe.integrations.lm_eval import ProbeLM
    from probe.models import load_model

    docs = select_docs(Path(os.environ["PROBE_DATA"]) / "bbq" / "data", args.categories.split(","), args.n)
    lm = load_model(args.model)
    backends = {"hf": HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=args.batch_size),
                "probe": ProbeLM(lm, score_batch_size=args.batch_size)}
    timers = {k: Timed(m) for k, m in backends.items()}
    warm = [(None, lm.tokenizer("Q: Who was there?\nA:")["input_ids"], lm.tokenizer(" Unknown")["input_ids"])]
    for m in backends.values():  # thread pools, allocator: not timed
        m._loglikelihood_tokens(warm * 2, disable_tqdm=True)

    results, wall = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        task = write_task(Path(tmp), docs, args.task)
        for name in ("hf", "probe"):
            t = time.perf_counter()
            results[name] = lm_eval.simple_evaluate(
                model=backends[name], tasks=[task], num_fewshot=args.num_fewshot, log_samples=True,
                task_manager=TaskManager(include_path=tmp, include_defaults=False), verbosity="ERROR")
            wall[name] = time.perf_counter() - t

    samples = {k: r["samples"][task] for k, r in results.items()}
    diffs, greedy_mismatch, n_req, n_tokens = [], 0, 0, 0
    for h, p in zip(samples["hf"], samples["probe"]):
        assert h["doc_id"] == p["doc_id"] and h["arguments"] == p["arguments"]
        for (hl, hg), (pl, pg) in ((a[0], b[0]) for a, b in zip(h["resps"], p["resps"])):
            diffs.append(abs(hl - pl))
            greedy_mismatch += hg != pg
            n_req += 1
        for ctx, cont in h["arguments"]:
            n_tokens += len(backends["hf"].tok_encode(ctx + cont))
    mh, mp = results["hf"]["results"][task], results["probe"]["results"][task]
    metric_keys = sorted(k for k in mh if k not in ("name", "alias"))
    differing = [k for k in metric_keys if not same(mh[k], mp.get(k))]
    max_abs = max(diffs)
    ratio = timers["hf"].seconds / timers["probe"].seconds
    cpu_ratio = timers["hf"].cpu_seconds / timers["probe"].cpu_seconds
    eval_ratio = wall["hf"] / wall["probe"]

    print(f"machine: {platform.machine()} {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, lm-eval {lm_eval.__version__}; model {lm.name} "
          f"({lm.info()['n_parameters'] / 1e6:.1f} M parameters, {lm.dtype}, {lm.device})")
    what = "lm-eval's own bbq task (12 choices)" if args.task == "builtin" else "BBQ, 3 answers, lm-eval's bbq prompt"
    print(f"task: {what} on {len(docs)} local BBQ documents ({args.categories}), "
          f"{n_req} loglikelihood requests, {n_tokens} tokens unshared, batch size {args.batch_size}")
    for name in ("hf", "probe"):
        print(f"  {name:6s} loglikelihood {timers[name].seconds:8.2f} s wall, {timers[name].cpu_seconds:8.2f} s CPU   "
              f"simple_evaluate {wall[name]:8.2f} s")
    print(f"  probe computed {backends['probe'].scorer.engine.tokens_run} tokens (engine.tokens_run)")
    print(f"max |delta log-likelihood| {max_abs:.2e} over {n_req} requests; is_greedy differs on {greedy_mismatch}")
    print("metrics: " + ", ".join(f"{k}={mh[k]:.4f}" for k in metric_keys
                                  if isinstance(mh[k], float) and "stderr" not in k and not math.isnan(mh[k])))
    print(f"metrics identical: {not differing}" + (f" (differ: {differing})" if differing else ""))
    if args.json:
        args.json.write_text(json.dumps({
            "model": lm.info(), "n_docs": len(docs), "n_requests": n_req, "batch_size": args.batch_size,
            "seconds_loglikelihood": {k: t.seconds for k, t in timers.items()},
            "cpu_seconds_loglikelihood": {k: t.cpu_seconds for k, t in timers.items()}, "seconds_evaluate": wall,
            "max_abs_diff": max_abs, "is_greedy_mismatches": greedy_mismatch, "metrics_differing": differing,
            "metrics": {"hf": mh, "probe": mp}}, indent=2, default=str))
    print(f"probe/hf={ratio:.2f} (loglikelihood; CPU time {cpu_ratio:.2f}) evaluate={eval_ratio:.2f} max_abs_diff={max_abs:.2e} "
          f"metrics_identical={not differing}")


if __name__ == "__main__":
    main()
