"""The sampling check's run: the task's exact side, K sampled generations per prompt, the aggregate comparison.

:func:`run_check` drives any task that declares a paper check
(:class:`probe.tasks.paper_check.PaperCheck`); the steps are in the package's
docstring (:mod:`probe.studies.sampling_check`).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from probe.errors import ProbeError
from probe.metrics.hybrid import has_draws
from probe.metrics.stats import percentile_ci, resample_clusters
from probe.scoring.hybrid import wilson
from probe.tasks.paper_check import PaperCheck, PromptCase, Scored

__all__ = ["SamplingCheck", "answer_tokens", "chance_outside", "checked_tasks", "detectable_difference",
           "draw_quantile", "inside", "joint_ranges", "outside_certified", "paper_check_of",
           "parse_mass_interval", "predicted_draws", "predicted_range", "prompt_row", "redrawn", "run_check",
           "tv_distance"]


def paper_check_of(task: str) -> tuple[Any, PaperCheck]:
    """``task``'s :class:`~probe.tasks.base.Task` and a fresh :class:`~probe.tasks.paper_check.PaperCheck`; a task
    that declares none (or an unknown name) is an error listing those that do (checked before a model loads)."""
    from probe.tasks import available, get

    the_task = get(task) if task in available() else None
    paper = the_task.paper_check() if the_task is not None else None
    if paper is None:
        raise ProbeError(f"probe validate sampling: no check for task {task!r}; choose from "
                         f"{', '.join(checked_tasks())}")
    return the_task, paper


def checked_tasks() -> list[str]:
    """The tasks that declare a paper check (``Task.paper_check()`` not None), in registry order."""
    from probe.tasks import available, get

    return [name for name in available() if get(name).paper_check() is not None]


def inside(value: float, lo: float, hi: float, resolution: float) -> bool | None:
    """Whether ``value`` lies in ``[lo, hi]`` widened by ``resolution`` (one generation's worth of a share,
    ``1 / (K x prompts)``): a sampled interval is a set of finite-sample values, so a degenerate one
    (every resample 0) still holds an exact 1e-14. None when either side is NaN.

    >>> inside(1e-14, 0.0, 0.0, 1 / 2400), inside(0.2, 0.0, 0.0, 1 / 2400), inside(0.5, 0.1, 0.9, 0.0)
    (True, False, True)
    """
    if value != value or lo != lo or hi != hi:
        return None
    return bool(lo - resolution <= value <= hi + resolution)


def tv_distance(p: Sequence[float], q: Sequence[float]) -> float:
    """Total variation distance ``0.5 * sum |p_i - q_i|``; for two options ``|p_0 - q_0|``.

    >>> round(tv_distance([0.7, 0.3], [0.5, 0.5]), 12), tv_distance([1, 0, 0], [0, 0.5, 0.5])
    (0.2, 1.0)
    """
    return float(0.5 * np.abs(np.asarray(p, float) - np.asarray(q, float)).sum())


@dataclass
class SamplingCheck:
    """The check's result: settings, per-prompt rows and the aggregate comparison."""

    task: str
    model: str
    settings: dict
    prompts: list[dict]
    aggregate: dict
    summary: dict

    def to_dict(self) -> dict:
        return asdict(self)

def _cases(task: Any, check: PaperCheck, runner: Any, n_prompts: int, seed: int,
           max_new_tokens: int | None) -> tuple[list[PromptCase], dict]:
    """The exact side: the task's sample scored with its paper's sampling spec (and, for a parse-exact check,
    its parse requests enumerated), as the check's cases; and the check's settings (the paper's temperature
    and top-p are the task's own sampling spec for that sample)."""
    cfg = check.config(task, n_prompts, seed, max_new_tokens)
    items = list(task.select(cfg, task.items(cfg), None))
    tok = runner.lm.tokenizer
    reqs = check.requests(task, cfg, items, tok)
    spec = task.sampling(cfg)[0]
    records = runner.score(reqs, None, task=task.name, sampling=(spec,))
    preqs: dict[str, Any] = {}
    parsed: dict[str, Any] = {}
    if check.parse_exact:
        preqs = {p.id: p for p in task.parse_requests(cfg, items, tok)}
        parsed = runner.parse([preqs[r.id] for r in reqs], None, task=task.name)
    # a parse-exact check samples as long an answer as the published estimator reads (the task config's
    # parse_max_new_tokens, or its hybrid tail's longer budget: HBB's 2048 tokens)
    published = max((answer_tokens(p) for p in preqs.values()), default=None)
    budget = int(max_new_tokens if max_new_tokens is not None else published or check.max_new_tokens)
    cases = check.cases(Scored(items=items, requests=list(reqs), records=list(records), spec=spec,
                               parse_requests=preqs, parsed=parsed, tokenizer=tok))
    from probe.studies.sampling_check.judge import JUDGE, sampler_settings

    settings = {**sampler_settings(check.sampler, float(spec["temperature"]), float(spec["top_p"])),
                "max_new_tokens": budget, "unit": check.unit, "metric": check.metric, "sampled_by": JUDGE}
    if check.parse_exact:
        keys = ("max_new_tokens", "residual", "max_nodes", "answer_residual",
                *(k for k in ("tail", "tail_max_new_tokens") if hasattr(cfg, f"parse_{k}")))
        settings["parse"] = {k: getattr(cfg, f"parse_{k}", None) for k in keys}
    return cases, settings


