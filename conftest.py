"""pytest at the repository root: ``--doctest-modules`` (pyproject) collects the doctests of ``probe/``.

Under pytest-xdist each worker runs torch on one thread (see below).

A module that imports an optional extra at its top is left out when the extra is not installed, as the
tests of that extra skip themselves (``pytest.importorskip``).
"""

import importlib.util
import os

import pytest

# Under pytest-xdist (`-n auto`) every worker is its own process: torch's default of one thread per core
# would run cores x workers threads on the machine and slow every worker down. One thread each; set
# before torch is first imported (the doctests import it), and inherited by the subprocesses tests start.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

collect_ignore = []
if importlib.util.find_spec("lm_eval") is None:  # probe[lm-eval]
    collect_ignore.append("probe/integrations/lm_eval.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``-n auto`` hands out whole files, in collection order (the slowest first: tests/conftest.py).

    A file's module fixtures (a task run on the tiny model, a real-data build) are then built by one worker
    only, not once per worker that got one of its tests. An explicit ``--dist`` keeps xdist's own scheduler.
    """
    if any(a == "-d" or a.startswith("--dist") for a in config.invocation_params.args):
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False  # xdist would sort files by their number of tests instead
    return LoadFileScheduling(config, log)
