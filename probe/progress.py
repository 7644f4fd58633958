"""Lines that say what a long step is doing while it runs, so that no step is silent for more than 10 s.

:func:`stage` announces a step (what, how many, the plan), then prints a line every :data:`TICK` seconds
until it ends (how many are done, the seconds so far, the sub-step it is on) and, for a step that took longer
than a tick, how long it took. A step whose length is not known beforehand (reading a data set) may announce
itself only once it has run ``announce_after`` seconds, so quick steps print nothing.

>>> import io
>>> out = io.StringIO()
>>> with stage("bbq: counting tokens", total=3, unit="request(s)", stream=out) as s:
...     s.advance(3)
>>> out.getvalue()
'bbq: counting tokens (3 request(s)) ...\\n'
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

__all__ = ["Stage", "TICK", "stage"]

#: seconds between two lines of a running step (under the 10 s a reader waits before wondering)
TICK = 8.0


class Stage:
    """One announced step; :meth:`advance` counts what is done, :meth:`note` names the sub-step.

    Used as a context manager (:func:`stage`); the lines go to ``stream`` (stderr by default), written by a
    daemon thread between the step's own work."""

    def __init__(self, what: str, *, total: int | None = None, unit: str = "", plan: str = "",
                 announce_after: float = 0.0, every: float | None = None, stream: TextIO | None = None) -> None:
        self.what, self.total, self.unit, self.plan = what, total, unit, plan
        self.announce_after, self.every = float(announce_after), float(TICK if every is None else every)
        self.stream = stream
        self.done = 0
        self.step = ""
        self.announced = False
        self.t0 = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def advance(self, n: int = 1) -> None:
        self.done += int(n)

    def note(self, step: str) -> None:
        """The sub-step now running (shown on the next line)."""
        self.step = step

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def _print(self, line: str) -> None:
        stream = self.stream or sys.stderr
        bars = _bars()
        if bars:  # a line of its own, not glued to a bar's: tqdm clears its bars, prints, redraws them
            bars[0].write(line, file=stream)
        else:
            print(line, file=stream, flush=True)

    def _announce(self) -> None:
        count = f"{self.total:,} {self.unit}".strip() if self.total is not None else ""
        extra = "; ".join(x for x in (count, self.plan) if x)
        self.announced = True
        self._print(f"{self.what}{f' ({extra})' if extra else ''} ...")

    def status(self) -> str:
        """The line a tick prints: what, how many done, the seconds so far, the sub-step."""
        parts = []
        took = self.elapsed()
        if self.total is not None and self.done:
            parts.append(f"{self.done:,} of {self.total:,} {self.unit}".rstrip())
        parts.append(f"{took:.0f} s so far")
        if self.total and 0 < self.done < self.total:  # at the pace so far
            parts.append(f"about {_duration(took / self.done * (self.total - self.done))} left")
        return f"{self.what}: {', '.join(parts)}{f'; {self.step}' if self.step else ''}"

    def _tick(self) -> None:
        if not self.announced:
            if self._stop.wait(self.announce_after):
                return
            self._announce()
        said = time.time()
        # look often, speak when nothing (this stage or a bar) has been printed for ``every`` seconds
        while not self._stop.wait(min(1.0, self.every)):
            if time.time() - max(said, _last_bar_print()) >= self.every:
                self._print(self.status())
                said = time.time()

    def __enter__(self) -> "Stage":
        self.t0 = time.perf_counter()
        if self.announce_after <= 0:
            self._announce()
        self._thread = threading.Thread(target=self._tick, name="probe-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        took = self.elapsed()
        if self.announced and took > self.every and exc[0] is None:
            self._print(f"{self.what}: done in {took:.0f} s")


def _duration(seconds: float) -> str:
    """``"40 s"``, ``"3 min"``, ``"2.5 h"``."""
    if seconds < 90:
        return f"{max(seconds, 1):.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 90 * 60 else f"{seconds / 3600:.1f} h"


def _bars() -> list:
    """The progress bars (tqdm) on screen now; none when tqdm was never loaded."""
    tqdm = getattr(sys.modules.get("tqdm"), "tqdm", None)
    try:
        return [b for b in list(getattr(tqdm, "_instances", ())) if not getattr(b, "disable", False)]
    except Exception:  # noqa: BLE001 - tqdm's internals changed: as if there were none
        return []


def _last_bar_print() -> float:
    """When a progress bar on screen last printed (``time.time()``; 0 when none has): a tick then says nothing
    new."""
    return max((float(getattr(b, "last_print_t", 0.0) or 0.0) for b in _bars()), default=0.0)


def stage(what: str, *, total: int | None = None, unit: str = "", plan: str = "", announce_after: float = 0.0,
          every: float | None = None, stream: TextIO | None = None) -> Stage:
    """A :class:`Stage` to use as ``with stage(...) as s:``; see the module docstring."""
    return Stage(what, total=total, unit=unit, plan=plan, announce_after=announce_after, every=every, stream=stream)


def maybe(enabled: bool, what: str, **kw: Any) -> Any:
    """:func:`stage` when ``enabled`` (a main process with a reader), else a silent stand-in."""
    return stage(what, **kw) if enabled else _Silent()


class _Silent:
    def __enter__(self) -> "_Silent":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def advance(self, n: int = 1) -> None:
        return None

    def note(self, step: str) -> None:
        return None
