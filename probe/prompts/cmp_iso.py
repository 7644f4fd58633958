"""iso / cmp prompt strategy: settings, the 54 variations, labels, CoT answer scoring.

A prompt is built from the four appendix-D components of a
:class:`~probe.data.cmp_iso.CmpIsoPrompt` (the task text is kept verbatim) and
a :class:`CmpIsoSetting`:

- ``reasoning="cot"``: the CoT footer; the model reasons greedily, then the
  answer label is scored right after the last ``\\boxed{`` it wrote
  (:func:`cot_answer_prompt`).
- ``reasoning="direct"``: the footer is the answer cue "My answer would be:"
  (seed 003, section 4.2). With ``direct_cue="prefill"`` (default) the cue is
  the start of the assistant turn, so the scored token is the label right
  after it (" Yes", " A": the scorer's ``space="auto"`` rule adds the space);
  with ``direct_cue="user"`` the cue ends the user message and the scored token
  is the first token of the assistant turn.
- ``neutral=True``: iso offers ``\\boxed{Skip}``; cmp adds "C: Prefer not to
  answer." in the released slot after option B (always last, as in the seed).
- ``randomly=True``: the instructions end with "Please provide a random answer."
- ``variant``: 0..53, see :func:`variant_spec` (0 = the released wording).

Labels: iso ``("Yes", "No")`` / ``("Yes", "No", "Skip")``; cmp ``("A", "B")``
/ ``("A", "B", "C")``.

>>> from probe.data.cmp_iso import PromptParts, CmpIsoPrompt
>>> parts = PromptParts("You are a helpful assistant. ",
...     "Please provide your final answer as one of the following: \\\\boxed{Yes} or \\\\boxed{No}. ",
...     "Is it odd? ", "Please reason step by step and then provide your final answer inside a \\\\boxed{}. ")
>>> p = CmpIsoPrompt("demo", 0, 0, "iso", "t", None, parts, 2)
>>> built = build_prompt(p, CmpIsoSetting())
>>> built.labels, built.prefill
(('Yes', 'No'), 'My answer would be:')
>>> build_prompt(p, CmpIsoSetting(reasoning="cot")).user == parts.text()
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from itertools import product
from typing import Literal

import yaml

from probe.data.cmp_iso import NEUTRAL_SLOT, CmpIsoPrompt

N_VARIANTS = 54
ISO_LABELS = ("Yes", "No")
CMP_LABELS = ("A", "B")
ISO_NEUTRAL, CMP_NEUTRAL = "Skip", "C"


@dataclass(frozen=True)
class Variations:
    """The wordings of ``resources/cmp_iso_variations.yaml``."""

    headers: tuple[str, ...]
    instructions: tuple[str, ...]
    cot_footers: tuple[str, ...]
    direct_footers: tuple[str, ...]
    choices_two: str
    choices_three: str
    neutral_option: str
    random_instruction: str


@lru_cache(maxsize=1)
def load_variations() -> Variations:
    """Read the packaged variation wordings (validated: 3 of each)."""
    text = resources.files("probe.prompts").joinpath("resources/cmp_iso_variations.yaml").read_text("utf-8")
    d = yaml.safe_load(text)
    v = Variations(
        headers=tuple(d["headers"]),
        instructions=tuple(d["instructions"]),
        cot_footers=tuple(d["footers"]["cot"]),
        direct_footers=tuple(d["footers"]["direct"]),
        choices_two=d["choices"]["two"],
        choices_three=d["choices"]["three"],
        neutral_option=d["neutral_option"],
        random_instruction=d["random_instruction"],
    )
    for name in ("headers", "instructions", "cot_footers", "direct_footers"):
        if len(getattr(v, name)) != 3:
            raise ValueError(f"cmp_iso_variations.yaml: expected 3 {name}, got {len(getattr(v, name))}")
    if any("{choices}" not in x for x in v.instructions):
        raise ValueError("cmp_iso_variations.yaml: every instruction needs a {choices} slot")
    return v


@dataclass(frozen=True)
class VariantSpec:
    """Which wording of each component and which template a variant uses."""

    index: int
    header: int
    instructions: int
    footer: int
    template: int  # 1: header, instructions, task, footer; 2: header, task, instructions, footer

    @property
    def name(self) -> str:
        return f"h{self.header}-i{self.instructions}-f{self.footer}-T{self.template}"


def variant_spec(index: int) -> VariantSpec:
    """Variant ``index`` (0..53) of the Cartesian product template x header x instructions x footer.

    >>> variant_spec(0).name, variant_spec(53).name
    ('h0-i0-f0-T1', 'h2-i2-f2-T2')
    """
    if not 0 <= index < N_VARIANTS:
        raise ValueError(f"variant must be in 0..{N_VARIANTS - 1}, got {index}")
    t, h, i, f = list(product((1, 2), range(3), range(3), range(3)))[index]
    return VariantSpec(index, h, i, f, t)


@dataclass(frozen=True)
class CmpIsoSetting:
    """One evaluation setting (reasoning mode, neutral option, random instruction, variant)."""

    reasoning: Literal["direct", "cot"] = "direct"
    neutral: bool = False
    randomly: bool = False
    variant: int = 0
    direct_cue: Literal["prefill", "user"] = "prefill"

    def __post_init__(self) -> None:
        if self.reasoning not in ("direct", "cot"):
            raise ValueError(f"reasoning must be 'direct' or 'cot', got {self.reasoning!r}")
        if self.direct_cue not in ("prefill", "user"):
            raise ValueError(f"direct_cue must be 'prefill' or 'user', got {self.direct_cue!r}")
        variant_spec(self.variant)

    @property
    def name(self) -> str:
        """A stable key, e.g. ``direct`` / ``direct+neutral`` / ``cot+random+v17``."""
        parts = [self.reasoning]
        if self.neutral:
            parts.append("neutral")
        if self.randomly:
            parts.append("random")
        if self.variant:
            parts.append(f"v{self.variant}")
        if self.reasoning == "direct" and self.direct_cue != "prefill":
            parts.append(f"cue-{self.direct_cue}")
        return "+".join(parts)


@dataclass(frozen=True)
class BuiltPrompt:
    """A prompt ready for :func:`probe.prompts.chat.render_prompt` and label scoring."""

    user: str
    prefill: str | None
    labels: tuple[str, ...]


def labels_for(task_type: str, neutral: bool) -> tuple[str, ...]:
    if task_type == "iso":
        return ISO_LABELS + ((ISO_NEUTRAL,) if neutral else ())
    if task_type == "cmp":
        return CMP_LABELS + ((CMP_NEUTRAL,) if neutral else ())
    raise ValueError(f"task_type must be 'iso' or 'cmp', got {task_type!r}")


def build_prompt(prompt: CmpIsoPrompt, setting: CmpIsoSetting, variations: Variations | None = None) -> BuiltPrompt:
    """The user message (and assistant prefill) of ``prompt`` under ``setting``."""
    v = variations or load_variations()
    spec = variant_spec(setting.variant)
    labels = labels_for(prompt.task_type, setting.neutral)
    fmt = v.choices_three if len(labels) == 3 else v.choices_two
    instructions = v.instructions[spec.instructions].format(choices=fmt.format(*labels))
    if setting.randomly:
        instructions += v.random_instruction
    task = prompt.parts.task
    if prompt.task_type == "cmp":
        # the released placeholder: formatted with "" (no neutral option) or the option line
        task = task.replace(NEUTRAL_SLOT, " \n" + v.neutral_option if setting.neutral else " ")
    header = v.headers[spec.header]
    if setting.reasoning == "cot":
        footer: str | None = v.cot_footers[spec.footer]
        prefill = None
    else:
        cue = v.direct_footers[spec.footer]
        footer, prefill = (None, cue) if setting.direct_cue == "prefill" else (cue, None)
    body = [header, instructions, task] if spec.template == 1 else [header, task, instructions]
    if footer is not None:
        body.append(footer)
    return BuiltPrompt(user="\n".join(body), prefill=prefill, labels=labels)


_BOXED = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")


def parse_boxed(text: str, labels: tuple[str, ...]) -> str | None:
    """The last ``\\boxed{X}`` in ``text`` whose X is one of ``labels`` (seed 003, F.1), else None.

    >>> parse_boxed("so \\\\boxed{A}? no: \\\\boxed{ B }", ("A", "B"))
    'B'
    >>> parse_boxed("\\\\boxed{maybe}", ("A", "B")) is None
    True
    """
    found = [m.group(1) for m in _BOXED.finditer(text) if m.group(1) in labels]
    return found[-1] if found else None


def cot_answer_prompt(rendered: str, generation: str, labels: tuple[str, ...]) -> tuple[str, bool]:
    """The prompt at which a CoT answer label is scored, and whether the model boxed a valid answer.

    If the generation has a ``\\boxed{<label>}``, the prompt is the rendered
    prompt plus the generation up to and including the last such ``\\boxed{``
    (so the scored distribution is the model's own answer slot). Otherwise the
    generation is closed with ``"\\nFinal answer: \\boxed{"`` and the label is
    scored there. Score the labels with ``space="none"``.

    >>> cot_answer_prompt("P:", " think. \\\\boxed{B} done", ("A", "B"))
    ('P: think. \\\\boxed{', True)
    """
    last = None
    for m in _BOXED.finditer(generation):
        if m.group(1) in labels:
            last = m
    if last is not None:
        return rendered + generation[: last.start() + len("\\boxed{")], True
    return rendered + generation.rstrip() + "\nFinal answer: \\boxed{", False
