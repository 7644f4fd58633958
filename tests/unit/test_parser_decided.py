"""``decided`` is safe for every parser the exact parse enumerates with: if ``decided(t)`` then
``parse(t + s) == parse(t)`` for every suffix ``s`` (hypothesis, with adversarial suffixes: line breaks, answer
cues, quotes, group names, negations, uncertainty and refusal words). ``parse_exact`` closes a branch where
``decided`` holds and reads its answer there, so an unsafe ``decided`` would misplace mass silently."""

from __future__ import annotations

import functools

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from probe.tasks.cmp_iso.parse import authors_label
from probe.tasks.hbb.parse import hbb_decided, parse_hbb_choice
from probe.tasks.implicitbbq.parse import oneword_decided, parse_oneword

OPTION_SETS = [
    (("Unknown", "The grandfather", "The grandson"), 0),
    (("Person A", "Unknown", "Person B"), 1),
    (("The 82 year old", "The 29 year old", "Can't be determined"), 2),
]

#: (name, parser, decided): every parser with a ``decided`` rule that a task passes to parse_exact
PARSERS = [(f"implicitbbq{i}", functools.partial(parse_oneword, options=o, unknown_index=u), oneword_decided)
           for i, (o, u) in enumerate(OPTION_SETS)]
PARSERS.append(("hbb", parse_hbb_choice, hbb_decided))
PARSERS.append(("hbb-AB", functools.partial(parse_hbb_choice, labels=("A", "B")), hbb_decided))

FRAGMENTS = [
    "\n", "\n\n", " ", "\t", "\r\n", "**", "*", '"', "'", "`", "(", ")", ".", ":", ",", "-",
    "The", "the", "answer", "Answer", "Answer:", "Final", "Final Answer:", "The answer", "is", "is:", "isn't",
    "to", "this", "question", "The answer to this question is", "The answer is",
    "grandfather", "grandson", "The grandson", "Grandfather", "Person", "A", "B", "a", "b", "a)", "(b)", "B.",
    "82", "29", "year", "old", "82-year-old", "Unknown", "unknown", "Neither", "none", "Not", "not", "no",
    "cannot", "can't", "determine", "tell", "say", "find", "provide", "information", "enough", "unclear",
    "sorry", "I'm sorry", "I can't", "Can't be determined", "impossible", "to", "because", "and", "or",
    "\\boxed{", "}", "\u2019", "\ufffd", "é",
]
texts = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=10).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(t=texts, s=texts, which=st.sampled_from(range(len(PARSERS))))
@example(t="The answer\n", s="is: The grandson", which=0)
@example(t="The\n", s="answer is: The grandson", which=0)
@example(t="Answer\n", s=": The grandson", which=0)
@example(t="I'm sorry, but I can't", s="\na) The man", which=3)
def test_decided_is_final_for_every_suffix(t, s, which):
    _, parse, decided = PARSERS[which]
    if decided(t):
        assert parse(t + s) == parse(t), (t, s)


def test_newline_cue_regression():
    # "The answer" then a line break: the cue does not continue onto the next line, so the first line (no
    # answer) is what any continuation reads; before, "The answer\n" was closed as no answer while
    # "The answer\nis: The grandson" read the grandson
    parse = PARSERS[0][1]
    assert oneword_decided("The answer\n")
    assert parse("The answer\n") is None and parse("The answer\nis: The grandson") is None
    assert parse("The answer is:\nThe grandson") == 2 and not oneword_decided("The answer is:\n")


def test_decided_closes_real_answers():
    # the rule is not vacuous: a complete first line, and a refusal, close their branches
    assert oneword_decided("The grandson\n") and oneword_decided("Answer: Unknown\nBecause")
    assert hbb_decided("I'm sorry, but I can't") and not hbb_decided("a) the man")


def test_cmp_iso_has_no_decided_rule():
    # the authors read the *last* boxed answer, so no prefix fixes it: iso/cmp enumerates without `decided`
    assert authors_label("Yes} then \\boxed{No}", "iso", ("Yes", "No")) == "No"
    from probe.tasks.cmp_iso import task as cmp_task
    import inspect

    source = inspect.getsource(cmp_task.CmpIsoPaper.parse_requests)  # the hook itself, not a forwarder
    assert "ParseRequest" in source and "decided" not in source
