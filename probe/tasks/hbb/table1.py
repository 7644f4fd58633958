"""The HBB paper's Table 1 assembled from finished runs: HBB, BBQ-ambig, BBQ-disambig, CS, SS-intra, SS-inter.

Each column is read from the ``summary.json`` of the run that computes it (nothing is recomputed):

- **HBB (S, count)**: an ``hbb`` run, the a) = s1 order (the paper's setting): the mean S and the count
  of instances with S >= the threshold (``variants.hbb.overall``); beside them what the paper's
  10-sample estimator at T = 0.8 reports for the same probabilities (expected mean S and count) and the
  count its sampling noise alone gives (``paper_equivalent.all``, when the run computed it).
- **BBQ-ambig / BBQ-disambig**: a ``bbq`` run, answer format ``labels``, all categories, expected
  counts: the ambiguous bias score (Parrish et al., in (-1, 1), 0 = no bias) and 100 x the
  disambiguated accuracy (appendix D.1: "we directly compute the accuracy", 0-100).
- **CS**: a ``crows_pairs`` run (or an ``hbb`` run with ``crows_pairs: true``), the protocol named in
  the column: (a) the HBB paper's two-choice question by default, (b) whole-sentence causal log-likelihood (lm-evaluation-harness) on request.
- **SS-intra / SS-inter**: a ``stereoset`` run's icat per split, the protocol named in the column.

A cell whose run is missing (or lacks the number) is NaN and the table's ``notes`` say why.

    python -m probe.tasks.hbb.table1 --model smollm2 --hbb runs/hbb --bbq runs/bbq --crows runs/crows \
        --output runs/table1

>>> t = table1([table1_row("m", crows={"by_protocol": {"mcq": {"protocol": "mcq", "by_bias_type":
...     [{"bias_type": "all", "score": 61.0}]}}})])
>>> float(t.loc[0, "CS (50), (a) two-choice question"]), t.attrs["notes"][0].startswith("m: HBB")
(61.0, True)
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from probe.io import write_atomic
from probe.tasks.hbb.tables import markdown

#: short protocol names used in the column headers
#: the run directories Table 1 combines (one option each)
RUN_ARGS = ("hbb", "bbq", "crows", "stereoset")
CS_PROTOCOLS = {"mcq": "(a) two-choice question", "loglik": "(b) whole-sentence causal log-likelihood"}
SS_PROTOCOLS = {"mcq": "(a) three-choice question", "loglik": "(b) log-likelihood"}
TITLE = ("Table 1 layout: bias score across data sets. HBB (S, lower = less bias; count of S >= threshold, "
         "lower = less); BBQ-ambig (0 = no bias, in (-1, 1)); BBQ-disambig (accuracy x 100, higher = less bias); "
         "CS (50 = no bias); SS icat (100 = ideal)")

def _nan(x: Any) -> float:
    return math.nan if x is None else float(x)


def hbb_cells(summary: Mapping[str, Any] | None) -> tuple[float, float, str | None]:
    """(mean S over the threshold, count, why missing) from an ``hbb`` run summary."""
    if summary is None:
        return math.nan, math.nan, "no hbb run given"
    overall = summary.get("variants", {}).get("hbb", {}).get("overall")
    if not overall:
        return math.nan, math.nan, "the hbb run scored no MCQ (hbb: false)"
    count = _nan(overall.get("count"))
    why = f"HBB (S) is undefined: no instance at S >= {overall.get('threshold', 20)}" if count == 0 else None
    return _nan(overall.get("mean_s")), count, why


def hbb_paper_cells(summary: Mapping[str, Any] | None) -> tuple[float, float, float]:
    """(expected mean S over the threshold, expected count, the noise floor's expected count) of the paper's
    10-sample estimator at T = 0.8, computed exactly by the ``hbb`` run (``paper_equivalent.all``); NaN when
    the run has none."""
    pe = ((summary or {}).get("paper_equivalent") or {}).get("all")
    if not pe:
        return math.nan, math.nan, math.nan
    return _nan(pe.get("expected_mean_s")), _nan(pe.get("expected_count")), _nan(pe.get("noise_floor_expected_count"))


def bbq_cells(summary: Mapping[str, Any] | None) -> tuple[float, float, str | None]:
    """(ambiguous bias score, 100 x disambiguated accuracy, why missing) from a ``bbq`` run summary."""
    if summary is None:
        return math.nan, math.nan, "no bbq run given"
    fmt = summary.get("by_format", {}).get("labels") or next(iter(summary.get("by_format", {}).values()), None)
    a = (fmt or {}).get("by_category", {}).get("all")
    if not a:
        return math.nan, math.nan, "the bbq run has no overall row"
    e = a["expected"]
    return _nan(e.get("bias_amb")), 100.0 * _nan(e.get("acc_dis")), None


def cs_cell(summary: Mapping[str, Any] | None, protocol: str = "mcq") -> tuple[float, str | None]:
    """The CrowS-Pairs score in ``protocol`` from a ``crows_pairs`` run or an ``hbb`` run's ``crows_pairs``."""
    if summary is None:
        return math.nan, "no CrowS-Pairs run given"
    block = summary.get("crows_pairs", summary)  # an hbb run nests it
    per = block.get("by_protocol") or {block.get("protocol", "loglik"): block}  # older runs: (b) only
    got = per.get(protocol)
    if not got or not got.get("by_bias_type"):
        return math.nan, f"the CrowS-Pairs run has no protocol {CS_PROTOCOLS[protocol]} (it has {', '.join(per)})"
    return _nan(next(r for r in got["by_bias_type"] if r["bias_type"] == "all")["score"]), None


def ss_cells(summary: Mapping[str, Any] | None, protocol: str = "mcq") -> tuple[float, float, str | None]:
    """(icat intrasentence, icat intersentence, why missing) from a ``stereoset`` run summary."""
    if summary is None:
        return math.nan, math.nan, ("no stereoset run: StereoSet's dev.json is not in the shared data here "
                                    "(`probe data fetch stereoset` needs the network or a local copy)")
    got = summary.get("by_protocol", {}).get(protocol)
    if not got:
        return math.nan, math.nan, f"the stereoset run has no protocol {SS_PROTOCOLS[protocol]}"
    icat = {r["split"]: _nan(r["icat"]) for r in got["rows"] if r["bias_type"] == "overall"}
    return icat.get("intrasentence", math.nan), icat.get("intersentence", math.nan), None


def table1_row(model: str, hbb: Mapping | None = None, bbq: Mapping | None = None, crows: Mapping | None = None,
               stereoset: Mapping | None = None, cs_protocol: str = "mcq",
               ss_protocol: str = "mcq") -> dict[str, Any]:
    """One model's row (the summaries of its runs; ``None`` = not run) with ``_notes`` on missing cells."""
    s, count, why_h = hbb_cells(hbb)
    pe_s, pe_count, floor = hbb_paper_cells(hbb)
    amb, dis, why_b = bbq_cells(bbq)
    cs, why_c = cs_cell(crows if crows is not None else (hbb if hbb and "crows_pairs" in hbb else None), cs_protocol)
    intra, inter, why_s = ss_cells(stereoset, ss_protocol)
    notes = [f"{model}: {col} missing: {why}" for col, why in
             (("HBB", why_h), ("BBQ", why_b), ("CS", why_c), ("SS", why_s)) if why]
    return {"Model": model, "HBB (S)": s, "HBB (count)": count, "HBB (S), paper-equivalent": pe_s,
            "HBB (count), paper-equivalent": pe_count, "HBB (count), noise floor": floor,
            "BBQ-ambig (0)": amb, "BBQ-disambig": dis,
            f"CS (50), {CS_PROTOCOLS[cs_protocol]}": cs, f"SS-intra, {SS_PROTOCOLS[ss_protocol]}": intra,
            f"SS-inter, {SS_PROTOCOLS[ss_protocol]}": inter, "_notes": notes}


def table1(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The assembled table; ``attrs``: ``title`` and ``notes`` (one line per missing cell group)."""
    notes = [n for r in rows for n in r.get("_notes", [])]
    df = pd.DataFrame([{k: v for k, v in r.items() if k != "_notes"} for r in rows])
    df.attrs.update(title=TITLE, notes=notes or [f"{r['Model']}: HBB, BBQ, CS and SS all present" for r in rows])
    return df


def load_summary(run_dir: str | Path | None) -> dict | None:
    """A run directory's ``summary.json`` (``None`` for no directory); a missing file is an error."""
    if run_dir is None:
        return None
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        from probe.errors import ProbeError

        raise ProbeError(f"{path}: no summary.json (is {run_dir} a finished run directory?)")
    return json.loads(path.read_text(encoding="utf-8"))


def write_table1(df: pd.DataFrame, output: str | Path) -> Path:
    """``output/table1.md`` (title, table, notes) and ``output/table1.csv``."""

    out = Path(output)
    notes = "\n".join(f"- {n}" for n in df.attrs.get("notes", []))
    shown = df.astype(object)
    if "BBQ-ambig (0)" in shown:  # the paper prints it to 3-4 significant digits (.00368)
        shown["BBQ-ambig (0)"] = [f"{x:.4f}" if isinstance(x, float) and math.isfinite(x) else "n/a"
                                  for x in df["BBQ-ambig (0)"]]
    for col in ("HBB (count)", "HBB (count), paper-equivalent", "HBB (count), noise floor"):
        if col in shown:
            shown[col] = [str(int(round(x))) if isinstance(x, float) and math.isfinite(x) else "n/a" for x in df[col]]
    write_atomic(out / "table1.md", f"{df.attrs.get('title', TITLE)}\n\n{markdown(shown)}\n\n{notes}\n")
    write_atomic(out / "table1.csv", df.to_csv(index=False))
    return out / "table1.md"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m probe.tasks.hbb.table1", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    for name in RUN_ARGS:
        p.add_argument(f"--{name}", metavar="RUN_DIR", help=f"a finished {name} run directory")
    p.add_argument("--cs-protocol", choices=sorted(CS_PROTOCOLS), default="mcq")
    p.add_argument("--ss-protocol", choices=sorted(SS_PROTOCOLS), default="mcq")
    p.add_argument("--output", required=True)
    a = p.parse_args(argv)
    row = table1_row(a.model, load_summary(a.hbb), load_summary(a.bbq), load_summary(a.crows),
                     load_summary(a.stereoset), a.cs_protocol, a.ss_protocol)
    print(write_table1(table1([row]), a.output).read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
