"""Every decoder-only family transformers builds: each score probe prints equals a plain forward, or the model is
refused in one line, never a wrong number or a traceback.

The families are this transformers release's own (:mod:`tests.unit._architectures`: its causal-LM model types,
less an explicit list of encoder-decoders and families that cannot be built tiny, each with its reason), built
tiny in memory with their layer kinds mixed and windows shorter than the prompts. Per family, against one plain
forward per sequence (``tests/reference.py``, ``log_softmax`` over the vocabulary, float32, 1e-4):

- ``scores``: labels, continuations and perplexities sharing a long prefix, batch size 3 (the scorer's own path:
  the packed pass, the level path or the plain per-sequence pass, whichever it picks for the model);
- ``batch1``: the same at batch size 1;
- ``capture``: the same requests with activation capture on (scores, and the captured layer-0 output);
- ``extend``: incremental extension (generation's path): prompts of two lengths, two tokens each (where that
  is refused, prompts of one length, which must then be exact or refused too);
- ``tree``: parse_exact's frontier (the tree store where the engine offers one, else its cached rows).

A path may refuse with a :class:`probe.errors.ProbeError` (one line, naming the reason). ``tools/architectures.py``
prints the table; ``tools/drift.py`` runs this test on the newest transformers too. :data:`KNOWN_FAILING` names the
families that still fail, with why: an entry that passes fails the test, so the list stays true.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from tests.unit import _architectures as zoo

TOL = 1e-4
SYSTEM = "Background: Person A wears a tilak. Person B attends Sunday service. Context: they met at the market. "
PATHS = ("scores", "batch1", "capture", "extend", "tree")

#: family -> why it still gives a wrong number or a traceback on some path (kept true: a family listed here that
#: passes fails the test)
KNOWN_FAILING: dict[str, str] = {
}


@dataclass
class Outcome:
    """One family's result per path: ``exact``, ``refused: why``, ``wrong: |diff|`` or ``error: what``."""

    family: str
    paths: dict[str, str] = field(default_factory=dict)
    route: str = ""  # the scoring path the scorer took (packed, level, plain)

    @property
    def status(self) -> str:
        if any(v.startswith(("wrong", "error")) for v in self.paths.values()):
            return "failing"
        if self.paths and all(v.startswith("refused") for v in self.paths.values()):
            return "refused"
        return "exact"

    def problems(self) -> str:
        return "; ".join(f"{k}: {v}" for k, v in self.paths.items() if v.startswith(("wrong", "error")))


def _requests() -> list:
    from probe.scoring import ContinuationRequest, LabelRequest, PerplexityRequest

    reqs = []
    for i, q in enumerate(["Who was not comfortable using the phone?", "Who tried to book a cab?"]):
        prompt = SYSTEM + q + " Answer:"
        reqs.append(LabelRequest(f"lab{i}", prompt, ("A", "B", "C"), group="q"))
        reqs.append(ContinuationRequest(f"con{i}", prompt, ("Person A", "Unknown"), group="q"))
    reqs.append(LabelRequest("short", "The cat sat on the mat. Answer:", ("Yes", "No")))
    reqs.append(PerplexityRequest("ppl", "The cat sat on the mat."))
    reqs.append(PerplexityRequest("ppl-prefixed", "The cat sat on the mat.", prefix=SYSTEM.rstrip()))
    return reqs


def _numbers(req, res) -> list[float]:
    from tests import reference

    return reference.result_numbers(res) if not hasattr(res, "nll") else [res.nll]


def _want(lm, reqs) -> list[list[float]]:
    from probe.scoring import ContinuationRequest, LabelRequest
    from tests import reference

    out = []
    for req in reqs:
        if isinstance(req, LabelRequest):
            out.append(reference.label_logprobs(lm, req.prompt, list(req.labels)))
        elif isinstance(req, ContinuationRequest):
            out.append([x for o in req.options for x in reference.continuation_logprobs(lm, req.prompt, o)])
        else:
            out.append([reference.perplexity(lm, req.text, req.prefix)[0]])
    return out


def _worst(want: list[list[float]], reqs, results) -> float:
    worst = 0.0
    for w, req, res in zip(want, reqs, results):
        got = _numbers(req, res)
        if len(got) != len(w):
            return float("inf")
        worst = max([worst] + [abs(a - b) for a, b in zip(w, got)])
    return worst


def _verdict(worst: float) -> str:
    return "exact" if worst <= TOL else f"wrong: {worst:.3g}"