def answer_tokens(request: Any) -> int:
    """The answer length a parse request's published estimate reads: its hybrid tail's budget where the tail
    samples past the enumeration (:func:`probe.scoring.hybrid.opens_at_budget`), else the enumeration's."""
    from probe.scoring.hybrid import opens_at_budget

    return int(request.tail.max_new_tokens if opens_at_budget(request) else request.max_new_tokens)


def _dist(answers: np.ndarray, n_options: int) -> np.ndarray | None:
    """Distribution of the accepted answers (-1 = not accepted); None when none is accepted."""
    ok = answers[answers >= 0]
    if ok.size == 0:
        return None
    return np.bincount(ok, minlength=n_options)[:n_options] / ok.size


def prompt_row(paper: PaperCheck, c: PromptCase, gen: list[str], rng: np.random.Generator) -> tuple[dict, Any]:
    """One prompt's row of the check (its K generations ``gen`` parsed and compared with the exact side) and
    its sampled answer distribution (None when no generation parses). A prompt whose sampled answers parse
    where the enumeration found no parse at all is a ``miss``, with |Δ| = 1: the exact side gives it no
    distribution, which is as far off as one can be (it is not left out)."""
    k = len(gen)
    parsed = [paper.parse(c, t) for t in gen]
    counted = [paper.counted(c, t) for t in gen]
    a = np.array([-1 if x is None else int(x) for x in parsed])
    d = _dist(a, len(c.options))
    n_acc = int((a >= 0).sum())
    # a hybrid prompt whose head and tail draws read nothing can still parse: judged on its interval instead
    lo_hi = parse_mass_interval(c)
    miss = d is not None and c.exact is None and lo_hi is None
    delta = 1.0 if miss else tv_distance(d, c.exact) if d is not None and c.exact is not None else math.nan
    base = c.meta.get("baseline")
    rec = c.meta.get("parsed")
    residual = c.meta.get("parse_residual", rec.get("residual") if isinstance(rec, dict) else None)
    return {
        "baseline_probs": base,
        "baseline_abs_delta": tv_distance(d, base) if d is not None and base is not None else math.nan,
        "id": c.id, "unit": c.unit, "options": list(c.options),
        "accepted_share": n_acc / k, "counted_share": float(np.mean(counted)),
        "exact_counted_share": c.exact_mass,
        # the mass the enumeration left (its point rule answers it in the enumerated mix)
        "exact_residual": None if residual is None else float(residual),
        "accepted_not_counted": int(sum(x is not None and not y for x, y in zip(parsed, counted))),
        "counted_not_accepted": int(sum(x is None and y for x, y in zip(parsed, counted))),
        "sampled_probs": None if d is None else [float(x) for x in d],
        "exact_probs": c.exact, "abs_delta": delta, "miss": miss,
        **({"exact_mass_interval": list(lo_hi),
            "accepted_inside_interval": _overlaps(wilson(n_acc, k), lo_hi)} if lo_hi is not None else {}),
        "noise_delta": _noise_delta(c.exact, n_acc, rng) if c.exact is not None and n_acc else math.nan,
        "generations": gen, "parsed": [None if x is None else c.options[x] for x in parsed], "counted": counted,
    }, d


