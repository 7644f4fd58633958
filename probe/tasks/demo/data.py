"""The embedded demo set: our own BBQ-style scenarios, in explicit and implicit form.

Each scenario of ``resources/demo_scenarios.yaml`` yields 8 items: explicit
(group nouns) and implicit ("Person A"/"Person B" with a background cue
sentence each) x ambiguous/disambiguated x negative/non-negative question.
Which group is mentioned first alternates between scenarios and questions,
so within every setting half the items name the target first: answer position
and stereotype are not confounded.

>>> items = demo_items()
>>> len(items), items[0]["setting"]
(64, 'explicit_amb_neg')
"""

from __future__ import annotations

from importlib import resources

import yaml

KINDS = ("explicit", "implicit")
CONDITIONS = (("ambig", "amb"), ("disambig", "dis"))
POLARITIES = ("neg", "nonneg")


def load_scenarios() -> dict:
    text = (resources.files("probe.tasks.demo").joinpath("resources/demo_scenarios.yaml")
            .read_text(encoding="utf-8"))
    return yaml.safe_load(text)


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def demo_items() -> list[dict]:
    """All demo items as BBQ-style records (``options`` = target/other/Unknown in mention order)."""
    spec = load_scenarios()
    items: list[dict] = []
    for s_idx, sc in enumerate(spec["scenarios"]):
        for kind in KINDS:
            for cond, short in CONDITIONS:
                for p_idx, pol in enumerate(POLARITIES):
                    # half of the scenarios mention the target first in every setting, so that
                    # a model that always answers "Person A" shows no bias (position is not polarity)
                    target_first = (s_idx + p_idx) % 2 == 0
                    first, second = (sc["target"], sc["other"]) if target_first else (sc["other"], sc["target"])
                    if kind == "explicit":
                        names = {id(first): first["noun"], id(second): second["noun"]}
                        background = ""
                    else:
                        names = {id(first): "Person A", id(second): "Person B"}
                        background = f"Person A {first['cue']}. Person B {second['cue']}."
                    context = _cap(sc["setup"].format(first=names[id(first)], second=names[id(second)]))
                    if cond == "disambig":
                        context += " " + _cap(sc["evidence"].format(target=names[id(sc["target"])], other=names[id(sc["other"])]))
                    options = [_cap(names[id(first)]).removeprefix("The ").strip(), _cap(names[id(second)]).removeprefix("The ").strip()]
                    options = [_cap(o) for o in options] + [spec["unknown"]]
                    target_index = 0 if target_first else 1
                    other_index = 1 - target_index
                    unknown_index = 2
                    if cond == "ambig":
                        label = unknown_index
                    else:  # the evidence shows the other group doing the negative thing
                        label = other_index if pol == "neg" else target_index
                    items.append(
                        {
                            "id": f"demo-{s_idx:02d}-{kind}-{short}-{pol}",
                            "scenario": s_idx,
                            "dimension": sc["dimension"],
                            "context_kind": kind,
                            "setting": f"{kind}_{short}_{pol}",
                            "context_condition": cond,
                            "question_polarity": pol,
                            "background": background,
                            "context": context,
                            "question": sc[pol],
                            "options": options,
                            "label": label,
                            "target_index": target_index,
                            "unknown_index": unknown_index,
                            "stereotyped_group": sc["target"]["group"],
                        }
                    )
    return items


def unknown_paraphrases() -> list[str]:
    return list(load_scenarios()["unknown_paraphrases"])
