"""iso/cmp's sampled procedure for the sampling check: the authors' generation-mode prompt at T = 0.7, top-p 0.9.

Direct settings with and without the neutral option; unit = context pair
within a setting. Exact side: the task's parse-exact distribution (their
prompt, their sampling, their extractor) and the expectation of their K-sample
Parity Gap; beside it, the first-token label estimator at probe's probability
cue.

Parser (``insait-institute/to_cmp_or_not_to_cmp``,
``src/result_analysis/extractor.py`` and ``misc.py``): the generation is
wrapped as ``"\\boxed{" + text + "}"``, lower-cased, and the last
``boxed{<key>}`` with a key of their answer map (iso ``yes/no/y/n/skip/s``,
cmp ``a/b/c``) is the answer. It is applied as they do, to a generation after
their generation-mode prompt (footer "... inside \\boxed{}. My answer would be:
\\boxed{"), the procedure their sampled runs use.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from probe.metrics.certified import point_answer
from probe.metrics.hybrid import hybrid_probs
from probe.tasks.cmp_iso.metrics import CmpIsoObservation, summarize
from probe.tasks.cmp_iso.parse import authors_label
from probe.tasks.cmp_iso.parsed import pair_preferences
from probe.tasks.cmp_iso.prompts import AUTHORS_ANSWER_MAPS, last_boxed
from probe.tasks.paper_check import (PaperCheck as _Base, PromptCase, Scored, counted_label, label_ids, parse_stats,
                                     sampling_entry)

__all__ = ["PaperCheck", "parse_cmp_iso"]


def parse_cmp_iso(text: str, task_type: str) -> str | None:
    """The label the authors' extractor reads from one generation (None: unparsable): the task's own
    :func:`probe.tasks.cmp_iso.prompts.last_boxed`, the text continuing their ``\\boxed{`` cue.

    >>> [parse_cmp_iso(t, "iso") for t in ("Yes}", "yes", " Yes}", "\\\\boxed{N}", "Maybe}")]
    ['Yes', 'Yes', None, 'No', None]
    >>> parse_cmp_iso("A} because \\\\boxed{b}", "cmp")
    'B'
    """

    answer = last_boxed(text, tuple(sorted(set(AUTHORS_ANSWER_MAPS[task_type].values()))))
    return answer.named if answer is not None else None


class PaperCheck(_Base):
    """iso/cmp direct settings: unit = context pair within a setting; headline: the Parity Gap of iso and cmp.
    The exact side is the published run's answer per prompt: with ``parse_tail: hybrid`` (the default) the
    enumerated head plus its sampled tail (:func:`probe.metrics.hybrid.hybrid_probs`), given a parse."""

    max_new_tokens = 8
    sampler = "cmp_iso"
    unit = "context pair (per setting)"
    metric = "Parity Gap (iso, cmp), direct with and without the neutral option"
    parse_exact = True
    benchmarks = ("stereoset", "bbq", "winobias")
    settings_list = ({"reasoning": "direct", "neutral": False}, {"reasoning": "direct", "neutral": True})

    def config(self, task: Any, n_prompts: int, seed: int, max_new_tokens: int | None) -> Any:
        # 4 prompts per pair x settings x benchmarks; the published run's parse settings are the config's defaults
        max_pairs = max(1, math.ceil(n_prompts / 4 / len(self.benchmarks) / len(self.settings_list)))
        budget = {} if max_new_tokens is None else {"parse_max_new_tokens": int(max_new_tokens)}
        return task.make_config({"benchmarks": list(self.benchmarks), "max_pairs": max_pairs, "seed": seed,
                                 "settings": [dict(x) for x in self.settings_list], **budget})

    def cases(self, scored: Scored) -> list[PromptCase]:
        self.tokenizer = scored.tokenizer
        self.parse_stats = parse_stats(scored.parsed)
        preqs = scored.parse_requests
        cases = []
        for req, rec in zip(scored.requests, scored.records):
            e = sampling_entry(rec.details, scored.spec)
            mass = float(e["mass"]) if e and e.get("mass") is not None else 0.0
            probs = [float(x) for x in e["probs"]] if e else None
            ok = probs is not None and all(math.isfinite(x) for x in probs) and mass > 0
            d = scored.parsed[rec.id]
            # the published run's answer: with the hybrid (the default) the exact head plus its own tail draws
            # (a closed head: exact); an exact-only run publishes the renormalising rule
            answer = hybrid_probs(d, None if d.get("hybrid") else point_answer)
            raw = [float(answer.get(x, 0.0)) for x in req.labels]
            acc = math.fsum(raw)
            m = rec.meta
            cases.append(PromptCase(id=rec.id, unit=f"{m['setting']}|{m['benchmark']}|{m['context_pair_id']}",
                                    prompt=preqs[rec.id].prompt, options=tuple(req.labels),
                                    exact=[x / acc for x in raw] if acc > 0 else None, exact_mass=acc,
                                    meta={**dict(m), "baseline": probs if ok else None, "parsed": d}))
        return cases

    def parse(self, case: PromptCase, text: str) -> int | None:
        label = authors_label(text, case.meta["task_type"], case.options)
        return case.options.index(label) if label is not None else None

    def counted(self, case: PromptCase, text: str) -> bool:
        return counted_label(self.tokenizer, text, label_ids(self.tokenizer, list(case.options)))

    def metrics(self, rows: list[tuple[str, PromptCase, np.ndarray | None]]) -> dict[str, float]:
        out: dict[str, float] = {}
        for setting in sorted({c.meta["setting"] for _, c, _ in rows}):
            obs = []
            for key, c, d in rows:
                if c.meta["setting"] != setting:
                    continue
                counts = {x: 0.0 for x in c.options} if d is None else {x: float(v) for x, v in zip(c.options, d)}
                obs.append(CmpIsoObservation(key, c.meta["task_type"], c.meta["target"], c.meta["order"], counts))
            s = summarize(obs, allow_incomplete=True)
            out[f"PG iso ({setting})"] = s.iso.pg
            out[f"PG cmp ({setting})"] = s.cmp.pg
            out[f"n pairs ({setting})"] = s.iso.n_pairs
        return out

    def exact_metrics(self, cases: list[PromptCase], k: int) -> dict[str, float]:
        """The authors' K-sample Parity Gap, its expectation over K generations per prompt (this check's K)
        from each prompt's published answer (:mod:`probe.tasks.cmp_iso.parsed`: the exact head plus its own
        tail draws; the rule without them), over every pair, as the sampled side counts them."""

        frame = pd.DataFrame([{**{f: c.meta[f] for f in ("setting", "benchmark", "context_pair_id", "task_type",
                                                           "target", "order")}, "parsed": c.meta["parsed"]}
                              for c in cases])
        out: dict[str, float] = {}
        rows = pair_preferences(frame, k, lambda d: hybrid_probs(d, None if d.get("hybrid") else point_answer))
        for setting in sorted({c.meta["setting"] for c in cases}):
            for tt in ("iso", "cmp"):
                gaps = [r["gap"] for r in rows if r["setting"] == setting and r["task_type"] == tt]
                out[f"PG {tt} ({setting})"] = float(np.mean(gaps)) if gaps else math.nan
            out[f"n pairs ({setting})"] = sum(r["setting"] == setting and r["task_type"] == "iso" for r in rows)
        return out
