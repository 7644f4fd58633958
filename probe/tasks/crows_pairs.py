"""``crows_pairs``: CrowS-Pairs with a causal LM (share of pairs where ``sent_more`` gets the higher log-likelihood).

Each sentence is one perplexity request (no prefix; BOS as the tokenizer adds
it for raw text), so the metric uses the summed log-likelihood ``-nll`` of the
whole sentence, as lm-evaluation-harness's ``crows_pairs`` does. The metric
(:func:`probe.metrics.crows.crows_by_type`): overall and per bias type, Wilson
95% CIs, stereo-only and antistereo-only scores. The ``hbb`` task reuses
:func:`crows_requests` and :func:`crows_summary` for its Table 1 CS column.

Outputs besides the runner's: ``tables/crows.md|csv`` and ``report.md``.

>>> from probe.data.crows_pairs import CrowsPair
>>> [r.meta["which"] for r in crows_requests([CrowsPair("crows:0", "A x.", "B x.", "stereo", "age")])]
['more', 'less']
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from probe.scoring.requests import PerplexityRequest
from probe.tasks.base import Aggregate, Task, TaskConfig

#: the columns of the written CrowS-Pairs table
SHOWN = ["bias_type", "n", "score", "ci_low", "ci_high", "stereo_n", "stereo_score", "antistereo_n",
         "antistereo_score", "n_neutral", "n_invalid"]
TITLE = "CrowS-Pairs: % of pairs where sent_more has the higher log-likelihood (50 = no bias), Wilson 95% CI"


@dataclass(frozen=True)
class CrowsPairsConfig(TaskConfig):
    data_file: str | None = None  # default: dataset_dir("crows_pairs")/crows_pairs_anonymized.csv


def crows_requests(pairs: Sequence[Any]) -> list[PerplexityRequest]:
    """Two perplexity requests per pair (``sent_more`` then ``sent_less``), grouped by pair, kind ``crows``."""
    return [PerplexityRequest(id=f"{p.id}|{which}", text=text, group=p.id,
                              meta={"kind": "crows", "pair_id": p.id, "which": which, "bias_type": p.bias_type,
                                    "direction": p.direction})
            for p in pairs for which, text in (("more", p.sent_more), ("less", p.sent_less))]


def pair_frame(records: Any) -> Any:
    """One row per pair from its two records: ``ll_more``, ``ll_less`` (NaN when missing or non-finite),
    ``direction``, ``bias_type``, in the order the pairs were scored."""
    import pandas as pd

    pairs: dict[str, dict] = {}
    for rec in records.to_dict("records"):
        p = pairs.setdefault(rec["pair_id"], {"id": rec["pair_id"], "bias_type": rec["bias_type"],
                                              "direction": rec["direction"], "ll_more": math.nan,
                                              "ll_less": math.nan})
        ll = float(rec["logprobs"][0]) if rec["finite"] and len(rec["logprobs"]) else math.nan  # = -nll
        p[f"ll_{rec['which']}"] = ll
    return pd.DataFrame(list(pairs.values()), columns=["id", "bias_type", "direction", "ll_more", "ll_less"])


def crows_summary(records: Any) -> tuple[dict, Any]:
    """The CrowS-Pairs summary (``n_pairs``, ``forward_passes``, ``by_bias_type``) and its table, from the
    ``crows`` records (a records frame with ``meta`` flattened)."""
    from probe.metrics.crows import crows_by_type

    frame = pair_frame(records)
    table = crows_by_type(frame)
    summary = {"n_pairs": len(frame), "forward_passes": len(records), "by_bias_type": table.to_dict("records")}
    shown = table[SHOWN].copy()
    shown.attrs.update(title=TITLE, heading="CrowS-Pairs")
    return summary, shown


def crows_file(data_file: str | None) -> Path:
    """The CrowS-Pairs CSV a config reads."""
    from probe.data.crows_pairs import DEFAULT_FILE
    from probe.data.paths import dataset_dir

    return Path(data_file) if data_file else dataset_dir("crows_pairs") / DEFAULT_FILE


class CrowsPairsTask(Task):
    name = "crows_pairs"
    description = "CrowS-Pairs: % of pairs where the more stereotypical sentence has the higher log-likelihood"
    Config = CrowsPairsConfig

    def items(self, config: CrowsPairsConfig) -> list:
        from probe.data.crows_pairs import load_crows_pairs

        return load_crows_pairs(config.data_file)

    def requests(self, config: CrowsPairsConfig, items: Sequence[Any], tokenizer: Any,
                 generations: Mapping[str, str] | None = None) -> list[PerplexityRequest]:
        return crows_requests(items)

    def aggregate(self, config: CrowsPairsConfig, records: Any, items: Sequence[Any]) -> Aggregate:
        summary, table = crows_summary(records)
        return Aggregate(summary, {"crows": table})

    def report(self, config: CrowsPairsConfig, result: Aggregate, output: Path) -> None:
        from probe.io import write_atomic
        from probe.reports.hbb_tables import markdown, write_table

        table = result.tables["crows"]
        write_table(table, output / "tables" / "crows", TITLE)
        write_atomic(output / "report.md", f"# CrowS-Pairs: {result.summary.get('model')}\n\n{TITLE}\n\n"
                     f"{markdown(table)}\n")

    def data_files(self, config: CrowsPairsConfig) -> list[Path]:
        return [crows_file(config.data_file)]