def parse_mass_interval(case: PromptCase) -> tuple[float, float] | None:
    """A hybrid prompt's 95 % interval of its parsed mass (the chance one sample parses): the head's parsed
    mass plus the residual times the Wilson interval of the tail draws' parsed share; None for a prompt
    without tail draws."""
    d = case.meta.get("parsed")
    if not has_draws(d):
        return None
    h = d["hybrid"]
    n = int(h["n_tail"])
    parsed = n - int(h["tail"].get("none", 0))
    lo, hi = wilson(parsed, n)
    head, r = math.fsum(float(p) for p in d["probs"].values()), float(d["residual"])
    return head + r * lo, head + r * hi


def _overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return bool(a[0] <= b[1] and b[0] <= a[1])


def _noise_delta(p: Sequence[float], n: int, rng: np.random.Generator, draws: int = 200) -> float:
    """Mean TV distance between ``p`` and the empirical distribution of ``n`` draws from it (sampling noise)."""
    if n <= 0:
        return math.nan
    x = rng.multinomial(n, np.asarray(p, float) / np.sum(p), size=draws) / n
    return float(0.5 * np.abs(x - np.asarray(p, float)).sum(axis=1).mean())


def predicted_range(paper: PaperCheck, units: dict[str, list[PromptCase]], k: int, rng: np.random.Generator,
                    draws: int = 1000, level: float = 0.95) -> dict[str, tuple[float, float]]:
    """Where the sampled metrics would fall if the exact side were the truth: each draw samples, for every
    prompt of the check (the same prompts, not resampled), how many of its K generations parse (binomial in
    its parsed mass) and their answers (multinomial in its distribution given a parse), then the metrics;
    the central ``level`` range of each metric over ``draws``. This is the noise a same-prompts comparison
    has; the unit bootstrap also spreads over which items were drawn, and it can not see an answer the
    sample missed (a rare answer of one prompt).

    Needs the cases' ``exact_mass`` (the chance a generation is read) and ``exact`` (the distribution given
    that it is)."""
    return {m: percentile_ci(v, level) for m, v in predicted_draws(paper, units, k, rng, draws).items()}


def predicted_draws(paper: PaperCheck, units: dict[str, list[PromptCase]], k: int, rng: np.random.Generator,
                    draws: int = 1000, tail: bool = False) -> dict[str, list[float]]:
    """The draws behind :func:`predicted_range`: per metric, its value in each of ``draws`` simulated K-sample
    runs on these prompts. With ``tail``, each draw first redraws every hybrid prompt's answer from its tail
    draws' uncertainty (:func:`redrawn`), so the range holds the exact side's own 95 % interval as well as
    the K-sample noise."""
    from probe.metrics.hybrid import TailPool

    vals: dict[str, list[float]] = {}
    flat = [(u, c) for u, cs in units.items() for c in cs]
    # the tail's answer rate is shared by the prompts, as the hybrid's interval shares it
    pool = TailPool.of(c.meta.get("parsed") for _u, c in flat if isinstance(c.meta.get("parsed"), dict))
    for _ in range(draws):
        rows = []
        rate = pool.draw_rate(rng) if tail else None
        for u, c in flat:
            d = None
            exact, mass = redrawn(paper, c, rng, pool, rate) if tail else (c.exact, c.exact_mass)
            if exact is not None and mass > 0:
                n = int(rng.binomial(k, min(1.0, float(mass))))
                if n:
                    p = np.clip(np.asarray(exact, float), 0.0, None)
                    d = rng.multinomial(n, p / p.sum()) / n
            rows.append((u, c, d))
        for m, v in paper.metrics(rows).items():
            vals.setdefault(m, []).append(v)
    return vals


def redrawn(paper: PaperCheck, case: PromptCase, rng: np.random.Generator, pool: Any = None,
            rate: float | None = None) -> tuple[list[float] | None, float]:
    """One draw of a hybrid prompt's answer (its distribution given a parse, and its parsed mass): the head plus
    the residual times tail shares drawn as the hybrid's interval draws them
    (:func:`probe.metrics.hybrid.drawn_shares`, with the prompts' :class:`~probe.metrics.hybrid.TailPool` and
    this draw's pooled ``rate``; default: the prompt alone); the case's own values for a prompt without tail
    draws."""
    from probe.metrics.hybrid import drawn_shares, has_draws, hybrid_probs

    d = case.meta.get("parsed")
    if not has_draws(d):
        return case.exact, case.exact_mass
    shares = drawn_shares(d, rng, paper.answer_keys(case), pool, rate)
    raw = paper.answer_masses(case, hybrid_probs(d, lambda x: x["probs"], shares))
    mass = math.fsum(raw)
    return ([x / mass for x in raw], mass) if mass > 0 else (None, 0.0)


