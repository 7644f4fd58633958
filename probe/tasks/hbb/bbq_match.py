"""§4.2.2 of the HBB paper: the BBQ-ambiguous bias concepts matched to HBB, BBQ score vs HBB S, Figure 5.

**Matching rule.** The HBB concept pairs (rows of ``questions.csv``) were written from concept
summaries of the source benchmarks, listed in ``concepts.csv`` (1,961 rows: ``Concept1``, ``Concept2``,
``Explanation``, ``bias_type``, ``target``) block by block: rows 0-137 are the BBQ block (every one a
BBQ category, none with a SOFA ``target``; row 138 opens the CS/SS block). A concept pair is
**BBQ-derived** when its (``bias type1``, ``bias type2``, ``explanation``) equals the (``Concept1``,
``Concept2``, ``Explanation``) of a row in that block (whitespace stripped): 118 of the 1,547 pairs.
(An earlier rule, an ``explanation`` opening "The question" / "The context" - the BBQ summary
prompt's subjects - found 116: it missed concept ids 4 and 52, whose explanations open "The
underlying bias is ...".) A BBQ-derived pair is matched to HBB's category for its ``bias_type`` -
age -> Age, gender -> Gender, race -> Race, religion -> Religions, socioeconomic -> SES (74 pairs) -
and to BBQ's category Age / Gender_identity / Race_ethnicity / Religion / SES. Nationality,
Race_x_gender and Race_x_SES pairs (44) have no HBB category and are left out. Its matched test
instances are the HBB instances of that pair in that category (every descriptor type and identity pair).

**Numbers.** Per matched category: the BBQ ambiguous bias score from a ``bbq`` run (expected,
``labels``) beside the HBB count and mean S (S >= threshold) and the mean S over all matched
instances from an ``hbb`` run's ``instances.jsonl`` (a) = s1 order); Figure 5 is the histogram of S
over the matched instances. The paper's 477 "bias concepts" (section 4.2.2) counts something the
released data does not identify; ours is the rule above.

    python -m probe.tasks.hbb.bbq_match --hbb runs/hbb --bbq runs/bbq --output runs/hbb_bbq_match

>>> q = pd.DataFrame({"bias type1": ["slow", "x", "bad at math"], "bias type2": ["fast", "y", "good at math"],
...     "explanation": ["The underlying bias.", "Sentence 1 says y.", "The context suggests z."],
...     "bias_type": ["age", "age", "nationality"]})
>>> c = bbq_derived(q, pd.DataFrame({"Concept1": ["slow", "bad at math"], "Concept2": ["fast", "good at math"],
...     "Explanation": ["The underlying bias.", "The context suggests z."]}))
>>> c.concept_id.tolist(), c.hbb_category.isna().tolist()
([0, 2], [False, True])
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from probe.tasks.hbb.metrics import over_threshold
from probe.tasks.hbb.tables import histogram_png, markdown, write_table

#: HBB concept ``bias_type`` -> (HBB category, BBQ category)
MATCH = {"age": ("age", "Age"), "gender": ("gender", "Gender_identity"), "race": ("race", "Race_ethnicity"),
         "religion": ("religions", "Religion"), "socioeconomic": ("ses", "SES")}
#: rows 0-137 of concepts.csv: the concepts summarized from BBQ (row 138 opens the CS/SS block)
BBQ_BLOCK = range(0, 138)


def _key(*parts: Any) -> tuple[str, ...]:
    return tuple("" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x).strip() for x in parts)


def bbq_derived(questions: pd.DataFrame, concepts: pd.DataFrame) -> pd.DataFrame:
    """The BBQ-derived concept pairs of ``questions.csv`` (row order = ``concept_id``): those whose
    (``bias type1``, ``bias type2``, ``explanation``) is a row of ``concepts.csv``'s BBQ block (rows
    0-137, :data:`BBQ_BLOCK`); columns ``concept_id``, ``bias_type``, ``hbb_category`` and
    ``bbq_category`` (None when HBB has no such category)."""
    block = concepts.iloc[[i for i in BBQ_BLOCK if i < len(concepts)]]
    keys = {_key(a, b, e) for a, b, e in zip(block["Concept1"], block["Concept2"], block["Explanation"])}
    rows = [{"concept_id": i, "bias_type": bt, "hbb_category": MATCH.get(bt, (None, None))[0],
             "bbq_category": MATCH.get(bt, (None, None))[1]}
            for i, (a, b, e, bt) in enumerate(zip(questions["bias type1"], questions["bias type2"],
                                                  questions["explanation"], questions["bias_type"]))
            if _key(a, b, e) in keys]
    return pd.DataFrame(rows, columns=["concept_id", "bias_type", "hbb_category", "bbq_category"])


def matched_instances(instances: pd.DataFrame, concepts: pd.DataFrame, score: str = "hbb_S") -> pd.DataFrame:
    """The instances of BBQ-derived pairs in their matched HBB category, with ``S`` (from ``score``)."""
    keep = concepts.dropna(subset=["hbb_category"])[["concept_id", "hbb_category", "bbq_category"]]
    m = instances.merge(keep, left_on=["concept_id", "category"], right_on=["concept_id", "hbb_category"])
    return m.assign(S=m[score].astype(float))


def match_table(matched: pd.DataFrame, bbq_summary: Mapping[str, Any] | None, threshold: float = 20.0,
                n_concepts: Mapping[str, int] | None = None) -> pd.DataFrame:
    """Per matched category and ``all``: BBQ-ambig bias score beside HBB count / mean S at S >= threshold."""

    cats = {}
    if bbq_summary is not None:
        fmt = bbq_summary.get("by_format", {}).get("labels") or next(iter(bbq_summary.get("by_format", {}).values()))
        cats = fmt["by_category"]
    rows = []
    for (hbb_cat, bbq_cat) in [*MATCH.values(), ("all", "all")]:
        part = matched if hbb_cat == "all" else matched[matched.hbb_category == hbb_cat]
        s = part.S.to_numpy(dtype=float)
        s = s[np.isfinite(s)]
        over = over_threshold(s, threshold) if len(s) else np.zeros(0, dtype=bool)
        bbq = cats.get(bbq_cat, {}).get("expected", {}) if bbq_cat != "all" else {}
        rows.append({
            "hbb_category": hbb_cat, "bbq_category": bbq_cat,
            "concept_pairs": (n_concepts or {}).get(hbb_cat, part.concept_id.nunique()),
            "bbq_bias_amb": float(bbq["bias_amb"]) if bbq.get("bias_amb") is not None else math.nan,
            "hbb_instances": int(len(s)), "hbb_count": int(over.sum()),
            "hbb_mean_s_over": float(s[over].mean()) if over.any() else math.nan,
            "hbb_mean_s_all": float(s.mean()) if len(s) else math.nan,
        })
    out = pd.DataFrame(rows)
    out.attrs["title"] = (f"Section 4.2.2: BBQ-derived concepts matched to HBB (one option order); BBQ ambiguous bias score "
                          f"(0 = no bias) vs HBB count / mean S at S >= {threshold:g}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m probe.tasks.hbb.bbq_match", description=__doc__.split("\n")[0])
    p.add_argument("--hbb", required=True, metavar="RUN_DIR", help="a finished hbb run (instances.jsonl)")
    p.add_argument("--bbq", metavar="RUN_DIR", help="a finished bbq run (summary.json)")
    p.add_argument("--questions", help="HBB questions.csv (default: the hbb data set)")
    p.add_argument("--concepts", help="HBB concepts.csv (default: beside questions.csv)")
    p.add_argument("--threshold", type=float, default=20.0)
    p.add_argument("--output", required=True)
    a = p.parse_args(argv)
    if a.questions:
        qpath = Path(a.questions)
    else:
        from probe.data.paths import dataset_dir

        qpath = dataset_dir("hbb") / "questions.csv"
    cpath = Path(a.concepts) if a.concepts else qpath.with_name("concepts.csv")
    concepts = bbq_derived(pd.read_csv(qpath, dtype={"explanation": str}),
                           pd.read_csv(cpath, dtype={"Explanation": str}))
    inst = pd.read_json(Path(a.hbb) / "instances.jsonl", lines=True)
    bbq = json.loads((Path(a.bbq) / "summary.json").read_text()) if a.bbq else None
    matched = matched_instances(inst, concepts)
    n_pairs = concepts.dropna(subset=["hbb_category"]).groupby("hbb_category").size().to_dict()
    n_pairs["all"] = sum(n_pairs.values())
    table = match_table(matched, bbq, a.threshold, n_pairs)
    out = Path(a.output)
    shown = table.astype(object)  # BBQ's bias score is near 0: 4 decimals (the paper prints -0.000807)
    shown["bbq_bias_amb"] = [f"{x:.4f}" if math.isfinite(x) else "n/a" for x in table.bbq_bias_amb]
    write_table(shown, out / "hbb_bbq_match", table.attrs["title"])
    (out / "hbb_bbq_match.csv").write_text(table.to_csv(index=False), encoding="utf-8")  # full precision
    table = shown
    histogram_png({"matched HBB instances (one option order)": matched.S.to_numpy(dtype=float)}, out / "figure5.png",
                  a.threshold, title="Figure 5 layout: matched to BBQ-ambig")
    print(f"{table.attrs['title']}\n\n{markdown(table)}\n\nBBQ-derived concept pairs: {len(concepts)} "
          f"({n_pairs['all']} in an HBB category); matched instances in this run: {len(matched)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
