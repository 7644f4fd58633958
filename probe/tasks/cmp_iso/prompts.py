"""iso / cmp prompts exactly as the authors' prompt builder writes them (iso/cmp paper), settings, CoT answers.

Every string (headers, instructions with and without the neutral option,
footers of the three modes, the "answer randomly" headers and footers, the
neutral option line, the task bodies) is verbatim in
``resources/cmp_iso_variations.yaml``, taken from the authors' released
``prompt_builder.py`` (see docs/cmp_iso.md). The authors build a prompt by
concatenating four components, each but the header starting with ``"\\n"``:

- template 1: header + instructions + task + footer (the released prompts);
- template 2: header + task + instructions + footer;

with ``task = "\\n" + body.strip("\\n")`` and, in cmp tasks, the ``"{}"`` slot after
option B filled with the neutral option line or ``""``. Their three modes
differ in the footer (and, in probability mode, in bare labels):
``cot`` (reason, then ``\\boxed{}``), ``gen`` (answer at once inside a
``\\boxed{`` the prompt opens) and ``prob`` (the cue "My answer would be:" after
which one token is read). :func:`authors_prompt` reproduces each of them, as a
plain string or as their chat messages.

probe's settings (:class:`CmpIsoSetting`) map onto these components
(:func:`build_prompt`):

- ``reasoning="cot"``: the authors' generation mode with the CoT footer, in
  their chat layout: the header as the system message, instructions + task +
  footer as the user message; the model reasons, then the label is scored where
  the authors' parser finds the chain's last boxed answer
  (:func:`last_boxed`, :func:`cot_answer_prompt`), summed over its surface
  forms without whitespace (:func:`cot_answer_forms`).
- ``reasoning="direct"``: the authors' probability mode: bare labels in the
  instructions, the header as the system message, the cue ("My answer would
  be:") as the assistant turn continued (``direct_cue="prefill"``; with
  ``"user"`` the cue ends the user message instead); without a chat template
  their plain string. Each label is scored as the sum over its one-token
  surface forms (:func:`answer_forms`, their ``ANS_MAP_YNS`` / ``ANS_MAP_ABC``).
- ``neutral=True``: three labels, the authors' note on what the neutral label
  means, and in cmp the option "C: Prefer not to answer. ".
- ``randomly=True``: the authors' "answer randomly" header and footer.
- ``variant``: 0..53 in the authors' order (:func:`variant_spec`).

>>> variant_spec(1).name, variant_spec(53).name
('h0-i0-f0-T2', 'h2-i2-f2-T2')
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from itertools import product
from typing import Any, Literal

import yaml

from probe.prompts.chat import apply_template, has_chat_template, render_prompt
from probe.tasks.cmp_iso.data import NEUTRAL_SLOT, CmpIsoPrompt
# The CoT answer parser lives in cmp_iso/parse.py; re-exported here, where callers import it.
from probe.tasks.cmp_iso.parse import (AUTHORS_ANSWER_MAPS, BoxedAnswer, cot_answer_prompt, last_boxed, paradigm,
                                       parse_boxed)  # noqa: F401

N_VARIANTS = 54
MODES = ("cot", "gen", "prob")
ISO_LABELS = ("Yes", "No")
CMP_LABELS = ("A", "B")
ISO_NEUTRAL, CMP_NEUTRAL = "Skip", "C"


@dataclass(frozen=True)
class Variations:
    """The authors' prompt strings (``resources/cmp_iso_variations.yaml``), verbatim."""

    headers: tuple[str, ...]
    random_headers: tuple[str, ...]
    instructions_two: tuple[str, ...]
    instructions_three: tuple[str, ...]
    labels: dict[str, tuple[str, ...]]  # "iso" / "cmp" -> the three labels
    boxed_label: str  # format of a label in the generation modes: \boxed{X}
    footers: dict[str, tuple[str, ...]]  # mode -> 3 wordings
    random_footers: dict[str, tuple[str, ...]]
    third_option: str
    answer_forms: dict[str, tuple[str, ...]]  # label -> surface forms (ANS_MAP_YNS / ANS_MAP_ABC)
    task_bodies: dict[str, dict[str, str]]  # body name -> {"iso": ..., "cmp": ...}
    benchmark_bodies: dict[str, str]  # our benchmark name -> body name


