"""``--device auto`` / ``--dtype auto``: the GPU when one is visible, bfloat16 where it is supported.

No GPU is needed: ``torch.cuda.is_available`` / ``is_bf16_supported`` are
monkeypatched, and the model's ``.to`` is recorded instead of run.
"""

from __future__ import annotations

import argparse

import pytest
import torch

from probe.errors import ModelLoadError
from probe.models import loader
from probe.models.loader import load_model, resolve_device, resolve_dtype


def _gpu(monkeypatch, available: bool = True, bf16: bool = True) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)


def test_auto_device_is_the_gpu_when_one_is_visible(monkeypatch):
    _gpu(monkeypatch, True)
    assert resolve_device("auto") == "cuda"
    _gpu(monkeypatch, False)
    assert resolve_device("auto") == "cpu"


def test_explicit_devices_are_kept_or_refused(monkeypatch):
    _gpu(monkeypatch, False)
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ModelLoadError, match="no CUDA GPU"):
        resolve_device("cuda:1")
    _gpu(monkeypatch, True)
    assert resolve_device("cuda:1") == "cuda:1"


@pytest.mark.parametrize("available, bf16, device, want", [
    (True, True, "cuda", "bfloat16"),      # Ampere and later
    (True, True, "cuda:0", "bfloat16"),
    (True, False, "cuda", "float32"),      # a GPU without bfloat16: float32, not float16 (overflow)
    (True, True, "cpu", "float32"),        # a GPU is there but the CPU was asked for
    (False, False, "cpu", "float32"),
])
def test_auto_dtype(monkeypatch, available, bf16, device, want):
    _gpu(monkeypatch, available, bf16)
    assert resolve_dtype("auto", device) == want


def test_explicit_dtype_is_kept_and_unknown_refused(monkeypatch):
    _gpu(monkeypatch, True, True)
    assert resolve_dtype("float16", "cuda") == "float16"
    assert resolve_dtype("float32", "cuda") == "float32"
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        resolve_dtype("float8", "cuda")


class _Recorder:
    def __init__(self) -> None:
        self.dtype = None
        self.to: list = []


def _fake_load(monkeypatch, tiny_model, rec: _Recorder) -> None:
    """``_from_pretrained`` returning the tiny model; its ``.to`` recorded, not run (no GPU here)."""
    from tests.tiny import tiny_tokenizer

    def fake(model_dir, torch_dtype, kwargs, name):
        rec.dtype = torch_dtype
        tiny_model.to = lambda device: rec.to.append(device)  # instance attribute shadows Module.to
        return tiny_model, tiny_tokenizer()

    monkeypatch.setattr(loader, "_from_pretrained", fake)


def test_load_model_defaults_to_the_gpu_in_bfloat16(monkeypatch, tmp_path):
    from tests.tiny import tiny_model, tiny_tokenizer

    _gpu(monkeypatch, True, True)
    rec = _Recorder()
    _fake_load(monkeypatch, tiny_model(len(tiny_tokenizer())), rec)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")  # a model directory has one
    lm = load_model(str(tmp_path / "m"))  # defaults: device="auto", dtype="auto"
    assert rec.to == ["cuda"]
    assert rec.dtype is torch.bfloat16
    assert (lm.dtype, lm.device_requested, lm.dtype_requested) == ("bfloat16", "auto", "auto")
    info = lm.info()  # the provenance of the model (provenance.json "model")
    assert (info["dtype"], info["device_requested"], info["dtype_requested"]) == ("bfloat16", "auto", "auto")


def test_load_model_defaults_to_the_cpu_in_float32(monkeypatch, tmp_path):
    from tests.tiny import tiny_model, tiny_tokenizer

    _gpu(monkeypatch, False, False)
    rec = _Recorder()
    _fake_load(monkeypatch, tiny_model(len(tiny_tokenizer())), rec)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")  # a model directory has one
    lm = load_model(str(tmp_path / "m"))
    assert rec.to == ["cpu"] and rec.dtype is torch.float32
    assert (lm.device, lm.dtype) == ("cpu", "float32")
    assert lm.info()["device"] == "cpu"


def test_a_real_cpu_load_records_what_was_chosen(tmp_path):
    """No fakes: a saved tiny model loaded with the defaults on this (GPU-less) machine."""
    from tests.tiny import tiny_model, tiny_tokenizer

    if torch.cuda.is_available():  # pragma: no cover - the GPU path is the fake one above
        pytest.skip("this test checks the CPU default")
    tok = tiny_tokenizer()
    tiny_model(len(tok)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    lm = load_model(str(tmp_path))
    assert (lm.device, lm.dtype, lm.device_requested, lm.dtype_requested) == ("cpu", "float32", "auto", "auto")
    assert next(lm.model.parameters()).dtype is torch.float32
    from probe.runs.provenance import provenance

    model = provenance(lm)["model"]
    assert (model["device"], model["dtype"]) == ("cpu", "float32")


def test_run_options_and_cli_default_to_auto():
    from probe.commands.common import add_model_args
    from probe.runs.runner import RunOptions

    o = RunOptions()
    assert (o.device, o.dtype, o.batch_size, o.token_budget) == ("auto", "auto", "auto", "auto")
    assert RunOptions(batch_size="8", token_budget=512).batch_size == 8  # YAML strings of numbers
    with pytest.raises(ValueError, match="batch_size must be a positive integer or 'auto'"):
        RunOptions(batch_size="big")
    with pytest.raises(ValueError, match="token_budget"):
        RunOptions(token_budget=0)

    p = argparse.ArgumentParser()
    add_model_args(p)
    a = p.parse_args([])
    assert (a.device, a.dtype, a.batch_size, a.token_budget) == ("auto", "auto", "auto", "auto")
    a = p.parse_args(["--batch-size", "AUTO", "--token-budget", "4096", "--device", "cpu", "--dtype", "bfloat16"])
    assert (a.device, a.dtype, a.batch_size, a.token_budget) == ("cpu", "bfloat16", "auto", 4096)
    with pytest.raises(SystemExit):
        p.parse_args(["--batch-size", "0"])


def test_every_command_defaults_to_auto():
    """probe score / run / demo / activations: device and dtype default to auto."""
    from probe.cli import build_parser

    parser = build_parser()
    for argv in (["score", "--input", "x", "--output", "y"], ["demo"], ["activations", "--input", "x", "--output", "y"]):
        a = parser.parse_args(argv)
        assert (a.device, a.dtype) == ("auto", "auto"), argv
    a = parser.parse_args(["run", "demo", "--batch-size", "auto", "--token-budget", "auto"])
    assert (a.batch_size, a.token_budget) == ("auto", "auto")
    assert a.device is None  # run: None means the config's value, else RunOptions' default (auto)
