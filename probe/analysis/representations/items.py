"""The ImplicitBBQ sample, the probe labels derived from item fields, and the patching pairs."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from probe.analysis.representations.config import RepresentationsConfig

# --- labels derived from BBQ item fields ---------------------------------------------------------


def first_group(meta: dict) -> str:
    """The group of the person described first: slot 1 (explicit) or Person A's cue (implicit)."""
    m = meta["metadata"]
    if meta["context_kind"] == "explicit":
        return m["group1"]
    return m["group1"] if m.get("person1") == "Person A" else m["group2"]


def lexical_key(meta: dict) -> str:
    """The surface words that carry the identity (group words or cue phrases): the control-task key."""
    m = meta["metadata"]
    if meta["context_kind"] == "explicit":
        return f"{m.get('name1')}|{m.get('name2')}"
    return f"{m.get('cue1')}|{m.get('cue2')}"


def consistency(rec: dict) -> float:
    """1 if the chosen answer is stereotype-consistent, 0 if not, NaN if it is Unknown (or not finite)."""
    m, p = rec["meta"], rec.get("pred_index")
    if p is None or p == m["unknown_index"]:
        return float("nan")
    other = 3 - m["target_index"] - m["unknown_index"]
    return float(p == (m["target_index"] if m["question_polarity"] == "neg" else other))


# --- items ---------------------------------------------------------------------------------------


def all_items(cfg: RepresentationsConfig) -> list:
    """Every ImplicitBBQ item of the configured dimensions (``BBQItem``s)."""
    from probe.data.implicitbbq import build_implicitbbq

    return list(build_implicitbbq(cfg.dimensions))


def sample_items(cfg: RepresentationsConfig, out: Path) -> Path:
    """Write ``out/items.jsonl``: ``per_dimension`` items per dimension, spread evenly over the cells
    explicit/implicit x ambiguous/disambiguated x negative/non-negative. Kept if it exists (resume)."""
    from probe.data.implicitbbq import build_implicitbbq

    path = out / "items.jsonl"
    if path.exists():
        return path
    items = build_implicitbbq(cfg.dimensions)
    rng = random.Random(cfg.seed)
    chosen = []
    for dim in cfg.dimensions:
        cells: dict[tuple, list] = {}
        for it in items:
            if it.category == dim and it.context_kind in ("explicit", "implicit"):
                cells.setdefault((it.context_kind, it.context_condition, it.question_polarity), []).append(it)
        per_cell = cfg.per_dimension // max(len(cells), 1)
        for key in sorted(cells):
            pool = sorted(cells[key], key=lambda x: x.id)
            chosen += rng.sample(pool, min(per_cell, len(pool)))
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(it.to_json() + "\n" for it in chosen), encoding="utf-8")
    (out / "all_items.count").write_text(str(len(items)))
    return path


def patching_pairs(cfg: RepresentationsConfig, items: list) -> dict[str, list]:
    """(target, source) ``BBQItem`` pairs, ``patch_pairs_per_dimension`` of each kind per dimension:
    explicit->implicit and implicit->explicit (same template row, groups, condition and polarity) and
    group swap (same implicit context, Person A's and B's groups exchanged). Ambiguous contexts only."""
    rng = random.Random(cfg.seed)

    def key(it: Any) -> tuple:
        return (it.template_id, it.metadata.get("row"), it.metadata.get("group1"), it.metadata.get("group2"),
                it.context_condition, it.question_polarity)

    explicit: dict[tuple, Any] = {}
    for it in items:
        if it.context_kind == "explicit":
            explicit.setdefault(key(it), it)
    out: dict[str, list] = {"explicit->implicit": [], "implicit->explicit": [], "group swap": []}
    by_ctx: dict[tuple, dict[str, Any]] = {}
    for it in items:
        if it.context_kind == "implicit":
            v = it.id.rsplit("-", 3)[1]  # ...-c{k}-{cond}-{pol}
            by_ctx.setdefault((it.metadata["context_id"], it.context_condition, it.question_polarity), {})[v] = it
    for dim in cfg.dimensions:
        imp = sorted((it for it in items if it.category == dim and it.context_kind == "implicit"
                      and it.context_condition == "ambig" and key(it) in explicit), key=lambda x: x.id)
        for it in rng.sample(imp, min(cfg.patch_pairs_per_dimension, len(imp))):
            out["explicit->implicit"].append((it, explicit[key(it)]))
            out["implicit->explicit"].append((explicit[key(it)], it))
        swaps = sorted((v for v in by_ctx.values() if "c0" in v and "c1" in v
                        and v["c0"].category == dim and v["c0"].context_condition == "ambig"),
                       key=lambda v: v["c0"].id)
        for v in rng.sample(swaps, min(cfg.patch_pairs_per_dimension, len(swaps))):
            out["group swap"].append((v["c0"], v["c1"]))
    return out