def _scores(lm, reqs, want, batch_size: int, outcome: Outcome | None = None) -> str:
    from probe.scoring import Scorer

    scorer = Scorer(lm, batch_size=batch_size)
    results = scorer.score(reqs)
    if outcome is not None:
        outcome.route = _route(scorer)
    return _verdict(_worst(want, reqs, results))


def _route(scorer) -> str:
    """Which scoring path a scorer took: the engine's capabilities where it has them, else packed or level."""
    caps = getattr(scorer.engine, "capabilities", None)
    if caps is not None:
        return caps.scoring_path
    return "packed" if scorer.packed and scorer.engine.packable(1 << 20) is None else "level"


def _capture(lm, reqs, want) -> str:
    from probe.activations.scoring_capture import CaptureSpec
    from probe.scoring import Scorer

    hook = "blocks.0.hook_resid_post"
    scorer = Scorer(lm, batch_size=3)
    results = scorer.score(reqs[:3], capture=CaptureSpec((hook,), "last"))
    worst = _worst(want[:3], reqs[:3], results)
    ids = scorer.encode(reqs[0]).sequences[0].ids
    hs = _block0(lm, torch.tensor([list(ids)]))[0, -1]
    got = torch.as_tensor(results[0].activations[f"{hook}@last"]).float()
    rel = float((got - hs.float()).abs().max()) / max(1e-6, float(hs.abs().max()))
    return _verdict(max(worst, rel))


def _block0(lm, ids: torch.Tensor) -> torch.Tensor:
    """The first block's output in a plain forward: ``output_hidden_states``' second entry where its first is the
    input embedding (a token's own, whatever came before it), else its first (RWKV's states start after the
    first block)."""
    other = ids.clone()
    other[0, :-1] = (ids[0, :-1] + 1) % int(lm.model.get_input_embeddings().weight.shape[0])
    with torch.inference_mode():
        hs = lm.model(input_ids=ids, output_hidden_states=True).hidden_states
        first = lm.model(input_ids=other, output_hidden_states=True).hidden_states[0]
    return hs[1] if torch.allclose(hs[0][0, -1], first[0, -1], atol=1e-6) else hs[0]


def _plain_logits(lm, ids) -> torch.Tensor:
    with torch.inference_mode():
        return lm.model(input_ids=torch.tensor([list(ids)])).logits[0, -1].float()


PROMPTS = [(5, 9, 11, 3, 14, 6, 7, 20, 31, 8, 12, 40), (7, 2, 19)]
#: prompts of one length: what a model whose state padding would enter still extends
ONE_LENGTH = [(5, 9, 11, 3, 14, 6), (7, 2, 19, 4, 4, 8)]


def _extend(lm) -> str:
    """Two prompts of different lengths extended two tokens each; where that is refused, prompts of one length
    (a refusal of those too stands; a wrong number there fails the family)."""
    from probe.errors import ProbeError

    try:
        return _extension(lm, PROMPTS)
    except ProbeError as exc:
        refused = "refused: " + str(exc).splitlines()[0]
    one = _attempt(_extension, lm, ONE_LENGTH)
    return refused if one == "exact" else one  # a refusal of one length too says the stronger thing


def _extension(lm, prompts) -> str:
    from probe.scoring.engine import Engine, pad_id_of

    eng = Engine(lm.model, pad_id=pad_id_of(lm.tokenizer))
    worst = 0.0
    with torch.inference_mode():
        ext, logits = eng.begin(prompts)
        seqs = [list(p) for p in prompts]
        for step in range(3):
            for b, s in enumerate(seqs):
                worst = max(worst, float((logits[b].float() - _plain_logits(lm, s)).abs().max()))
            if step == 2:
                break
            toks = [10 + step, 13 + step]
            for s, t in zip(seqs, toks):
                s.append(t)
            logits = eng.extend(ext, toks)
    return _verdict(worst)


