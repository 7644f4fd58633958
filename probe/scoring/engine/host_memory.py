"""Host memory for passes on a CPU: glibc keeps the blocks a pass frees, for the next layer to reuse.

A packed pass on a CPU allocates and frees the same large temporaries in every layer (SmolLM2's MLP:
three rows x 1,668 tokens x 1,536 floats, 31 MB, several times a layer). glibc's ``malloc`` hands such
blocks back to the kernel when they are freed (``munmap``, or trimming the heap's top past 128 KiB), so
the next layer's block of the same size is new memory again, and every page of it faults in and is zeroed
before the layer writes to it: on that workload, 10-15 % of the pass's time went on first touches.
:func:`keep_freed_memory` raises glibc's two thresholds with ``mallopt`` so freed blocks up to 32 MiB stay
in the heap, and the heap's free top up to 1 GiB is kept: the next layer reuses warm pages.

It changes where tensors live, never what is computed: PyTorch aligns every CPU tensor to 64 bytes
whatever ``malloc`` returns, so the kernels and their results are the same (docs/scoring.md, "Host memory
on a CPU"). It is process-wide, set once, by the first :class:`probe.scoring.engine.Engine` on a CPU; the
cost is that a process keeps up to 1 GiB it freed instead of returning it. It is not set when:

- ``PROBE_KEEP_FREED_MEMORY=0`` (or ``off`` / ``false`` / ``no``);
- the environment already sets glibc's own ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` /
  ``MALLOC_TOP_PAD_`` (the user's choice stands);
- the C library is not glibc (macOS, Windows, musl), where ``mallopt`` is absent or means else.
"""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

#: glibc's ``mallopt`` parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: blocks up to this size come from the heap, not their own mapping: glibc's ceiling on 64-bit
#: (``HEAP_MAX_SIZE / 2``); ``mallopt`` refuses more
MMAP_THRESHOLD = 32 << 20
#: the heap's free top is handed back only past this size (glibc's default is 128 KiB, raised to twice the
#: largest freed mapping while the thresholds are left to glibc; setting one of them stops that)
TRIM_THRESHOLD = 1 << 30
#: the switch, and glibc's own variables that mean the user chose
OPT_OUT_ENV = "PROBE_KEEP_FREED_MEMORY"
GLIBC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

_state: str | None = None


def _glibc() -> Any:
    """The process's C library when it is glibc (it has ``gnu_get_libc_version`` and ``mallopt``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only (musl has mallopt as a no-op stub)
        return libc if hasattr(libc, "mallopt") else None
    except (OSError, AttributeError):
        return None


def keep_freed_memory() -> str:
    """Set glibc to keep freed blocks (module docstring) once per process; return what is in force:

    - ``"kept"``: set now or by an earlier call;
    - ``"off"``: ``PROBE_KEEP_FREED_MEMORY`` turns it off;
    - ``"environment"``: glibc's own ``MALLOC_*_`` variables are set, and stand;
    - ``"unavailable"``: not glibc, or ``mallopt`` refused.
    """
    global _state
    if _state is not None:
        return _state
    if os.environ.get(OPT_OUT_ENV, "").strip().lower() in ("0", "off", "false", "no"):
        _state = "off"
    elif any(name in os.environ for name in GLIBC_ENV):
        _state = "environment"
    else:
        libc = _glibc()
        # both or neither helps: either one set alone stops glibc's own adjustment of the other (mapping
        # threshold alone, measured: the heap is trimmed at 128 KiB and the pass is slower than glibc's default)
        ok = libc is not None and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 \
            and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
        _state = "kept" if ok else "unavailable"
    return _state


def state() -> str | None:
    """What :func:`keep_freed_memory` set in this process (None: no engine on a CPU has asked yet)."""
    return _state