def outside_certified(paper: PaperCheck, case: PromptCase) -> bool:
    """Whether a parse-exact prompt's published answer masses leave its certified interval: per option, the
    enumerated mass up to that plus the whole residual, the point being the masses the check compares
    (``exact`` x ``exact_mass``). It should never be; a prompt without a parse record: False."""
    d = case.meta.get("parsed")
    if not isinstance(d, dict) or case.exact is None:
        return False
    head = paper.answer_masses(case, {str(a): float(p) for a, p in d["probs"].items()})
    point = [float(x) * float(case.exact_mass) for x in case.exact]
    r, eps = float(d["residual"]), 1e-9
    return any(not (h - eps <= p <= h + r + eps) for h, p in zip(head, point))


def draw_quantile(value: float, draws: Sequence[float]) -> float:
    """Where ``value`` falls among ``draws`` (NaN draws left out): the share below it plus half the share
    equal to it (mid-rank), so a value drawn like them is uniform on [0, 1] and seeds' quantiles pool; NaN
    when the value or every draw is NaN.

    >>> draw_quantile(2.0, [1.0, 2.0, 3.0, 4.0]), draw_quantile(0.0, [1.0, float("nan")]), draw_quantile(5.0, [1.0])
    (0.375, 0.0, 1.0)
    """
    v = np.asarray([x for x in draws if x == x], float)
    if value != value or v.size == 0:
        return math.nan
    return float(((v < value).sum() + 0.5 * (v == value).sum()) / v.size)


#: z of 80 % power: a true shift of (z of the test + this) standard deviations of the same-prompts draws is
#: detected four times in five
_POWER_Z80 = 0.841621


def detectable_difference(draws: Sequence[float], level: float = 0.95) -> float:
    """The smallest shift of a metric the same-prompts test detects with 80 % power, from its draws under the
    exact side (normal approximation: ``(z_(1 - (1 - level) / 2) + z_0.8) x sd``), where ``level`` is the
    metric's own range level (:func:`joint_ranges`); NaN without spread.

    >>> round(detectable_difference([0.0, 1.0] * 50), 3)
    1.408
    """
    from scipy.stats import norm

    v = np.asarray([x for x in draws if x == x], float)
    z = float(norm.ppf(1.0 - (1.0 - level) / 2.0)) + _POWER_Z80
    return float(z * v.std(ddof=1)) if v.size > 1 else math.nan


def joint_ranges(draws: dict[str, list[float]], level: float = 0.95, resolution: float = 0.0,
                 steps: int = 40) -> tuple[dict[str, tuple[float, float]], float]:
    """Ranges that hold every tested metric at once in ``level`` of the exact side's draws, and the one
    per-metric level they share.

    The verdict fails when any metric leaves its range, so ranges of 95 % each would fail a right exact side
    in up to 1 - 0.95^n of runs (35 % for 8 metrics). Each metric's range is its central range at a common
    per-metric level: the smallest on an even grid from ``level`` to the Bonferroni level
    ``1 - (1 - level) / n`` at which at least ``level`` of the draws have every tested metric inside (metrics
    move together, so it is usually below Bonferroni's; Bonferroni's when the grid never reaches ``level``).
    Tested metrics and "inside" are as in :func:`chance_outside`; the others get their central ``level``
    range.

    >>> d = {"a": [float(i) for i in range(1001)], "b": [float(i) for i in range(1001)], "n a": [1] * 1001}
    >>> r, each = joint_ranges(d)
    >>> each, r["a"] == r["b"]
    (0.95, True)
    """
    ranges = {m: percentile_ci(v, level) for m, v in draws.items()}
    names = [m for m in ranges if not m.startswith("n") and all(math.isfinite(x) for x in ranges[m])]
    n = min((len(draws[m]) for m in names), default=0)
    if len(names) < 2 or n == 0:
        return ranges, level
    values = {m: np.asarray(draws[m][:n], float) for m in names}
    bonferroni = 1.0 - (1.0 - level) / len(names)
    for each in np.linspace(level, bonferroni, steps + 1):
        trial = {m: percentile_ci(values[m], float(each)) for m in names}
        out = np.zeros(n, bool)
        for m in names:
            lo, hi = trial[m]
            v = values[m]
            # a NaN draw is inside, as in :func:`chance_outside`; a draw on an end stays in despite the
            # quantile's interpolation rounding
            slack = resolution + 1e-12 * (1.0 + max(abs(lo), abs(hi)))
            out |= np.isfinite(v) & ((v < lo - slack) | (v > hi + slack))
        if 1.0 - out.mean() >= level - 1e-12:
            ranges.update(trial)
            return ranges, float(each)
    ranges.update({m: percentile_ci(values[m], bonferroni) for m in names})
    return ranges, float(bonferroni)


