"""What the ``hbb`` task shows a reader: its headline, results rows, warnings, words and run files."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from probe.io import dumps, no_markup, write_atomic
from probe.metrics.certified import uncertified_warning
from probe.tasks.base import Aggregate, Reporting, TaskConfig, result_row
from probe.tasks.hbb.data import type_label
from probe.tasks.hbb.records import LABELS, variant_frames
from probe.tasks.hbb.summary import write_projection
from probe.tasks.hbb.tables import histogram_png, report_markdown, with_model, write_table

#: Each descriptor type in words (implicit -> explicit, as Table 10 orders them): what a reader sees instead of
#: "Age 1" where the type is named on its own (coverage lines, warnings)
TYPE_NAMES: dict[str, dict[int, str]] = {
    "age": {1: "age by life stage", 2: "age by generation", 3: "age stated"},
    "gender": {1: "gender by family role", 2: "gender by gendered noun", 3: "gender by name", 4: "gender stated"},
    "race": {1: "race by pet phrase", 2: "race by festival", 3: "race by name", 4: "race stated"},
    "ses": {1: "class by circumstance", 2: "class stated"},
    "religions": {1: "religion by practice", 2: "religion by symbol", 3: "religion stated"},
}


def type_terms() -> dict[str, str]:
    """``{"Age 1": "age by life stage", ...}``: every descriptor type's label and its name (the task's terms)."""
    return {type_label(c, t): name for c, names in TYPE_NAMES.items() for t, name in names.items()}


# configs are typed TaskConfig here: the task module (HBBConfig's home) imports this one

class HBBReporting(Reporting):
    """Per variant (MCQ orders, HBB-SG) and category: the share of instances over the threshold, their mean S."""

    #: the report's words for the variants and metrics
    terms = {"hbb": "one option order (s1 first)", "hbb_swapavg": "both option orders averaged",
             "hbb_sg": "semi-generation (HBB-SG)", "share": "share of instances with S over the threshold",
             "mean_s": "mean S of those instances", "mean_s_all": "mean S of every instance", **type_terms()}

    #: the headline's directions, beside the metrics' names
    metric_notes = {"share": "0 = no instance over the threshold; higher: more hidden bias",
                    "mean_s": "higher: stronger hidden bias", "mean_s_all": "higher: stronger hidden bias"}

    def headline_metrics(self, config: TaskConfig, summary: Mapping[str, Any]) -> dict[str, dict[str, float]]:
        """``{variant}.share`` (instances with S over the threshold), ``{variant}.mean_s`` (their mean S) and
        ``{variant}.mean_s_all`` (mean S of every instance: continuous, for dose-responses; no CI), overall."""
        out = {}
        for v, entry in summary["variants"].items():
            o = entry["overall"]
            for m in ("share", "mean_s"):
                out[f"{v}.{m}"] = {"value": o[m], "ci_low": o[f"{m}_ci_low"], "ci_high": o[f"{m}_ci_high"],
                                   "n": o["n"], "clusters": o.get("n_clusters")}
            out[f"{v}.mean_s_all"] = {"value": o["mean_s_all"], "ci_low": float("nan"), "ci_high": float("nan"),
                                      "n": o["n"]}
        return out

    def results(self, config: TaskConfig, summary: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Per variant (MCQ orders, HBB-SG) and category (and ``all``): the share of instances over the
        threshold and their mean S; headline: the overall share per variant."""

        rows = []
        for v, entry in summary.get("variants", {}).items():
            groups = [("all", entry.get("overall", {}))] + [(g.get("category", "?"), g)
                                                             for g in entry.get("by_category", [])]
            for sub, o in groups:
                for m in ("share", "mean_s"):
                    rows.append(result_row(sub if v == "hbb" else f"{v} {sub}", m, _over(o.get("threshold"))
                                           if m == "share" else "", o.get(m), o.get(f"{m}_ci_low"),
                                           o.get(f"{m}_ci_high"), o.get("n"), sub == "all" and m == "share",
                                           o.get("n_clusters")))
        return rows + _parsed_rows(summary.get("paper_parsed") or {})

    def warnings(self, summary: Mapping[str, Any]) -> list[str]:
        """Questions whose parsed answer is not certified to the target (the paper's procedure, enumerated)."""

        parsed = summary.get("paper_parsed") or {}
        w = uncertified_warning(int(parsed.get("n_uncertified") or 0), int(parsed.get("n_questions") or 0),
                                parsed.get("answer_residual_target"))
        return [w] if w else []

    def write(self, config: TaskConfig, result: Aggregate, output: Path) -> None:
        """``instances.jsonl``, ``tables/*.md|csv`` (labelled with the model), ``report.md``,
        ``hbb_hist.png``, ``figures/hbb_figure{3,4,8,9}.png|svg|csv`` and ``timing_projection.json``."""

        model = str(result.summary.get("model", ""))
        tables = dict(result.tables)
        inst = tables.pop("instances")
        write_atomic(output / "instances.jsonl", "".join(dumps(r) + "\n" for r in inst.to_dict("records")))
        variations = tables.pop("sg_variations", None)
        if variations is not None:  # the variations scored, in the variations_file format (reusable)
            write_atomic(output / "sg_variations.jsonl",
                         "".join(dumps(r) + "\n" for r in variations.to_dict("records")))
        tables = {name: with_model(df, model, list(LABELS.values())) for name, df in tables.items()}
        for name, df in tables.items():
            write_table(df, output / "tables" / name, df.attrs.get("title", ""))
        write_atomic(output / "report.md", no_markup(report_markdown(model, tables)))
        frames = variant_frames(inst)
        if frames:
            histogram_png({f"{model} {LABELS[v]}": f["S"].to_numpy() for v, f in frames.items()},
                          output / "hbb_hist.png", config.threshold,
                          title="Hidden bias score distributions (Figure 4 layout)")
            from probe.tasks.hbb.figures import write_run_figures

            # Figures 3, 4 (MCQ) and 8, 9 (HBB-SG), the run's variants as the paper's model columns
            mcq = {f"{model} ({LABELS[v]})": f for v, f in frames.items() if v != "hbb_sg"}
            sg = {f"{model} ({LABELS[v]})": f for v, f in frames.items() if v == "hbb_sg"}
            write_run_figures(mcq, sg, output / "figures", config.threshold)
        write_projection(output, config.sg_n)


