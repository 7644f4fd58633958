"""The scorer on a tiny random Llama: equality with a plain reference, invariance
to batch size / order / prefix sharing, deduplication and the joining rules."""

from __future__ import annotations

import math
import random

import pytest

from probe.prompts.chat import render_prompt
from probe.scoring import ContinuationRequest, LabelRequest, PerplexityRequest, Scorer
from tests import reference

TOL = 1e-4

SYSTEM = "Background: Person A wears a tilak. Person B attends Sunday service. Context: they met at the market."
QUESTIONS = [
    "Who was not comfortable using the phone?",
    "Was the woman the secretary?",
    "Who has wrinkles?",
    "The cat sat on the mat. Who sat?",
]
OPTIONS = ("Person A", "Person B", "Not enough information")


def _requests(lm):
    reqs = []
    for i, q in enumerate(QUESTIONS):
        for variant, person in enumerate(("Person A", "Person B")):
            prompt = render_prompt(lm.tokenizer, f"{q} Think of {person}.", system=SYSTEM, prefill="Answer:")
            reqs.append(LabelRequest(f"l{i}-{variant}", prompt, ("A", "B", "C"), group=f"q{i}"))
            reqs.append(ContinuationRequest(f"c{i}-{variant}", prompt, OPTIONS, group=f"q{i}"))
        reqs.append(LabelRequest(f"raw{i}", f"Question: {q}\nAnswer:", ("Yes", "No")))
        reqs.append(PerplexityRequest(f"p{i}", f"The cat sat on the mat {i}.", prefix=SYSTEM if i % 2 else ""))
    return reqs


def _max_diff(a, b):
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(reference.result_numbers(ra), reference.result_numbers(rb)))


def test_matches_plain_reference(tiny_lm):
    reqs = _requests(tiny_lm)
    results = Scorer(tiny_lm, batch_size=8).score(reqs)
    worst = 0.0
    for req, res in zip(reqs, results):
        if isinstance(req, LabelRequest):
            ref = reference.label_logprobs(tiny_lm, req.prompt, list(req.labels))
            got = list(res.logprobs)
            assert math.isclose(sum(res.probs), 1.0, abs_tol=1e-9)
            assert res.label_mass == pytest.approx(sum(math.exp(x) for x in got))
        elif isinstance(req, ContinuationRequest):
            ref = [x for o in req.options for x in reference.continuation_logprobs(tiny_lm, req.prompt, o)]
            got = [x for t in res.token_logprobs for x in t]
            assert res.logprobs[0] == pytest.approx(sum(res.token_logprobs[0]))
        else:
            nll, n = reference.perplexity(tiny_lm, req.text, req.prefix)
            assert res.n_tokens == n
            ref, got = [nll], [res.nll]
        assert len(ref) == len(got)
        worst = max(worst, max(abs(a - b) for a, b in zip(ref, got)))
    assert worst <= TOL, worst


@pytest.mark.parametrize("batch_size", [1, 3, 64])
def test_batch_size_and_order_invariance(tiny_lm, batch_size):
    reqs = _requests(tiny_lm)
    base = Scorer(tiny_lm, batch_size=8).score(reqs)
    shuffled = reqs[:]
    random.Random(batch_size).shuffle(shuffled)
    got = Scorer(tiny_lm, batch_size=batch_size, token_budget=512).score(shuffled)
    by_id = {r.id: r for r in got}
    assert _max_diff(base, [by_id[r.id] for r in reqs]) <= TOL


def test_prefix_sharing_equals_full_recomputation(tiny_lm):
    reqs = _requests(tiny_lm)
    shared = Scorer(tiny_lm, batch_size=8)
    plain = Scorer(tiny_lm, batch_size=8, share_prefixes=False)
    a, b = shared.score(reqs), plain.score(reqs)
    assert _max_diff(a, b) <= TOL
    # and sharing really ran fewer tokens
    assert shared.engine.tokens_run < plain.engine.tokens_run


def test_identical_requests_are_computed_once(tiny_lm):
    prompt = "Question: Who has wrinkles?\nAnswer:"
    scorer = Scorer(tiny_lm)
    scorer.score([LabelRequest("a", prompt, ("A", "B"))])
    once = scorer.engine.tokens_run
    scorer.engine.reset_counts()
    res = scorer.score([LabelRequest(str(i), prompt, ("A", "B")) for i in range(5)])
    assert scorer.engine.tokens_run == once
    assert len({r.logprobs for r in res}) == 1