@lru_cache(maxsize=1)
def load_variations() -> Variations:
    """Read the packaged strings (validated: 3 wordings of each, placeholders in place)."""
    text = resources.files("probe.tasks.cmp_iso").joinpath("resources/cmp_iso_variations.yaml").read_text("utf-8")
    d = yaml.safe_load(text)
    v = Variations(
        headers=tuple(d["headers"]),
        random_headers=tuple(d["random_headers"]),
        instructions_two=tuple(d["instructions"]["two"]),
        instructions_three=tuple(d["instructions"]["three"]),
        labels={k: tuple(x) for k, x in d["labels"].items()},
        boxed_label=d["boxed_label"],
        footers={m: tuple(d["footers"][m]) for m in MODES},
        random_footers={m: tuple(d["random_footers"][m]) for m in MODES},
        third_option=d["third_option"],
        answer_forms={k: tuple(x) for k, x in d["answer_forms"].items()},
        task_bodies={k: dict(x) for k, x in d["task_bodies"].items()},
        benchmark_bodies=dict(d["benchmark_bodies"]),
    )
    lists = {"headers": v.headers, "random_headers": v.random_headers, "instructions.two": v.instructions_two,
             "instructions.three": v.instructions_three, **{f"footers.{m}": v.footers[m] for m in MODES},
             **{f"random_footers.{m}": v.random_footers[m] for m in MODES}}
    for name, xs in lists.items():
        if len(xs) != 3:
            raise ValueError(f"cmp_iso_variations.yaml: expected 3 {name}, got {len(xs)}")
    if any(x.count("{}") != 2 for x in v.instructions_two) or any(x.count("{}") != 4 for x in v.instructions_three):
        raise ValueError("cmp_iso_variations.yaml: instructions need 2 (two) / 4 (three) '{}' slots")
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


_CODES = list(product(range(3), range(3), range(3), range(2)))  # the authors' prompt_codes order


def variant_spec(index: int) -> VariantSpec:
    """Variant ``index`` (0..53): the authors' ``product(headers, instructions, footers, templates)``.

    >>> variant_spec(0).name, variant_spec(6).name, variant_spec(18).name
    ('h0-i0-f0-T1', 'h0-i1-f0-T1', 'h1-i0-f0-T1')
    """
    if not 0 <= index < N_VARIANTS:
        raise ValueError(f"variant must be in 0..{N_VARIANTS - 1}, got {index}")
    h, i, f, t = _CODES[index]
    return VariantSpec(index, h, i, f, t + 1)


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

    @property
    def base_name(self) -> str:
        """The name of this setting's variant 0: what its variants are grouped and compared under."""
        return CmpIsoSetting(self.reasoning, self.neutral, self.randomly, 0, self.direct_cue).name


def labels_for(task_type: str, neutral: bool) -> tuple[str, ...]:
    """The answer labels: iso ``Yes/No[/Skip]``, cmp ``A/B[/C]``."""
    if task_type == "iso":
        return ISO_LABELS + ((ISO_NEUTRAL,) if neutral else ())
    if task_type == "cmp":
        return CMP_LABELS + ((CMP_NEUTRAL,) if neutral else ())
    raise ValueError(f"task_type must be 'iso' or 'cmp', got {task_type!r}")