def run_check(task: str, runner: Any, *, n_prompts: int = 100, k: int = 20, seed: int = 0,
              max_new_tokens: int | None = None, batch_size: int = 32, n_boot: int = 1000,
              progress: bool = False, prompts_per_call: int = 1) -> SamplingCheck:
    """Run the sampling check for ``task`` (a task whose ``paper_check()`` is not None, :func:`checked_tasks`)
    with a :class:`probe.runs.runner.Runner`; ``prompts_per_call``: prompts sharing one generate call on the
    sampled side (:func:`probe.studies.sampling_check.judge.judge_texts`); ``progress``: a bar over the
    sampled side's prompts."""
    the_task, paper = paper_check_of(task)
    if k < 1 or n_prompts < 1:
        raise ProbeError("probe validate sampling: --k and --n-prompts must be positive")
    lm = runner.lm
    t0 = time.perf_counter()
    cases, settings = _cases(the_task, paper, runner, n_prompts, seed, max_new_tokens)
    t1 = time.perf_counter()
    if not cases:
        raise ProbeError(f"probe validate sampling {task}: the sample has no prompts")
    from probe.studies.sampling_check.judge import judge_texts

    bar = None
    if progress:  # the sampled side is the check's long part (K generations a prompt)
        from tqdm.auto import tqdm

        bar = tqdm(total=len(cases), unit="prompt", desc="sampling", leave=False)
    try:
        per_case = judge_texts(lm, [c.prompt for c in cases], k, seed, settings, int(settings["max_new_tokens"]),
                               keys=[c.id for c in cases], prompts_per_call=prompts_per_call,
                               progress=None if bar is None else (lambda done: bar.update(done - bar.n)))
    finally:
        if bar is not None:
            bar.close()
    texts = [t for gen in per_case for t in gen]
    t2 = time.perf_counter()
    rng = np.random.default_rng(seed)
    rows, sampled_dist = [], {}
    for i, c in enumerate(cases):
        row, sampled_dist[c.id] = prompt_row(paper, c, texts[i * k:(i + 1) * k], rng)
        rows.append(row)
    exact = paper.exact_metrics(cases, k)
    # the exact estimate on the prompts the sampled run could score (separates coverage from estimator)
    exact_same = paper.metrics([(u, c, np.asarray(c.exact)) for u, cs in paper.units(cases).items() for c in cs
                                  if c.exact is not None and sampled_dist[c.id] is not None]) \
        if paper.same_prompts else {}
    units = paper.units(cases)
    # the estimator the exact side replaced (first-token / scored answer texts), where the task's check keeps it
    has_base = any(c.meta.get("baseline") is not None for c in cases)
    baseline = paper.metrics([(u, c, None if c.meta.get("baseline") is None else np.asarray(c.meta["baseline"]))
                                for u, cs in units.items() for c in cs]) if has_base else {}
    sampled = paper.metrics([(u, c, sampled_dist[c.id]) for u, cs in units.items() for c in cs])
    # bootstrap over units (with replacement), each unit keeping its own K sampled answers: a unit's value
    # already carries its K-sample noise, so resampling the answers again would count that noise twice (and,
    # for a threshold count like HBB's S >= 20, shift the whole interval up)
    keys = list(units)
    boots: dict[str, list[float]] = {m: [] for m in sampled}
    for _ in range(n_boot):
        pick = resample_clusters(rng, len(keys))
        brows = []
        for copy, u in enumerate(pick):
            for c in units[keys[u]]:
                brows.append((f"{keys[u]}#{copy}", c, sampled_dist[c.id]))
        for m, v in paper.metrics(brows).items():
            boots[m].append(v)
    # the verdict: the exact side's prediction of the sampled value on these very prompts, and its power
    res = 1.0 / (k * len(cases))
    pdraws = predicted_draws(paper, units, k, rng, n_boot)
    # ranges that hold all the metrics together in 95 % of runs: the verdict is one test, not one per metric
    predicted, level_each = joint_ranges(pdraws, resolution=res)
    # with hybrid prompts, the same range with the exact side's own tail uncertainty too (its 95 % interval)
    tdraws = predicted_draws(paper, units, k, rng, n_boot, tail=True) \
        if any(has_draws(c.meta.get("parsed")) for c in cases) else {}
    with_tail, tail_level_each = joint_ranges(tdraws, resolution=res) if tdraws else ({}, 0.95)
    agg = {}
    for m, v in sampled.items():
        if m.startswith("n"):
            agg[m] = {"sampled": v, "exact": exact.get(m)}
            continue
        lo, hi = percentile_ci(boots[m])
        ex = exact.get(m, math.nan)
        agg[m] = {"exact": ex, "sampled": v, "ci_low": lo, "ci_high": hi,
                  "exact_inside": inside(ex, lo, hi, res),
                  "exact_same_prompts": exact_same.get(m),
                  **({"predicted_low": predicted[m][0], "predicted_high": predicted[m][1],
                      "sampled_inside_predicted": inside(v, *predicted[m], res),
                      "detectable_difference": detectable_difference(pdraws[m], level_each),
                      # where the sampled value falls among the exact side's draws (0.5: at their median):
                      # uniform when the exact side is right, so seeds pool (experiments/*/pool_seeds.py)
                      "sampled_quantile": draw_quantile(v, pdraws[m]),
                      # the metric's own central 95 % range, for information (the verdict's is joint)
                      **dict(zip(("predicted_95_low", "predicted_95_high"), percentile_ci(pdraws[m])))}
                     if m in predicted else {}),
                  **({"tail_low": with_tail[m][0], "tail_high": with_tail[m][1],
                      "sampled_inside_tail": inside(v, *with_tail[m], res),
                      # the verdict's power where the tail's range is the verdict
                      "tail_detectable_difference": detectable_difference(tdraws[m], tail_level_each),
                      "tail_sampled_quantile": draw_quantile(v, tdraws[m]),
                      **dict(zip(("tail_95_low", "tail_95_high"), percentile_ci(tdraws[m])))}
                     if m in with_tail else {}),
                  **({"baseline": baseline.get(m, math.nan),
                      "baseline_inside": inside(baseline.get(m, math.nan), lo, hi, res)}
                     if has_base else {})}
    deltas = np.array([r["abs_delta"] for r in rows], float)
    noise = np.array([r["noise_delta"] for r in rows], float)
    summary = {
        "n_prompts": len(cases), "n_units": len(units), "k": k, "n_generations": len(texts),
        "accepted_share": float(np.mean([r["accepted_share"] for r in rows])),
        "counted_share": float(np.mean([r["counted_share"] for r in rows])),
        "exact_counted_share": float(np.mean([r["exact_counted_share"] for r in rows])),
        "accepted_not_counted": int(sum(r["accepted_not_counted"] for r in rows)),
        "counted_not_accepted": int(sum(r["counted_not_accepted"] for r in rows)),
        "mean_abs_delta": _finite_mean(deltas),
        "mean_noise_delta": _finite_mean(noise),
        "n_delta": int(np.isfinite(deltas).sum()),
        **({"mean_abs_delta_baseline": _finite_mean([r["baseline_abs_delta"] for r in rows])} if has_base else {}),
        **({"parse_exact": paper.parse_stats} if getattr(paper, "parse_stats", None) else {}),
        "n_no_accepted": int(sum(r["sampled_probs"] is None for r in rows)),
        "n_exact_unsampleable": int(sum(c.exact is None for c in cases)),
        "n_misses": int(sum(r["miss"] for r in rows)),
        "delta_noise_ratio": _ratio(deltas, noise),
        "n_outside_certified": int(sum(outside_certified(paper, c) for c in cases)),
        "n_hybrid": int(sum(has_draws(c.meta.get("parsed")) for c in cases)),
        "n_judged_on_interval": int(sum("exact_mass_interval" in r and r["sampled_probs"] is not None and
                                        r["exact_probs"] is None for r in rows)),
        "n_accepted_outside_interval": int(sum(r.get("accepted_inside_interval") is False for r in rows)),
        "verdict": _verdict(agg),
        # how often the verdict's ranges miss by chance alone (about 5 %: they are joint), and how often as
        # many metrics as observed do: a reader weighs a failed verdict with them
        **chance_outside(tdraws or pdraws, with_tail or predicted, _n_outside(agg), res),
        # the per-metric level of the verdict's ranges (:func:`joint_ranges`)
        "range_level_each": tail_level_each if tdraws else level_each,
    }
    settings.update({"k": k, "seed": seed, "n_boot": n_boot, "batch_size": batch_size, "n_prompts": n_prompts,
                     "prompts_per_call": int(prompts_per_call)})
    summary["seconds"] = {"exact_scoring_and_items": round(t1 - t0, 1), "generation": round(t2 - t1, 1),
                          "parse_and_bootstrap": round(time.perf_counter() - t2, 1)}
    return SamplingCheck(task, str(getattr(lm, "name", "")), settings, rows, agg, summary)