def test_label_space_rule(tiny_lm):
    tok = tiny_lm.tokenizer
    scorer = Scorer(tiny_lm)
    spaced = scorer.encode(LabelRequest("a", "Answer:", ("A",)))
    bare = scorer.encode(LabelRequest("b", "Answer:\n", ("A",)))
    assert tok.convert_ids_to_tokens(spaced.label_variants[0][0]) == "ĠA"
    assert tok.convert_ids_to_tokens(bare.label_variants[0][0]) == "A"
    both = scorer.encode(LabelRequest("c", "Answer:", ("A",), space="both"))
    assert len(both.label_variants[0]) == 2
    # a trailing space moves into the label, like lm-evaluation-harness
    moved = scorer.encode(LabelRequest("d", "Answer: ", ("A",)))
    assert moved.label_variants == spaced.label_variants
    assert moved.sequences[0].ids == spaced.sequences[0].ids


def test_both_variants_add_probabilities(tiny_lm):
    scorer = Scorer(tiny_lm)
    [sp, bare, both] = scorer.score(
        [
            LabelRequest("s", "Answer:", ("A", "B"), space="space"),
            LabelRequest("n", "Answer:", ("A", "B"), space="none"),
            LabelRequest("b", "Answer:", ("A", "B"), space="both"),
        ]
    )
    for i in range(2):
        assert math.exp(both.logprobs[i]) == pytest.approx(math.exp(sp.logprobs[i]) + math.exp(bare.logprobs[i]), rel=1e-6)


def test_colliding_labels_are_rejected(tiny_lm):
    with pytest.raises(ValueError, match="same token"):
        Scorer(tiny_lm).encode(LabelRequest("x", "Answer:", ("Person A", "Person B")))


def test_prompt_longer_than_context_window(tiny_lm):
    scorer = Scorer(tiny_lm)
    scorer.encoder.max_length = 16
    with pytest.raises(ValueError, match="context window"):
        scorer.encode(LabelRequest("long", "word " * 50, ("A", "B")))


def test_requests_validate_fields():
    with pytest.raises(ValueError, match="labels"):
        LabelRequest("x", "p", ())
    with pytest.raises(ValueError, match="duplicates"):
        LabelRequest("x", "p", ("A", "A"))
    with pytest.raises(ValueError, match="options"):
        ContinuationRequest("x", "p", ("ok", ""))
    with pytest.raises(ValueError, match="prompt"):
        LabelRequest("x", "", ("A",))
    with pytest.raises(ValueError, match="text"):
        PerplexityRequest("x", "")


def test_continuation_normalizations(tiny_lm):
    [res] = Scorer(tiny_lm).score([ContinuationRequest("c", "Question: Who?\nAnswer:", ("Person A", "Unknown"))])
    assert res.token_counts[0] >= 1
    assert res.byte_counts == (len(" Person A"), len(" Unknown"))
    assert res.mean_logprobs[0] == pytest.approx(res.logprobs[0] / res.token_counts[0])
    assert sum(res.probs("byte")) == pytest.approx(1.0)


def test_nonfinite_logits_are_flagged(tiny_lm):
    import copy

    import torch

    lm = copy.copy(tiny_lm)
    lm.model = copy.deepcopy(tiny_lm.model)
    with torch.no_grad():
        lm.model.lm_head.weight[5] = float("nan")
    [res] = Scorer(lm).score([LabelRequest("n", "Answer:", ("A", "B"))])
    assert not res.finite
    assert all(math.isnan(p) for p in res.probs)


def _paths(nodes, prefix=()):
    """(row, tokens along its tree path) for every leaf."""
    for n in nodes:
        seg = prefix + n.ids[n.start:n.end]
        if n.is_leaf:
            yield n.row, seg
        else:
            yield from _paths(n.children, seg)


def test_prefix_tree_covers_every_row_and_ignores_order():
    from probe.scoring.engine.batching import build_tree
    from probe.scoring.engine import Row

    rng = random.Random(0)
    base = tuple(rng.randrange(50) for _ in range(30))
    rows = []
    for i in range(40):
        cut = rng.choice([5, 12, 20, 30])
        ids = base[:cut] + tuple(rng.randrange(50) for _ in range(rng.randrange(2, 9)))
        rows.append(Row(ids, score_from=len(ids) - rng.randrange(0, 2), label_ids=(1,)))
    rows = list({(r.ids, r.score_from): r for r in rows}.values())
    tree = build_tree(rows, min_shared=4)
    leaves = list(_paths(tree))
    assert sorted((r.ids, r.score_from) for r, _ in leaves) == sorted((r.ids, r.score_from) for r in rows)
    for row, tokens in leaves:
        assert tokens == row.ids  # the segments on a path spell the row
    def starts(nodes):
        for n in nodes:
            if n.is_leaf:
                assert n.start <= n.row.score_from - 1  # every scored position is read in the row's own leaf
            else:
                assert len(n.children) >= 2 and (len(n.children) - 1) * n.width >= 4
                starts(n.children)
    starts(tree)
    def shape(nodes):
        return [(n.start, n.end, n.ids, shape(n.children)) for n in nodes]
    shuffled = rows[:]
    random.Random(1).shuffle(shuffled)
    assert shape(build_tree(shuffled, min_shared=4)) == shape(tree)
    computed = sum(n.width for n in _all(tree))
    assert computed < sum(len(r.ids) for r in rows)


