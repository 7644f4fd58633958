"""The parse stage's plan estimate (probe.runs.plan): calibrated tree sizes, not every prompt at its node limit."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from probe.runs.plan import PARSE_CALIBRATION_NODES, ParseRate, Rates, parse_node_seconds, parse_seconds


def _rates():
    return Rates(token=0.001, step=0.01, rows=8, how="test")


def test_closed_trees_count_at_their_size_open_ones_at_their_limit():
    reqs = [SimpleNamespace(max_nodes=320, prompt="p")] * 10
    # half the calibration prompts closed after 20 nodes on average, 0.01 s a node
    got = parse_seconds(_rates(), reqs, lambda r: 5, ParseRate(0.01, 0.5, 20.0))
    assert got == pytest.approx(10 * (0.5 * 20 + 0.5 * 320) * 0.01)
    # every tree closed: a narrow tree's real size, not its budget (the T = 0.1 case)
    assert parse_seconds(_rates(), reqs, lambda r: 5, ParseRate(0.01, 1.0, 30.0)) == pytest.approx(10 * 30 * 0.01)
    # no node limit: 256 for the estimate; no calibration: at most, every prompt to its limit
    assert parse_seconds(_rates(), [SimpleNamespace(max_nodes=None, prompt="p")], lambda r: 5,
                         ParseRate(0.01, 0.0, 0.0)) == pytest.approx(2.56)
    assert parse_seconds(_rates(), reqs[:1], lambda r: 5) == pytest.approx(320 * 0.01 / 8 + 5 * 0.001)
    # a prompt twice the calibration's length costs twice as much a node
    assert parse_seconds(_rates(), reqs, lambda r: 200, ParseRate(0.01, 1.0, 30.0, 100.0)) == pytest.approx(6.0)


def test_calibration_runs_the_real_enumeration(tiny_lm):
    from probe.scoring.parse.exact import ParseRequest

    reqs = [ParseRequest(id=f"q{i}", prompt=f"Question {i}: yes or no?", max_new_tokens=2, temperature=0.1,
                         top_p=1.0, parser_name="first", parser=lambda t: t.strip()[:1] or None, max_nodes=500)
            for i in range(3)]
    rate = parse_node_seconds(tiny_lm, reqs, batch_size=8)
    assert rate is not None and rate.per_node > 0 and 0 <= rate.closed_share <= 1
    assert rate.closed_nodes <= PARSE_CALIBRATION_NODES and rate.prompt_tokens > 0


def test_an_open_tree_adds_its_tail_draws():
    from probe.runs.plan import tail_tokens
    from probe.scoring.parse.schema import TailSpec

    hyb = SimpleNamespace(max_nodes=120, prompt="p", max_new_tokens=8, tail=TailSpec(25))
    # ceil(K x residual) draws, at most K = 25 of 8 tokens (the residual is not known before the run)
    assert tail_tokens(hyb, 120) == 200.0 and tail_tokens(hyb, 400) == 200.0
    assert tail_tokens(SimpleNamespace(max_nodes=120, max_new_tokens=8, tail=None), 0) == 0.0
    # a longer tail budget (HBB's): draws of its own length
    assert tail_tokens(SimpleNamespace(max_nodes=64, max_new_tokens=8, tail=TailSpec(2, 100)), 64) == 200.0
    rate = ParseRate(0.01, 0.5, 20.0, 0.0, tail_per_token=0.002, tail_share=0.5)
    # half the trees stay open at 120 nodes and draw half their 200-token budget at 0.002 s a token
    want = (0.5 * 20 + 0.5 * 120) * 0.01 + 0.5 * 200 * 0.5 * 0.002
    assert parse_seconds(_rates(), [hyb], lambda r: 5, rate) == pytest.approx(want)
    # closed trees draw nothing; without a calibration the whole budget at the step rate
    assert parse_seconds(_rates(), [hyb], lambda r: 5, ParseRate(0.01, 1.0, 20.0, 0.0, 0.002, 0.5)) == \
        pytest.approx(20 * 0.01)
    assert parse_seconds(_rates(), [hyb], lambda r: 5) == pytest.approx(120 * 0.01 / 8 + 5 * 0.001 + 200 * 0.01 / 8)


def test_calibration_times_a_few_tail_draws(tiny_lm, one_torch_thread):
    from probe.runs.plan import PARSE_CALIBRATION_DRAWS, PARSE_CALIBRATION_TAIL_TOKENS
    from probe.scoring.parse.exact import ParseRequest
    from probe.scoring.parse.schema import TailSpec

    reqs = [ParseRequest(id=f"q{i}", prompt=f"Question {i}: yes or no?", max_new_tokens=3, temperature=1.5,
                         top_p=1.0, parser_name="first", parser=lambda t: t.strip()[:1] or None, residual=0.0,
                         max_nodes=500, tail=TailSpec(200)) for i in range(3)]
    rate = parse_node_seconds(tiny_lm, reqs, batch_size=8)
    assert rate is not None and rate.closed_share == 0.0  # T = 1.5 at 64 nodes: no tree closes
    assert rate.tail_per_token > 0 and 0 < rate.tail_share <= 1
    # a few short draws: the plan prints within seconds even where the tail runs to 2048 tokens (HBB)
    assert PARSE_CALIBRATION_DRAWS == 2 and PARSE_CALIBRATION_TAIL_TOKENS == 32
