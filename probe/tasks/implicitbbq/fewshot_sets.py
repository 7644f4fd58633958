"""Generator of the shipped ImplicitBBQ few-shot demonstration sets.

The paper gives each prompt "five manually selected demonstration examples from
the dataset representing the relevant demographic dimensions" (section 4.3) and
publishes neither the examples nor their answer mix. probe ships fixed sets,
one per dimension x context kind (explicit, implicit), in
``probe/tasks/implicitbbq/resources/implicitbbq_demos.yaml``: that file is the contract; this
module only made it (seeded, so it can be re-made and audited) and checks it.

Each set has five slots with fixed answer roles, and every slot a primary
demonstration and an alternate of the same role from another template (used
when the test item shares the primary's template). The ten demonstrations of a
set come from ten different templates. Roles (:data:`SLOT_ROLES`): two
ambiguous contexts (answer Unknown, one per polarity), one disambiguated
anti-stereotypical and one stereotype-consistent answer, and a fifth
disambiguated slot that alternates by dimension between a consistent
(negative question) and an anti-stereotypical (non-negative question) answer,
so over the 12 sets the person answers are half consistent, half anti, and the
polarities half negative. Implicit sets answer both "Person A" and "Person B"
(A, B, A or B, A, B, alternating by dimension; an alternate answers the same Person).
Controls (neutral, no characteristics) are never used.

    python -m probe.tasks.implicitbbq.fewshot_sets --output probe/tasks/implicitbbq/resources/implicitbbq_demos.yaml
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from typing import Any, Iterable, Sequence

import yaml

from probe.io import stable_hash
from probe.tasks.implicitbbq.data import DIMENSIONS, build_implicitbbq

__all__ = ["SLOT_ROLES", "KINDS", "AUDIT_SKIP", "answer_role", "demo_role", "make_demo_sets", "set_balance", "main"]

KINDS = ("explicit", "implicit")

#: (condition, polarity, answer role) per slot; slot 5 depends on the dimension's index (even / odd)
SLOT_ROLES = (
    ("ambig", "neg", "unknown"),
    ("ambig", "nonneg", "unknown"),
    ("disambig", "neg", "anti"),
    ("disambig", "nonneg", "consistent"),
)
FIFTH_SLOT = (("disambig", "neg", "consistent"), ("disambig", "nonneg", "anti"))

#: templates left out of a kind's demonstrations on the hand audit (the Person rewrite reads badly there)
AUDIT_SKIP = {
    ("religion", "implicit", "bbq:Religion:20"): "'a person who's Person A and a person who's Person B'",
    ("ses", "implicit", "bbq:SES:9"): "'Students from Person A and Person B are classmates'",
}


def answer_role(item: Any) -> str:
    """``unknown``, ``consistent`` (stereotype-consistent: t for a negative question, the other person for
    a non-negative one) or ``anti``, of the item's correct answer."""
    if item.label == item.unknown_index:
        return "unknown"
    hits_target = item.label == item.target_index
    return "consistent" if hits_target == (item.question_polarity == "neg") else "anti"


def demo_role(item: Any) -> tuple[str, str, str]:
    """(context condition, question polarity, answer role) of an item."""
    return item.context_condition, item.question_polarity, answer_role(item)


def _person(item: Any) -> str:
    """The answer's Person label in a Person context ("" for Unknown or an explicit answer)."""
    if item.context_kind == "explicit" or item.label == item.unknown_index:
        return ""
    return item.options[item.label]


def _roles(dim_index: int) -> tuple[tuple[str, str, str], ...]:
    return SLOT_ROLES + (FIFTH_SLOT[dim_index % 2],)