def _all(nodes):
    for n in nodes:
        yield n
        yield from _all(n.children)


def test_prefix_shared_across_groups_runs_once(tiny_lm):
    """A system prompt common to requests of different groups is computed once, whatever the groups say."""
    prompt = lambda q: render_prompt(tiny_lm.tokenizer, q, system=SYSTEM, prefill="Answer:")  # noqa: E731
    reqs = [LabelRequest(f"l{i}", prompt(q), ("A", "B"), group=f"g{i}") for i, q in enumerate(QUESTIONS)]
    scorer = Scorer(tiny_lm, batch_size=8, min_shared=1)  # 1: every branch point is kept
    scorer.score(reqs)
    encoded = [scorer.encode(r) for r in reqs]
    ids = [e.sequences[0].ids for e in encoded]
    trie = {s[:k] for s in ids for k in range(1, len(s) + 1)}
    assert scorer.engine.tokens_run == len(trie)  # each distinct prefix exactly once
    assert len(trie) < 0.6 * sum(len(s) for s in ids)


def test_out_of_memory_backs_off_and_keeps_results(tiny_lm, monkeypatch):
    import torch

    reqs = _requests(tiny_lm)
    want = Scorer(tiny_lm, batch_size=8).score(reqs)
    scorer = Scorer(tiny_lm, batch_size=8)
    real = scorer.engine.run_packed
    seen = []

    def small_only(ids, *a, **k):
        seen.append(ids.numel())
        if ids.numel() >= seen[0]:  # the first pass's size "runs out of memory"
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(ids, *a, **k)

    monkeypatch.setattr(scorer.engine, "run_packed", small_only)
    with pytest.warns(RuntimeWarning, match="out of memory"):
        got = scorer.score(reqs)
    # halved; what no longer fits a pass ran level by level (a single tree) or in smaller packed passes
    assert scorer.driver.budget_cap <= seen[0] // 2 and len(seen) > 1 and all(n < seen[0] for n in seen[1:])
    assert _max_diff(want, got) <= TOL


def test_allocation_failure_as_runtime_error_backs_off_and_caps_grow_back(tiny_lm, monkeypatch):
    """Some kernels report an allocation failure as a RuntimeError; it backs off like an
    OutOfMemoryError, and after a run of good passes the caps double back towards the plan."""
    import torch

    from probe.scoring.engine import driver as scorer_mod

    reqs = _requests(tiny_lm)
    want = Scorer(tiny_lm, batch_size=8).score(reqs)
    scorer = Scorer(tiny_lm, batch_size=8)
    real = scorer.engine.run_packed
    failed = {"n": 0}

    def once(ids, *a, **k):
        if not failed["n"]:
            failed["n"] += 1
            raise RuntimeError("CUDA error: out of memory")
        return real(ids, *a, **k)

    monkeypatch.setattr(scorer.engine, "run_packed", once)
    monkeypatch.setattr(scorer_mod, "GROW_AFTER", 1)
    with pytest.warns(RuntimeWarning, match="out of memory"):
        got = scorer.score(reqs)
    assert failed["n"] == 1 and _max_diff(want, got) <= TOL
    for _ in range(12):  # good passes: the caps double back up to the plan, never past it
        scorer.driver._grow()
    assert (scorer.driver.row_cap, scorer.driver.budget_cap) == (scorer.batch_size, scorer.token_budget)

    def broken(*a, **k):
        raise RuntimeError("shape mismatch")  # any other RuntimeError is not swallowed

    monkeypatch.setattr(scorer.engine, "run_packed", broken)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        scorer.score(reqs)


def test_out_of_memory_on_a_single_sequence_is_raised(tiny_lm, monkeypatch):
    import torch

    scorer = Scorer(tiny_lm, batch_size=8)

    def oom(*a, **k):
        raise torch.OutOfMemoryError("simulated")

    for name in ("run_packed", "run_segments", "run_prefixes"):  # a tree too big for a pass runs by levels
        monkeypatch.setattr(scorer.engine, name, oom)
    with pytest.raises(torch.OutOfMemoryError), pytest.warns(RuntimeWarning, match="out of memory"):
        scorer.score([LabelRequest("x", "Question: who?\nAnswer:", ("A", "B"))])
