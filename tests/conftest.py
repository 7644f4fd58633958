"""Test set-up: offline, shared data from ../shared/data, tiny and real model fixtures.

The suite runs in parallel under pytest-xdist (``-n auto``, README "Test"): every fixture that writes files
writes under pytest's own temporary directories, and what is expensive to build once per run
(:func:`built_once`) is shared by the workers through a file under a lock.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("PROBE_DATA", str((ROOT / ".." / "shared" / "data").resolve()))
sys.path.insert(0, str(ROOT))  # `tests.tiny`

SHARED_DATA = Path(os.environ["PROBE_DATA"])

# Property tests: the same examples on every run and every machine (a failure reproduces), and no example
# database written into the working tree by several workers at once. Each test still sets its own count.
settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[], Any]) -> Any:
    """``build()`` once per test run, shared by every pytest-xdist worker.

    The first worker to get here builds and pickles the value into the run's temporary root, under a
    file lock; the others wait for it and unpickle (far cheaper than building real-data items again).
    Wrap it in a session fixture so that a worker unpickles at most once.
    """
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' basetemps are siblings in one folder of this run
    path = root / f"built-{name}.pickle"
    with FileLock(str(path) + ".lock"):
        if path.is_file():
            return pickle.loads(path.read_bytes())
        value = build()
        tmp = path.with_suffix(".part")
        tmp.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        tmp.replace(path)
        return value


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
def smollm2_converted(tmp_path_factory) -> None:
    """smollm2 converted from its GGUF file into ``$PROBE_CACHE``, by one worker, under a lock.

    The first load converts (about a minute); two pytest-xdist workers converting at once would replace the
    folder the other one reads. Every later load reads the cache.
    """
    from filelock import FileLock

    try:
        from probe.models.builtins import builtin_gguf_path
        from probe.models.loader import converted_gguf_dir

        gguf = builtin_gguf_path("smollm2")
    except Exception:  # pragma: no cover - no wheel: the smollm2 fixture skips, saying why
        return
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    with FileLock(str(root / "smollm2-convert.lock")):
        converted_gguf_dir(gguf)


@pytest.fixture(scope="session")
def smollm2(smollm2_converted):
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


def _need_data(*names: str) -> None:
    missing = [n for n in names if not (SHARED_DATA / n).is_dir()]
    if missing:
        pytest.skip(f"shared data not found at {SHARED_DATA} ({', '.join(missing)})")


# The full ImplicitBBQ build reads every BBQ and BharatBBQ template (tens of seconds); several test files
# check the same build, so it is built once per test run and shared (:func:`built_once`). Tests read
# these items and must not change them.
@pytest.fixture(scope="session")
def implicitbbq_full(tmp_path_factory) -> tuple[list, dict]:
    """``build_implicitbbq(stats=stats, explicit_set="full")`` and its ``stats``: every explicit filling."""
    _need_data("bbq", "bharatbbq")

    def build():
        from probe.tasks.implicitbbq.data import build_implicitbbq

        stats: dict = {}
        return build_implicitbbq(stats=stats, explicit_set="full"), stats

    return built_once(tmp_path_factory, "implicitbbq-full", build)


@pytest.fixture(scope="session")
def implicitbbq_matched(tmp_path_factory) -> list:
    """``build_implicitbbq()``: the default build (the explicit items matched to the implicit set)."""
    _need_data("bbq", "bharatbbq")

    def build():
        from probe.tasks.implicitbbq.data import build_implicitbbq

        return build_implicitbbq()

    return built_once(tmp_path_factory, "implicitbbq-matched", build)


# Under pytest-xdist (`-n auto`, README "Test") a file is the unit of work (../conftest.py) and the workers take
# files in collection order. The few files that take minutes go first, so that no worker is left alone with
# one of them at the end while the other idles. Order only: a name missing here costs time, never a test.
SLOW_FIRST = (  # each a few % of the suite's time or more, slowest first (wall time of each file alone)
    "tests/unit/test_report_runs.py",
    "tests/unit/test_resume_kill.py",
    "tests/unit/test_shard_jobs.py",
    "tests/unit/test_stratify.py",
    "tests/unit/test_notebook.py",
    "tests/unit/test_log_samples.py",
    "tests/unit/test_representations.py",
    "tests/unit/test_check_task.py",
    "tests/unit/test_task_hbb.py",
)


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # one process: keep the plain order
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    root = Path(str(config.rootpath))

    def key(item):
        try:
            rel = Path(str(item.path)).resolve().relative_to(root).as_posix()
        except ValueError:
            rel = ""
        return rank.get(rel, len(rank))

    items.sort(key=key)  # stable: the order inside each file and among the rest is kept
