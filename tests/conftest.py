"""Test set-up: offline, shared data from ../shared/data, tiny and real model fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("PROBE_DATA", str((ROOT / ".." / "shared" / "data").resolve()))
sys.path.insert(0, str(ROOT))  # `tests.tiny`

SHARED_DATA = Path(os.environ["PROBE_DATA"])


@pytest.fixture(scope="session")
def tiny_lm():
    from tests.tiny import tiny_lm as make

    return make()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    """The tiny model saved as a local model directory (for CLI tests that take --model DIR)."""
    from tests.tiny import tiny_lm as make

    lm = make()
    d = tmp_path_factory.mktemp("tiny-model")
    lm.model.save_pretrained(d)
    lm.tokenizer.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def other_model_dir(tmp_path_factory) -> Path:
    """The tiny model with other random weights (same architecture and tokenizer), as a model directory."""
    from tests.tiny import tiny_lm as make

    lm = make(seed=1)
    d = tmp_path_factory.mktemp("tiny-model-seed1")
    lm.model.save_pretrained(d)
    lm.tokenizer.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def smollm2():
    """The real embedded default model (converted once, then cached under PROBE_CACHE)."""
    try:
        from probe.models import load_model

        return load_model("smollm2")
    except Exception as exc:  # pragma: no cover - only when the wheel is missing
        pytest.skip(f"smollm2 not available: {exc}")


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch runs on one thread for the module's tests, then goes back to what it had."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