def chance_outside(draws: dict[str, list[float]], ranges: dict[str, tuple[float, float]], observed: int,
                   resolution: float = 0.0) -> dict[str, Any]:
    """How often metrics fall outside their ranges by chance alone: over the exact side's draws (the ones the
    ``ranges`` come from, :func:`predicted_draws`), the share of draws in which at least one of the tested
    metrics lies outside its own range (the verdict's false-alarm rate when the exact side is right), and the
    share in which at least ``observed`` do (how surprising the observed count is). Count metrics (names
    starting with ``n``) and metrics without a finite range are not tested; a NaN draw is inside.

    >>> d = {"a": [0.0, 1.0, 2.0, 3.0], "b": [0.0, 0.0, 5.0, 5.0], "n a": [1, 2, 3, 4]}
    >>> chance_outside(d, {"a": (0.5, 2.5), "b": (0.0, 4.0), "n a": (2, 3)}, 2)
    {'n_tested': 2, 'n_outside_range': 2, 'chance_any_outside': 0.75, 'chance_as_many_outside': 0.25}
    """
    names = [m for m in ranges if not m.startswith("n") and m in draws
             and all(math.isfinite(x) for x in ranges[m])]
    n = min((len(draws[m]) for m in names), default=0)
    if not names or n == 0:
        return {"n_tested": len(names), "n_outside_range": int(observed), "chance_any_outside": math.nan,
                "chance_as_many_outside": math.nan}
    counts = np.zeros(n, int)
    for m in names:
        lo, hi = ranges[m]
        counts += [inside(float(v), lo, hi, resolution) is False for v in draws[m][:n]]
    need = max(1, int(observed))
    return {"n_tested": len(names), "n_outside_range": int(observed),
            "chance_any_outside": float(np.mean(counts >= 1)), "chance_as_many_outside": float(np.mean(counts >= need))}