@dataclass(frozen=True)
class PromptElements:
    """The four components of one prompt, each as the authors write it (leading ``"\\n"`` included)."""

    header: str
    instructions: str
    task: str
    footer: str
    template: int

    @property
    def body(self) -> str:
        """Instructions and task in the template's order (the authors' ``INST_TASK_PAIR``)."""
        return self.instructions + self.task if self.template == 1 else self.task + self.instructions

    def text(self) -> str:
        """The authors' plain-text prompt (no chat template): header + body + footer."""
        return self.header + self.body + self.footer

    def messages(self, mode: str) -> list[dict]:
        """The authors' chat messages: the header as system; in ``prob`` mode the footer as the assistant turn."""
        if mode == "prob":
            return [{"role": "system", "content": self.header}, {"role": "user", "content": self.body.strip("\n")},
                    {"role": "assistant", "content": self.footer.strip("\n")}]
        return [{"role": "system", "content": self.header},
                {"role": "user", "content": (self.body + self.footer).strip("\n")}]


def fill_neutral_slot(task: str, neutral: bool, variations: Variations | None = None) -> str:
    """A cmp task with its ``" {}"`` slot filled: the neutral option line, or nothing.

    Only the released slot is replaced (the authors call ``str.format`` on the
    whole task, which breaks on MMLU questions holding braces, e.g. ``{1, 2, 3}``).
    """
    v = variations or load_variations()
    head, sep, tail = task.rpartition(NEUTRAL_SLOT)
    if not sep:
        raise ValueError("cmp task lacks its ' {}' neutral-option slot")
    return head + " " + (v.third_option if neutral else "") + tail


def prompt_elements(prompt: CmpIsoPrompt, mode: str, neutral: bool = False, randomly: bool = False,
                    variant: int = 0, bare_labels: bool | None = None,
                    variations: Variations | None = None) -> PromptElements:
    """The components of ``prompt`` in the authors' ``mode`` (``cot``, ``gen``, ``prob``).

    ``bare_labels``: labels without ``\\boxed{}`` in the instructions; default:
    only in ``prob`` mode (as the authors).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    v = variations or load_variations()
    spec = variant_spec(variant)
    bare = mode == "prob" if bare_labels is None else bare_labels
    labels = [x if bare else v.boxed_label.format(x) for x in v.labels[prompt.task_type]]
    if neutral:
        instructions = v.instructions_three[spec.instructions].format(*labels, labels[2])
    else:
        instructions = v.instructions_two[spec.instructions].format(*labels[:2])
    task = prompt.parts.task
    if prompt.task_type == "cmp":
        task = fill_neutral_slot(task, neutral, v)
    header = (v.random_headers if randomly else v.headers)[spec.header]
    footer = (v.random_footers if randomly else v.footers)[mode][spec.footer]
    return PromptElements(header, instructions, "\n" + task.strip("\n"), footer, spec.template)


def authors_prompt(prompt: CmpIsoPrompt, mode: str, neutral: bool = False, randomly: bool = False,
                   variant: int = 0, chat: bool = False) -> str | list[dict]:
    """The prompt the authors' builder makes: a string, or with ``chat`` their messages."""
    e = prompt_elements(prompt, mode, neutral, randomly, variant)
    return e.messages(mode) if chat else e.text()


def answer_forms(labels: tuple[str, ...], variations: Variations | None = None) -> tuple[tuple[str, ...], ...]:
    """Each label's surface forms in the authors' answer maps (``"Yes"``: ``"Yes"``, ``" Yes"``, ``"yes"``, ...).

    >>> answer_forms(("A",))[0][:4]
    ('A', ' A', 'A ', ' A ')
    """
    v = variations or load_variations()
    return tuple(v.answer_forms[x] for x in labels)


@dataclass(frozen=True)
class BuiltPrompt:
    """A prompt ready for :func:`render_built` and label scoring.

    ``user`` / ``system`` / ``prefill``: the chat messages (``prefill`` continues
    the assistant turn); ``plain``: the authors' string for models without a
    chat template; ``forms``: per label, the surface forms whose one-token
    probabilities add up (empty: the label under the scorer's joining rule).
    """

    user: str
    prefill: str | None
    labels: tuple[str, ...]
    system: str | None = None
    plain: str | None = None
    forms: tuple[tuple[str, ...], ...] = ()


