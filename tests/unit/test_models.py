"""Model loading errors are clear and GPU-only options refuse politely on CPU."""

from __future__ import annotations

import pytest
import torch

from probe.errors import ModelLoadError
from probe.models import load_model


def test_missing_path():
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model("./no/such/model")


def test_truncated_gguf_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("PROBE_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 10)
    with pytest.raises(ModelLoadError, match="cannot read GGUF"):
        load_model(str(bad))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
@pytest.mark.parametrize("flag", ["load_in_8bit", "load_in_4bit"])
def test_bitsandbytes_needs_gpu(flag):
    with pytest.raises(ModelLoadError, match="CUDA"):
        load_model("smollm2", **{flag: True})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_cuda_device_without_gpu():
    with pytest.raises(ModelLoadError, match="no CUDA"):
        load_model("smollm2", device="cuda")


def test_unknown_dtype():
    with pytest.raises(ModelLoadError, match="dtype"):
        load_model("smollm2", dtype="float8")