def _n_outside(agg: dict) -> int:
    """How many metrics the verdict finds outside their range."""
    return sum(v.get("sampled_inside_tail", v.get("sampled_inside_predicted")) is False for v in agg.values())


def _verdict(agg: dict) -> str:
    """``pass`` when every aggregate metric's sampled value lies in the exact side's same-prompts range (with
    hybrid prompts: the range that holds the tail draws' uncertainty too), ``fail`` when one does not, ``n/a``
    when none could be tested (the unit bootstrap is for information only)."""
    tested = [v.get("sampled_inside_tail", v.get("sampled_inside_predicted")) for v in agg.values()]
    tested = [t for t in tested if t is not None]
    return "n/a" if not tested else "pass" if all(tested) else "fail"


def _ratio(deltas: np.ndarray, noise: np.ndarray) -> float:
    """Mean per-prompt |Δ| over mean K-sample noise |Δ|, on the prompts where both are finite (a miss has no
    noise: it is counted apart); NaN when none is.

    >>> _ratio(np.array([0.2, 1.0, 0.1]), np.array([0.1, np.nan, 0.2]))
    1.0
    """
    ok = np.isfinite(deltas) & np.isfinite(noise)
    return float(deltas[ok].mean() / noise[ok].mean()) if ok.any() and noise[ok].mean() > 0 else math.nan


def _finite_mean(values: Any) -> float:
    """The mean of the finite values; NaN (and no warning) when there is none."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else math.nan
