"""probe's Scorer vs lm-evaluation-harness (HF backend) vs a naive loop on the same BBQ requests.

One process, one model object, one machine. Every BBQ question is scored in two forms:

- *text*: the three answer texts as continuations of a prompt ending in
  ``Answer:`` (continuation log-likelihood, summed over tokens);
- *letters*: the options listed as ``A./B./C.``, the single letters as
  continuations of a prompt ending in ``Answer:`` (multiple choice).

Each tool gets identical strings: context = the rendered prompt, continuation
= ``" " + option`` (probe's ``space="auto"`` rule writes the same string), so
all three compute the same quantity and must agree to float32 rounding.

- (a) lm-eval: ``HFLM(pretrained=<the loaded model>, tokenizer=..., batch_size=N)
  .loglikelihood([Instance, ...])`` (no hub access).
- (b) naive: one forward per (prompt, option) sequence, full log_softmax.
- (c) probe: ``Scorer(lm, batch_size=N)``; the options of one question and the
  paired items of one BBQ template instance (ambiguous / disambiguated,
  negative / non-negative, same people) share a ``group``.

Then: HBB label scoring vs the paper's 10 sampled generations per question,
a limit model (FLOPs of the tokens probe computed vs this machine's float32
GEMM peak) and a variant-scaling curve. See ``benchmarks/README.md``.

    python benchmarks/vs_lm_eval.py --quick              # < 10 min on a quiet 2-core machine
    python benchmarks/vs_lm_eval.py --quick --limit 8    # smoke test

The last line is ``probe/lm_eval=X.XX probe/naive=Y.YY max_abs_diff=Z``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PROBE_DATA", str((ROOT.parent / "shared" / "data").resolve()))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

import limit_model  # noqa: E402
from probe.tasks.bbq.data import load_bbq_jsonl  # noqa: E402
from probe.io import stable_hash  # noqa: E402
from probe.tasks.bbq.items import BBQItem  # noqa: E402
from probe.prompts.chat import render_prompt  # noqa: E402
from probe.scoring import ContinuationRequest, LabelRequest, Scorer  # noqa: E402

SYSTEM = "Answer the question about the context. If the context does not tell, say that it cannot be determined."
LETTERS = ("A", "B", "C")


# -- requests ------------------------------------------------------------------
def select_items(categories: list[str], n: int, seed: int = 0) -> list[BBQItem]:
    """``n`` items, whole template instances at a time (the 4 items sharing people and context)
    so paired items really are in the set; drawn evenly over categories by a stable hash."""
    per_cat: list[list[list[BBQItem]]] = []
    for cat in categories:
        quads: dict[str, list[BBQItem]] = defaultdict(list)
        for it in load_bbq_jsonl(cat, drop_untargeted=True):
            quads[pair_key(it)].append(it)
        per_cat.append(sorted(quads.values(), key=lambda q: stable_hash(seed, q[0].id)))
    return round_robin(per_cat, n)


def round_robin(per_group: list[list[list[Any]]], n: int) -> list[Any]:
    """The first ``n`` entries taking one block from each group in turn (blocks kept whole up to ``n``)."""
    out: list[Any] = []
    i = 0
    while len(out) < n and any(i < len(c) for c in per_group):
        for c in per_group:
            if i < len(c) and len(out) < n:
                out.extend(c[i][: n - len(out)])
        i += 1
    return out


def pair_key(it: BBQItem) -> str:
    """Items of one template instance: same template, same people, same answer texts."""
    return f"{it.category}|{it.metadata['question_index']}|{'|'.join(sorted(it.options))}"


def text_prompt(tok: Any, it: BBQItem) -> str:
    return render_prompt(tok, f"Context:\n{it.context}\n\nQuestion:\n{it.question}", system=SYSTEM, prefill="Answer:")


def letter_prompt(tok: Any, it: BBQItem) -> str:
    opts = "\n".join(f"{l}. {o}" for l, o in zip(LETTERS, it.options))
    user = f"Context:\n{it.context}\n\nQuestion:\n{it.question}\n\nOptions:\n{opts}\n\nAnswer with A, B or C."
    return render_prompt(tok, user, system=SYSTEM, prefill="Answer:")


def build_pairs(tok: Any, items: list[BBQItem]) -> list[tuple[str, str, str]]:
    """Every (request id, context, continuation) string triple, the one source for all three tools."""
    pairs = []
    for it in items:
        p = text_prompt(tok, it)
        pairs += [(f"{it.id}|text", p, " " + o) for o in it.options]
        p = letter_prompt(tok, it)
        pairs += [(f"{it.id}|letters", p, " " + l) for l in LETTERS]
    return pairs


def probe_requests(tok: Any, items: list[BBQItem]) -> list[ContinuationRequest | LabelRequest]:
    reqs: list[ContinuationRequest | LabelRequest] = []
    for it in items:
        g = pair_key(it)
        reqs.append(ContinuationRequest(f"{it.id}|text", text_prompt(tok, it), it.options, group=g + "|text"))
        reqs.append(LabelRequest(f"{it.id}|letters", letter_prompt(tok, it), LETTERS, group=g + "|letters"))
    return reqs


def probe_values(results: list[Any]) -> list[float]:
    """Flatten to the order of :func:`build_pairs`: option sums, then letter log-probs."""
    return [float(x) for r in results for x in r.logprobs]


# -- the three tools -----------------------------------------------------------
class PassCounter:
    """Counts decoder forward calls and the (padded) tokens they take, whoever calls."""

    def __init__(self, model: Any) -> None:
        self.calls = self.tokens = 0
        self._h = model.get_decoder().register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs["inputs_embeds"][..., 0]
        self.calls += 1
        self.tokens += int(ids.numel())

    def reset(self) -> None:
        self.calls = self.tokens = 0


def naive_encode(tok: Any, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's split, written out: continuation tokens = encode(ctx + cont) after encode(ctx)."""
    special = not (tok.bos_token and context.startswith(tok.bos_token))
    ctx = tok(context, add_special_tokens=special)["input_ids"]
    whole = tok(context + continuation, add_special_tokens=special)["input_ids"]
    return ctx, whole[len(ctx):]