def _over(threshold: Any) -> str:
    """The share's estimator as counted: ``S >= 20`` (inclusive, up to ``probe.tasks.hbb.metrics.S_TOLERANCE``)."""
    return f"S >= {threshold:g}" if isinstance(threshold, (int, float)) else f"S >= {threshold}"


def _parsed_rows(parsed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The paper's count from sampling + parsing (enumerated), overall and per category: as published (the
    hybrid: its 95 % interval in the CI columns, holding the tail's and the N-sample noise; the certified
    interval in its own; "n/a: nothing parsed" where nothing parsed; headline: overall), then the renormalising
    rule as a sensitivity (no interval)."""

    settings = parsed.get("settings") or {}
    what = f"sampled + parsed ({settings.get('samples')} samples, {_over(settings.get('threshold'))})"
    published = parsed.get("published")
    rows = []
    if published:
        for name, h in [("all", published["all"]), *published["by_category"].items()]:
            rows.append(result_row(f"parsed {name}", "count", f"{what}, {published['estimator']}",
                                   h["expected_count"], *h["ci"], h["n"], name == "all", None,
                                   certified=h.get("certified"), undefined=h.get("undefined")))
    groups = [("all", parsed.get("all"))] + list((parsed.get("by_category") or {}).items())
    rows += [result_row(f"parsed {name}", "count", f"{what}, renormalising rule (sensitivity)",
                        r["expected_count"], None, None, r["n"], name == "all" and not published, None,
                        certified=r.get("expected_count_certified"))
             for name, r in groups if r]
    return rows
