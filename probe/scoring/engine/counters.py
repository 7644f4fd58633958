"""What the hardware sees, counted by the engine: passes, tokens computed, padded and attended, bytes copied,
host-device copies. Benchmarks read them (:meth:`probe.scoring.engine.Engine.counts`); only the engine's own
modules add to them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass
class Counters:
    """Running totals since the engine was built (or last :meth:`reset`)."""

    forward_passes: int = 0  # decoder forward calls
    tokens_computed: int = 0  # non-pad tokens actually computed
    tokens_raw: int = 0  # tokens of every scored sequence, each on its own (no prefix sharing)
    tokens_padded: int = 0  # padding positions run (packed pass: row tails; level path: pad columns)
    tokens_attended: int = 0  # (query, key) pairs the attention masks let through, padding included
    kv_bytes_copied: int = 0  # key/value cache bytes copied (row selection and merging; 0 when packed)
    host_device_copies: int = 0  # host-device copies made by the packed pass and its read

    def add(self, **deltas: int) -> None:
        """Add ``deltas`` (counter name -> amount); an unknown name is a TypeError."""
        for name, value in deltas.items():
            if name not in _NAMES:
                raise TypeError(f"no engine counter {name!r}")
            setattr(self, name, getattr(self, name) + int(value))

    def reset(self) -> None:
        """Every counter back to 0 (a benchmark's next measured call)."""
        for name in _NAMES:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


_NAMES = frozenset(f.name for f in fields(Counters))
