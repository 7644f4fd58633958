"""What the ``implicitbbq`` task shows a reader: its headline, results rows, warnings, words and run files."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from probe.io import write_json_atomic
from probe.metrics.certified import uncertified_warning
from probe.reports.headline import phrase
from probe.tasks.base import Aggregate, Reporting, result_row, write_tables
from probe.tasks.bbq.metrics import METRIC_NOTES
from probe.tasks.bbq.task import bbq_headline
from probe.tasks.implicitbbq import summary as results
from probe.tasks.implicitbbq.terms import TERMS

if TYPE_CHECKING:
    from probe.tasks.implicitbbq.config import ImplicitBBQConfig

class ImplicitBBQReporting(Reporting):
    """Per strategy|format and context kind: the pooled expected BBQ metrics; the paper's tables and figure."""

    metric_notes = METRIC_NOTES
    #: the report's words for metrics, strategies, formats and context kinds
    terms = TERMS

    def headline_metrics(self, config: ImplicitBBQConfig, summary: Mapping[str, Any]) -> dict[str, dict[str, float]]:
        """``{strategy}|{format}.{explicit|implicit}.{bias_amb|...}``: the pooled expected metrics."""

        return {f"{key}.{kind}.{m}": v for key, kinds in summary["by_strategy"].items() for kind, e in kinds.items()
                if not kind.startswith("_") for m, v in bbq_headline(e["expected"]["pooled"]).items()}

    def results(self, config: ImplicitBBQConfig, summary: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Per strategy|format and context kind, the pooled expected metrics; headline: the ambiguous bias
        of the explicit and implicit contexts."""

        rows = []
        for name, m in self.headline_metrics(config, summary).items():
            key, kind, metric = name.split(".")
            rows.append(result_row(f"{key} {kind}", metric, "expected", m["value"], m["ci_low"], m["ci_high"],
                                   m["n"], metric == "bias_amb" and kind in ("explicit", "implicit"), m.get("clusters")))
        return rows + _parsed_rows(summary.get("paper_parsed") or {})

    def warnings(self, summary: Mapping[str, Any]) -> list[str]:
        """Prompts whose parsed answer is not certified to the target (the paper's sampling + parsing)."""

        parsed = summary.get("paper_parsed") or {}
        w = uncertified_warning(int(parsed.get("n_uncertified") or 0), int(parsed.get("n") or 0),
                                parsed.get("answer_residual_target"))
        return [w] if w else []

    def write(self, config: ImplicitBBQConfig, result: Aggregate, output: Path) -> None:
        """Tables (.md/.csv), ``figure3_*.png``, ``counts.json`` and ``projection.json``."""
        summary = result.summary
        model = str(summary.get("model") or "model")
        tables = dict(result.tables)
        for name, df in tables.items():  # the Model column names the model, not its fingerprint
            if name.startswith("table2_") and "Model" in df.columns:
                tables[name] = df.assign(Model=model)
            tables[name] = _in_words(tables[name])
        write_tables(tables, output)
        results.write_figures(summary["by_strategy"], output, model)
        write_json_atomic(output / "counts.json", summary["counts"])
        timing = results.read_timing(output)
        if timing or not (output / "projection.json").exists():  # a run that scored nothing keeps the last one
            write_json_atomic(output / "projection.json", {"timing": timing, **results.projection(
                timing, summary["full_grid_items"], len(config.answer_formats), {"cot": config.cot_chains})})


def _in_words(df: Any) -> Any:
    """A table as written for a reader: strategy, format and context kind in the paper's words
    ("zero-shot, one-word answer", "implicit cues"), not ``zero_shot/oneword``; attrs kept."""

    out = df.copy()
    for col in ("Strategy/format", "strategy|format"):
        if col in out.columns:
            out[col] = [phrase(str(k).replace("/", "|"), TERMS) for k in out[col]]
    if "context" in out.columns:
        out["context"] = [TERMS.get(str(k), k) for k in out["context"]]
    out.attrs = dict(df.attrs)
    return out


def _parsed_rows(parsed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The paper's sampling + parsing (enumerated): per strategy|format and kind, the pooled expected metrics as
    published (the hybrid, its interval: the items' bootstrap and the tail's own uncertainty), the certified
    interval in its own columns; headline: the ambiguous bias of the explicit and implicit contexts."""

    estimator = str((parsed.get("settings") or {}).get("estimator") or "")
    name = ("sampled + parsed, hybrid: exact head + each prompt's tail draws" if estimator.startswith("hybrid")
            else "sampled + parsed, renormalising rule (no tail draws)")
    rows = []
    for key, kinds in (parsed.get("by_strategy") or {}).items():
        for kind, e in kinds.items():
            if kind.startswith("_"):
                continue
            cert = (parsed.get("certified") or {}).get(key, {}).get(kind, {}).get("pooled", {})
            for metric, m in bbq_headline(e["expected"]["pooled"]).items():
                rows.append(result_row(f"{key} {kind}", metric, name, m["value"], m["ci_low"], m["ci_high"], m["n"],
                                       metric == "bias_amb" and kind in ("explicit", "implicit"), m.get("clusters"),
                                       certified=cert.get(metric)))
    return rows