def _tree(lm) -> str:
    """parse_exact's frontier as its enumeration runs it: one pass over the prompts, then a token after each
    prompt over the tree store, or (no store) over caches rebuilt from the prompts' exported vectors."""
    from probe.scoring.engine import Engine, pad_id_of

    from probe.scoring.parse.exact import parse_exact
    from probe.scoring.sampler.sampling import SamplingSpec

    # the enumeration itself first: what it refuses (a window shorter than prompt + budget, a cache it cannot
    # keep apart) it refuses here too
    prompts = [list(p) for p in PROMPTS]
    try:
        from probe.scoring.parse.schema import ParseSettings
    except ImportError:  # the settings as keywords (before ParseSettings)
        parse_exact(lm, prompts, SamplingSpec(1.0), max_new_tokens=2, parser=lambda text: text, max_nodes=4)
    else:
        parse_exact(lm, prompts, SamplingSpec(1.0), lambda text: text, ParseSettings(2, max_nodes=4))
    eng = Engine(lm.model, pad_id=pad_id_of(lm.tokenizer))
    toks = [8, 10]
    with torch.inference_mode():
        ext, _ = eng.begin(PROMPTS)
        store = eng.tree_store(ext)
        if store is not None:
            logits, _ = eng.extend_tree(store, toks, [0, 1], [[], []], [len(p) for p in PROMPTS])
        else:
            own = ext.own()
            logits = eng.extend(eng.extension([[kv] for kv in own]), toks)
    worst = max(float((logits[b].float() - _plain_logits(lm, p + (t,))).abs().max())
                for b, (p, t) in enumerate(zip(PROMPTS, toks)))
    return _verdict(worst)


def _attempt(fn, *args) -> str:
    """``fn(*args)``'s verdict; a refusal is a ProbeError, or a ValueError probe itself raises on purpose (its
    one-line message names what the path cannot do); any other exception is a traceback: an error."""
    import traceback

    from probe.errors import ProbeError

    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001  (a traceback is what the sweep reports)
        line = str(exc).splitlines()[0][:200] if str(exc) else ""
        origin = traceback.extract_tb(exc.__traceback__)[-1].filename
        if isinstance(exc, ProbeError) or (type(exc) is ValueError and "/probe/" in origin.replace("\\", "/")):
            return "refused: " + line
        return f"error: {type(exc).__name__}: {line}"


def sweep(family: str) -> Outcome:
    """Every path of ``family`` against the plain forwards (see the module docstring)."""
    from probe.errors import ProbeError

    out = Outcome(family)
    try:
        lm = zoo.build(family)
    except ProbeError as exc:
        out.paths = {p: "refused: " + str(exc).splitlines()[0] for p in PATHS}
        return out
    except Exception as exc:  # noqa: BLE001  (a family that does not build tiny: said per path, the sweep goes on)
        out.paths = {p: f"error: the tiny build: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                     for p in PATHS}
        return out
    reqs = _requests()
    try:
        want = _want(lm, reqs)
    except Exception as exc:  # noqa: BLE001  (the model's own forward fails at the tiny shape: say so per path)
        out.paths = {p: f"error: the plain forward: {type(exc).__name__}: {str(exc)[:120]}" for p in PATHS}
        return out
    out.paths["scores"] = _attempt(_scores, lm, reqs, want, 3, out)
    out.paths["batch1"] = _attempt(_scores, lm, reqs, want, 1)
    out.paths["capture"] = _attempt(_capture, lm, reqs, want)
    out.paths["extend"] = _attempt(_extend, lm)
    out.paths["tree"] = _attempt(_tree, lm)
    return out


RESULTS: dict[str, Outcome] = {}


@pytest.fixture(scope="module", autouse=True)
def _table():
    yield
    if RESULTS:
        print("\n" + table(list(RESULTS.values())))


def table(outcomes: list[Outcome]) -> str:
    """The sweep as a plain-text table: family, status, route, then each path's result."""
    lines = [f"{'family':24s} {'status':8s} {'route':7s} " + " | ".join(PATHS)]
    for o in sorted(outcomes, key=lambda o: o.family):
        lines.append(f"{o.family:24s} {o.status:8s} {o.route:7s} " + " | ".join(o.paths.get(p, "-") for p in PATHS))
    return "\n".join(lines)


@pytest.mark.parametrize("family", zoo.families())
def test_family_is_exact_or_refused(family):
    with torch.inference_mode(False):
        torch.set_num_threads(max(1, torch.get_num_threads()))
        outcome = sweep(family)
    RESULTS[family] = outcome
    if family in KNOWN_FAILING:
        assert outcome.status == "failing", f"{family} now passes: remove it from KNOWN_FAILING"
        pytest.xfail(f"{family}: {KNOWN_FAILING[family]} ({outcome.problems()})")
    assert outcome.status != "failing", f"{family}: {outcome.problems()}"


def test_the_family_list_is_transformers_own():
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    names = zoo.families()
    assert "llama" in names and "mamba" in names and "bart" not in names
    assert set(zoo.EXCLUDED) <= set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)  # an exclusion names a real family
    assert all(why for why in zoo.EXCLUDED.values())