@torch.inference_mode()
def run_naive(lm: Any, pairs: list[tuple[str, str, str]]) -> list[float]:
    out = []
    for _, context, cont in pairs:
        ctx, cnt = naive_encode(lm.tokenizer, context, cont)
        logits = lm.model(torch.tensor([ctx + cnt])).logits[0].float()
        lp = torch.log_softmax(logits, dim=-1)
        out.append(sum(lp[len(ctx) - 1 + j, t].item() for j, t in enumerate(cnt)))
    return out


def make_hflm(lm: Any, batch_size: int) -> Any:
    from lm_eval.models.huggingface import HFLM

    for name in ("lm_eval", "lm-eval", "lm_eval.models.huggingface"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=batch_size, device=str(lm.model.device))


def run_lm_eval(hflm: Any, pairs: list[tuple[str, str, str]]) -> list[float]:
    from lm_eval.api.instance import Instance

    inst = [Instance("loglikelihood", {}, (c, x), i) for i, (_, c, x) in enumerate(pairs)]
    return [ll for ll, _ in hflm.loglikelihood(inst, disable_tqdm=True)]


@torch.inference_mode()
def float64_errors(lm: Any, pairs: list[tuple[str, str, str]], values: dict[str, list[float]], n: int) -> dict[str, float]:
    """Max |tool - float64 reference| over ``n`` pairs: the half with the largest probe-lm_eval
    difference and the rest spread evenly. The reference runs a float64 copy of the model and
    a float64 log_softmax, so it tells which tool's float32 rounding the differences come from."""
    import copy

    order = sorted(range(len(pairs)), key=lambda i: -abs(values["probe"][i] - values["lm_eval"][i]))
    picked = order[: n // 2]
    rest = [i for i in range(len(pairs)) if i not in set(picked)]
    picked += rest[:: max(1, len(rest) // max(1, n - len(picked)))][: n - len(picked)]
    m64 = copy.deepcopy(lm.model).double()
    errors = {k: 0.0 for k in values}
    for i in picked:
        ctx, cnt = naive_encode(lm.tokenizer, pairs[i][1], pairs[i][2])
        lp = torch.log_softmax(m64(torch.tensor([ctx + cnt])).logits[0], dim=-1)
        ref = sum(lp[len(ctx) - 1 + j, t].item() for j, t in enumerate(cnt))
        for k, v in values.items():
            errors[k] = max(errors[k], abs(v[i] - ref))
    del m64
    return errors


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def token_split_mismatches(scorer: Scorer, hflm: Any, reqs: list[Any], pairs: list[tuple[str, str, str]]) -> int:
    """Pairs whose (context, continuation) token ids differ between probe and lm-eval (should be 0)."""
    mine = []
    for r in reqs:
        e = scorer.encode(r)
        if isinstance(r, LabelRequest):
            s = e.sequences[0]
            mine += [(s.ids, v) for v in e.label_variants]
        else:
            mine += [(s.ids[: s.score_from], s.ids[s.score_from:]) for s in e.sequences]
    bad = 0
    for (ctx, cont), (_, c, x) in zip(mine, pairs):
        lc, lx = hflm._encode_pair(c, x)
        bad += (tuple(lc), tuple(lx)) != (tuple(ctx), tuple(cont))
    return bad


# -- HBB: label scoring vs 10 sampled generations -------------------------------
def hbb_part(lm: Any, counter: PassCounter, args: argparse.Namespace) -> dict:
    from probe.tasks.hbb.data import IDENTITIES, TYPE_INDEX, build_instances, load_default, unique_questions
    from probe.tasks.hbb.selection import sample_concepts
    from probe.tasks.hbb.prompts import mcq_requests, mcq_user_message

    concepts, descriptors = load_default()
    n_concepts_full = len(concepts)
    questions = unique_questions(list(build_instances(sample_concepts(concepts, args.hbb_concepts), descriptors)))
    full_questions = n_concepts_full * sum(len(TYPE_INDEX[c]) * len(IDENTITIES[c]) for c in IDENTITIES)

    scorer = Scorer(lm, batch_size=args.batch_size)
    reqs = mcq_requests(questions, lm.tokenizer)
    scorer.score(reqs[:1])
    counter.reset()
    scorer.engine.reset_counts()
    _, t_label = timed(lambda: scorer.score(reqs))
    label = {"questions": len(questions), "seconds": t_label, "forward_passes": counter.calls,
             "tokens_padded": counter.tokens, "tokens_run": scorer.engine.tokens_run,
             "seconds_per_question": t_label / len(questions)}

    tok = lm.tokenizer
    torch.manual_seed(0)
    sample = questions[: args.gen_questions]
    gen_s, gen_calls, gen_tokens, new_tokens = 0.0, 0, 0, []
    for q in sample:
        prompt = render_prompt(tok, mcq_user_message(q))  # the model answers in its own words
        enc = tok(prompt, add_special_tokens=not (tok.bos_token and prompt.startswith(tok.bos_token)), return_tensors="pt")
        counter.reset()
        with torch.inference_mode():
            out, dt = timed(lambda: lm.model.generate(
                **enc, do_sample=True, num_return_sequences=args.gen_samples, max_new_tokens=args.gen_tokens,
                pad_token_id=tok.pad_token_id))
        gen_s += dt
        gen_calls += counter.calls
        gen_tokens += counter.tokens
        new = out[:, enc["input_ids"].shape[1]:]
        new_tokens += ((new != tok.pad_token_id).sum(dim=1)).tolist()
    per_q = gen_s / len(sample)
    gen = {"measured_questions": len(sample), "samples_per_question": args.gen_samples,
           "max_new_tokens": args.gen_tokens, "seconds_measured": gen_s, "seconds_per_question": per_q,
           "forward_passes_per_question": gen_calls / len(sample), "tokens_padded_per_question": gen_tokens / len(sample),
           "mean_generated_tokens": statistics.fmean(new_tokens) if new_tokens else 0.0,
           "extrapolated_seconds_sample": per_q * len(questions)}
    return {"label": label, "generation": gen, "full_hbb_questions": full_questions,
            "extrapolated_full_seconds": {"label": label["seconds_per_question"] * full_questions,
                                          "generation": per_q * full_questions}}


def variant_requests(tok: Any, n: int) -> list[ContinuationRequest]:
    """One BBQ Age question (the first template with at least ``n`` ambiguous, negative
    instances) with ``n`` demographic variants: the same question about different people."""
    by_template: dict[str, list[BBQItem]] = defaultdict(list)
    for it in load_bbq_jsonl("Age", drop_untargeted=True):
        if it.context_condition == "ambig" and it.question_polarity == "neg":
            by_template[it.metadata["question_index"]].append(it)
    qi = min((k for k, v in by_template.items() if len(v) >= n), key=int, default=None)
    if qi is None:
        raise SystemExit(f"no BBQ Age template has {n} ambiguous negative variants")
    return [ContinuationRequest(it.id, text_prompt(tok, it), it.options, group=f"age-{qi}-ambig-neg")
            for it in by_template[qi][:n]]


# -- main ----------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--quick", action="store_true", help="fewer items (48 BBQ questions, 2 HBB concepts)")
    ap.add_argument("--limit", type=int, default=None, help="number of BBQ questions (overrides --quick's 48 / full 192)")
    ap.add_argument("--categories", default="Age,Nationality,Religion")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2,
                    help="lm-eval and probe timed this many times, alternating; the best of each counts (naive once)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--hbb-concepts", type=int, default=None, help="HBB concept pairs for the label run (quick 2, full 6)")
    ap.add_argument("--gen-questions", type=int, default=None, help="HBB questions generated for (quick 2, full 5)")
    ap.add_argument("--gen-samples", type=int, default=10)
    ap.add_argument("--gen-tokens", type=int, default=32)
    ap.add_argument("--skip-hbb", action="store_true")
    ap.add_argument("--f64-check", type=int, default=8, help="pairs re-scored by a float64 copy of the model (0: off)")
    ap.add_argument("--json", type=Path, default=None, help="also write every number here")
    args = ap.parse_args()
    n_items = args.limit or (48 if args.quick else 192)
    args.hbb_concepts = args.hbb_concepts or (2 if args.quick else 6)
    args.gen_questions = args.gen_questions or (2 if args.quick else 5)
    if args.threads:
        torch.set_num_threads(args.threads)

    from probe.models import load_model
    from probe.scoring.engine import host_memory

    lm = load_model(args.model)
    counter = PassCounter(lm.model)
    tok = lm.tokenizer
    items = select_items(args.categories.split(","), n_items)
    pairs = build_pairs(tok, items)
    reqs = probe_requests(tok, items)
    scorer = Scorer(lm, batch_size=args.batch_size)
    hflm = make_hflm(lm, args.batch_size)
    mismatches = token_split_mismatches(scorer, hflm, reqs, pairs)

    # warm-up: thread pools, allocator, tokenizer caches (not timed)
    run_naive(lm, pairs[:2]); run_lm_eval(hflm, pairs[:6]); scorer.score(reqs[:2])  # noqa: E702

    times: dict[str, float] = {}
    runs: dict[str, list[float]] = defaultdict(list)
    passes: dict[str, tuple[int, int]] = {}
    # lm-eval and probe alternate, best of --repeats each: the ratio then rests on neither's slowest moment
    for rep in range(max(1, args.repeats)):
        counter.reset()
        lme, t = timed(lambda: run_lm_eval(hflm, pairs))
        runs["lm_eval"].append(t)
        passes["lm_eval"] = (counter.calls, counter.tokens)
        if rep == 0:
            counter.reset()
            nai, t = timed(lambda: run_naive(lm, pairs))
            runs["naive"].append(t)
            passes["naive"] = (counter.calls, counter.tokens)
        counter.reset()
        scorer.engine.reset_counts()
        res, t = timed(lambda: scorer.score(reqs))
        runs["probe"].append(t)
        passes["probe"] = (counter.calls, counter.tokens)
    times = {k: min(v) for k, v in runs.items()}
    prb = probe_values(res)
    tokens_run = scorer.engine.tokens_run

    def maxdiff(a: list[float], b: list[float]) -> float:
        return max(abs(x - y) for x, y in zip(a, b))

    kinds = [rid.rsplit("|", 1)[1] for rid, _, _ in pairs]
    diffs = {"probe-lm_eval": maxdiff(prb, lme), "probe-naive": maxdiff(prb, nai), "lm_eval-naive": maxdiff(lme, nai)}
    by_kind = {k: max(abs(p - l) for p, l, kk in zip(prb, lme, kinds) if kk == k) for k in ("text", "letters")}
    max_abs = max(diffs.values())

    splits = [naive_encode(tok, c, x) for _, c, x in pairs]
    unshared_tokens = sum(len(c) + len(x) for c, x in splits)
    per_token = max(abs(p - l) / len(x) for p, l, (_, x) in zip(prb, lme, splits))
    f64 = float64_errors(lm, pairs, {"probe": prb, "lm_eval": lme, "naive": nai}, args.f64_check) if args.f64_check else {}
    print(f"machine: {platform.machine()} {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; model {lm.name} ({lm.info()['n_parameters'] / 1e6:.1f} M parameters); "
          f"host memory {host_memory.state()} (docs/scoring.md, \"Host memory on a CPU\": the whole process)")
    print(f"BBQ: {len(items)} questions ({args.categories}; ambiguous + disambiguated), each as 3 answer texts "
          f"+ 3 letters = {len(pairs)} (context, continuation) pairs, {unshared_tokens} tokens unshared")
    print(f"token splits differing between probe and lm-eval: {mismatches}; probe boundary merges: "
          f"{scorer.encoder.boundary_merges}")
    for name in ("lm_eval", "naive", "probe"):
        calls, toks = passes[name]
        each = f"  (runs: {', '.join(f'{t:.2f}' for t in runs[name])} s)" if len(runs[name]) > 1 else ""
        print(f"  {name:8s} {times[name]:8.2f} s  {len(items) / times[name]:7.2f} questions/s  "
              f"{calls:5d} forward passes  {toks:7d} tokens in (padded){each}")
    print(f"  probe computed {tokens_run} unique tokens (engine.tokens_run)")
    print("max |delta log-likelihood|: " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items())
          + f" (probe-lm_eval: text {by_kind['text']:.2e}, letters {by_kind['letters']:.2e})")
    print(f"  per continuation token: max |probe - lm_eval| / n_tokens = {per_token:.2e}")
    if f64:
        print(f"  vs a float64 reference on {args.f64_check} pairs (max |error|): "
              + ", ".join(f"{k} {v:.2e}" for k, v in f64.items()))
    if max_abs > 1e-4:
        print("WARNING: tools disagree by more than 1e-4: compare the per-token figure and the float64 check "
              "(benchmarks/README.md, Discrepancies)")

    # limit model
    peak = limit_model.gemm_peak(2048, reps=5 if args.quick else 10)
    est = limit_model.flops_estimate(lm.model, tokens_run, limit_model.scored_positions(scorer, reqs))
    print(f"limit model: float32 GEMM 2048^3 best {peak.best_s * 1e3:.1f} ms -> peak {peak.peak_flops_per_s / 1e9:.1f} GFLOP/s; "
          f"probe did {est.dense / 1e9:.1f} GFLOP (2 x N x tokens) = {est.dense / times['probe'] / 1e9:.1f} GFLOP/s "
          f"= {est.dense / times['probe'] / peak.peak_flops_per_s:.1%} of peak; head only at scored positions: "
          f"{est.tight / 1e9:.1f} GFLOP = {est.tight / times['probe'] / peak.peak_flops_per_s:.1%} of peak; "
          f"floor {est.tight / peak.peak_flops_per_s:.2f} s vs {times['probe']:.2f} s measured")
    padded = 2.0 * est.n_parameters * passes["probe"][1]
    print(f"  counting padded tokens too ({passes['probe'][1]} in, {passes['probe'][1] / tokens_run:.2f}x the unique ones): "
          f"{padded / times['probe'] / peak.peak_flops_per_s:.1%} of peak")

    vs = variant_requests(tok, 16)
    curve = limit_model.variant_scaling(Scorer(lm, batch_size=args.batch_size), vs, reps=2 if args.quick else 3)
    print("variant scaling (one BBQ question, k demographic variants in one group, 3 answer texts each):")
    for p in curve:
        print(f"  k={p.k:2d}: {p.tokens_run:5d} tokens computed (unshared {p.unshared_tokens:5d}), "
              f"{p.forward_passes:2d} forward passes, {p.seconds:6.3f} s")

    hbb = None
    if not args.skip_hbb:
        hbb = hbb_part(lm, counter, args)
        lab, gen = hbb["label"], hbb["generation"]
        print(f"HBB ({args.hbb_concepts} concept pairs, {lab['questions']} questions): probe label scoring "
              f"{lab['seconds']:.2f} s, {lab['forward_passes']} forward passes, {lab['tokens_run']} unique tokens "
              f"({lab['tokens_padded']} padded), {lab['seconds_per_question'] * 1e3:.1f} ms/question")
        print(f"  paper's approach, MEASURED on {gen['measured_questions']} questions and EXTRAPOLATED: "
              f"{gen['samples_per_question']} samples x max {gen['max_new_tokens']} new tokens: "
              f"{gen['seconds_per_question']:.2f} s/question, {gen['forward_passes_per_question']:.0f} forward passes/question "
              f"(mean {gen['mean_generated_tokens']:.1f} tokens generated) -> {gen['extrapolated_seconds_sample']:.1f} s for "
              f"these {lab['questions']} questions ({gen['seconds_per_question'] / lab['seconds_per_question']:.0f}x probe)")
        full = hbb["extrapolated_full_seconds"]
        print(f"  full HBB ({hbb['full_hbb_questions']} questions, one option order), extrapolated: "
              f"probe {full['label'] / 3600:.2f} h, 10 generations {full['generation'] / 3600:.1f} h")

    if args.json:
        args.json.write_text(json.dumps({
            "model": lm.info(), "threads": torch.get_num_threads(), "host_memory": host_memory.state(), "n_questions": len(items), "n_pairs": len(pairs),
            "seconds": times, "seconds_runs": dict(runs), "forward_passes": {k: v[0] for k, v in passes.items()},
            "tokens_padded": {k: v[1] for k, v in passes.items()}, "probe_tokens_run": tokens_run,
            "max_abs_diff": diffs, "max_abs_diff_per_token": per_token, "float64_errors": f64,
            "token_split_mismatches": mismatches,
            "gemm": {"n": peak.n, "best_s": peak.best_s, "median_s": peak.median_s},
            "flops": {"dense": est.dense, "tight": est.tight},
            "variant_scaling": [p.__dict__ for p in curve], "hbb": hbb}, indent=2, default=str))
    print(f"probe/lm_eval={times['lm_eval'] / times['probe']:.2f} probe/naive={times['naive'] / times['probe']:.2f} "
          f"max_abs_diff={max_abs:.2e}")


if __name__ == "__main__":
    main()
