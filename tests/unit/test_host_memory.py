"""glibc keeps the blocks a CPU pass frees (probe.scoring.engine.host_memory): when it is set, in what order, and
when it is left alone."""

from __future__ import annotations

import sys

import pytest

import probe.scoring.engine.host_memory as hm
from probe.scoring.engine import Engine, pad_id_of


class FakeLibc:
    """A C library that records ``mallopt`` calls and answers ``answer`` (glibc: 1 on success, 0 refused)."""

    def __init__(self, answer: int = 1) -> None:
        self.calls: list[tuple[int, int]] = []
        self.answer = answer

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return self.answer


@pytest.fixture
def fresh(monkeypatch):
    """A process in which no engine has asked yet, with no opt-out or glibc variable set, and a fake glibc."""
    monkeypatch.setattr(hm, "_state", None)
    for name in (hm.OPT_OUT_ENV, *hm.GLIBC_ENV):
        monkeypatch.delenv(name, raising=False)
    libc = FakeLibc()
    monkeypatch.setattr(hm, "_glibc", lambda: libc)
    return libc


def test_sets_both_thresholds_once_trim_first(fresh):
    assert hm.state() is None
    assert hm.keep_freed_memory() == "kept"
    assert fresh.calls == [(hm.M_TRIM_THRESHOLD, 1 << 30), (hm.M_MMAP_THRESHOLD, 32 << 20)]
    assert hm.keep_freed_memory() == "kept" and len(fresh.calls) == 2  # once per process
    assert hm.state() == "kept"


@pytest.mark.parametrize("value", ["0", "off", "False", " no "])
def test_the_switch_turns_it_off(fresh, monkeypatch, value):
    monkeypatch.setenv(hm.OPT_OUT_ENV, value)
    assert hm.keep_freed_memory() == "off"
    assert fresh.calls == []


def test_any_other_switch_value_keeps_it_on(fresh, monkeypatch):
    monkeypatch.setenv(hm.OPT_OUT_ENV, "1")
    assert hm.keep_freed_memory() == "kept"


@pytest.mark.parametrize("name", hm.GLIBC_ENV)
def test_glibcs_own_variables_stand(fresh, monkeypatch, name):
    monkeypatch.setenv(name, "65536")
    assert hm.keep_freed_memory() == "environment"
    assert fresh.calls == []


def test_refused_is_unavailable_and_stops_at_the_first_refusal(fresh):
    fresh.answer = 0
    assert hm.keep_freed_memory() == "unavailable"
    assert fresh.calls == [(hm.M_TRIM_THRESHOLD, 1 << 30)]


def test_no_glibc_is_unavailable(monkeypatch):
    monkeypatch.setattr(hm, "_state", None)
    for name in (hm.OPT_OUT_ENV, *hm.GLIBC_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(hm, "_glibc", lambda: None)
    assert hm.keep_freed_memory() == "unavailable"


def test_only_linux_has_glibc(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert hm._glibc() is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc is a Linux C library")
def test_this_linux_libc_is_found_when_glibc():
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    assert hm._glibc() is not None


def test_an_engine_on_a_cpu_asks_and_the_provenance_says(fresh, tiny_lm):
    from probe.runs.provenance import provenance

    Engine(tiny_lm.model, pad_id=pad_id_of(tiny_lm.tokenizer))
    assert len(fresh.calls) == 2 and hm.state() == "kept"
    assert provenance()["host_memory"] == "kept"


def test_an_engine_does_not_ask_off_a_cpu(fresh, tiny_lm, monkeypatch):
    import torch

    import probe.scoring.engine.forward as engine

    monkeypatch.setattr(engine, "input_device", lambda model: torch.device("meta"))
    Engine(tiny_lm.model, pad_id=pad_id_of(tiny_lm.tokenizer))
    assert fresh.calls == [] and hm.state() is None