def make_demo_sets(items: Iterable[Any], dimensions: Sequence[str], seed: int = 0) -> dict[str, Any]:
    """The demonstration sets {dimension: {kind: [slot, ...]}} drawn from ``items`` (a full build).

    A slot is ``{"slot" (position in the prompt), "condition", "polarity", "answer", "person", "id", "template",
    "alternate": {"id", "template"}}``. Deterministic in (items, seed).
    """
    pool = sorted(items, key=lambda it: it.id)
    out: dict[str, Any] = {}
    for di, dim in enumerate(dimensions):
        out[dim] = {}
        for kind in KINDS:
            cands = [it for it in pool if it.category == dim and it.context_kind == kind
                     and (dim, kind, it.template_id) not in AUDIT_SKIP]
            rng = random.Random(stable_hash("implicitbbq-demos", dim, kind, seed))
            rng.shuffle(cands)
            # implicit: the person answers alternate by dimension (A, B, A / B, A, B): both persons answer,
            # and over the six sets Person A and Person B answer equally often
            plan = ("Person A", "Person B", "Person A") if di % 2 == 0 else ("Person B", "Person A", "Person B")
            slots = _one_set(cands, _roles(di), dim, kind, plan if kind == "implicit" else ())
            rng.shuffle(slots)  # presentation order, so the last demonstration's role varies by set
            out[dim][kind] = [{**s, "slot": k} for k, s in enumerate(slots, 1)]
    return out


def _one_set(cands: list, roles: Sequence[tuple[str, str, str]], dim: str, kind: str,
             plan: Sequence[str] = ()) -> list[dict[str, Any]]:
    used: set[str] = set()
    slots = []
    n_person = 0
    for k, role in enumerate(roles, 1):
        def ok(it: Any, person: str | None) -> bool:
            return demo_role(it) == role and it.template_id not in used and (person is None or _person(it) == person)

        need = None
        if plan and role[2] != "unknown":
            need = plan[n_person]
            n_person += 1
        primary = next((it for it in cands if ok(it, need)), None)
        if primary is None:
            raise ValueError(f"implicitbbq demos: no {kind} {dim} item for slot {k} {role} {need or ''}")
        used.add(primary.template_id)
        alternate = next((it for it in cands if ok(it, need)), None)
        if alternate is None:
            raise ValueError(f"implicitbbq demos: no alternate {kind} {dim} item for slot {k} {role} {need or ''}")
        used.add(alternate.template_id)
        slots.append({"slot": k, "condition": role[0], "polarity": role[1], "answer": role[2],
                      "person": _person(primary), "id": primary.id, "template": primary.template_id,
                      "alternate": {"id": alternate.id, "template": alternate.template_id}})
    return slots


def set_balance(sets: dict[str, Any]) -> dict[str, Any]:
    """Answer mix over all sets: counts of answer roles, polarities and Persons (primaries)."""
    slots = [s for kinds in sets.values() for ss in kinds.values() for s in ss]
    return {"demos": len(slots), "answer": dict(sorted(Counter(s["answer"] for s in slots).items())),
            "polarity": dict(sorted(Counter(s["polarity"] for s in slots).items())),
            "person": dict(sorted(Counter(s["person"] for s in slots if s["person"]).items()))}


def main(argv: Sequence[str] | None = None) -> None:
    """Write the demonstration sets as YAML (and print them rendered, for the audit)."""

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--output", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bbq-dir")
    ap.add_argument("--bharatbbq-dir")
    args = ap.parse_args(argv)
    # every explicit filling, under its own id: the matched explicit set (a seeded resample) may move
    items = build_implicitbbq(DIMENSIONS, args.bbq_dir, args.bharatbbq_dir, controls=False, explicit_set="full")
    sets = make_demo_sets(items, DIMENSIONS, args.seed)
    by_id = {it.id: it for it in items}
    for dim, kinds in sets.items():
        for kind, slots in kinds.items():
            print(f"== {dim} {kind}")
            for s in slots:
                for which, d in (("", s), ("  alt", s["alternate"])):
                    it = by_id[d["id"]]
                    print(f"{which}[{s['slot']}] {s['answer']:<10} {it.template_id:<24} {it.background!r} "
                          f"{it.context!r} {it.question!r} -> {it.options[it.label]!r}")
    header = ("# ImplicitBBQ few-shot demonstrations: item ids of the full build, five slots\n"
              "# per dimension x context kind, each with an alternate from another template. Made by\n"
              f"#   python -m probe.tasks.implicitbbq.fewshot_sets --output THIS --seed {args.seed}\n"
              "# and audited by hand; this file, not the generator, is the contract. Roles and balance:\n"
              "# probe/tasks/implicitbbq/fewshot_sets.py and docs/implicitbbq.md.\n")
    body = {"seed": args.seed, "balance": set_balance(sets), "sets": sets}
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(header + yaml.safe_dump(body, sort_keys=False, width=120))


if __name__ == "__main__":
    main()