def build_prompt(prompt: CmpIsoPrompt, setting: CmpIsoSetting, variations: Variations | None = None) -> BuiltPrompt:
    """The messages (or plain string) of ``prompt`` under ``setting``.

    CoT: the authors' generation-mode messages (header as system, the rest as
    user; rendered with the generation prompt, see docs/cmp_iso.md), the labels
    scored with :func:`cot_answer_forms`. Direct: their probability
    mode (bare labels, header as system, the cue continued as the assistant
    turn, labels summed over their surface forms); ``direct_cue="user"`` puts
    the cue at the end of the user message instead.
    """
    labels = labels_for(prompt.task_type, setting.neutral)
    if setting.reasoning == "cot":
        # the authors' chat layout of their generation mode (_prompt_tempale): system = header,
        # user = (instructions + task + footer).strip("\n"); without a chat template their plain string
        e = prompt_elements(prompt, "cot", setting.neutral, setting.randomly, setting.variant, variations=variations)
        system, user = (m["content"] for m in e.messages("cot"))
        return BuiltPrompt(user=user, prefill=None, labels=labels, system=system, plain=e.text(),
                           forms=cot_answer_forms(labels, variations))
    e = prompt_elements(prompt, "prob", setting.neutral, setting.randomly, setting.variant, variations=variations)
    forms = answer_forms(labels, variations)
    if setting.direct_cue == "user":
        return BuiltPrompt(user=(e.body + e.footer).strip("\n"), prefill=None, labels=labels, system=e.header,
                           plain=e.text(), forms=forms)
    return BuiltPrompt(user=e.body.strip("\n"), prefill=e.footer.strip("\n"), labels=labels, system=e.header,
                       plain=e.text(), forms=forms)


def render_built(tokenizer: Any, built: BuiltPrompt) -> str:
    """The string to score: with a chat template the messages rendered as the authors do (a prefill:
    ``add_generation_prompt=False, continue_final_message=True``; a template without a system role
    gets the system text folded into the user turn); without one, ``built.plain``."""

    if not has_chat_template(tokenizer):
        return built.plain if built.plain is not None else render_prompt(tokenizer, built.user, built.system,
                                                                          built.prefill)
    if built.prefill is None:
        return render_prompt(tokenizer, built.user, system=built.system)
    messages = ([{"role": "system", "content": built.system}] if built.system else []) + [
        {"role": "user", "content": built.user}, {"role": "assistant", "content": built.prefill}]
    return apply_template(tokenizer, messages, add_generation_prompt=False, continue_final_message=True)


def task_body(benchmark: str, task_type: str, variations: Variations | None = None) -> str:
    """The authors' task body of ``benchmark`` (our name) as a template with named fields."""
    v = variations or load_variations()
    if benchmark not in v.benchmark_bodies:
        raise ValueError(f"no task body for benchmark {benchmark!r}; known: {sorted(v.benchmark_bodies)}")
    return v.task_bodies[v.benchmark_bodies[benchmark]][task_type]


def cot_answer_forms(labels: tuple[str, ...], variations: Variations | None = None) -> tuple[tuple[str, ...], ...]:
    """Each label's surface forms after a chain: the direct setting's forms without whitespace (the
    authors' parser rejects ``\\boxed{ Yes}``) plus their one-letter iso answers y / n / s in both cases.

    >>> cot_answer_forms(("Yes", "No"))[0]
    ('Yes', 'yes', 'YES', 'y', 'Y')
    >>> cot_answer_forms(("A", "B"))[0]
    ('A', 'a')
    """
    v = variations or load_variations()
    amap = AUTHORS_ANSWER_MAPS[paradigm(labels)]
    out = []
    for x in labels:
        forms = [f for f in v.answer_forms[x] if f == f.strip()]
        for k, lab in amap.items():
            if lab == x:
                forms += [k, k.upper()]
        out.append(tuple(dict.fromkeys(forms)))
    return tuple(out)
