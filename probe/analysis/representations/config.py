"""Settings of the representations analysis: a frozen dataclass read from YAML (unknown keys rejected)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

STEPS = ("items", "activations", "probes", "lens", "patching", "steering")


@dataclass(frozen=True)
class RepresentationsConfig:
    """Analysis settings (YAML keys; unknown keys are rejected).

    Unlike a task config this holds the model and device too: the analysis
    loads its model itself (hooks, patching and steering need the module, not
    the runner's scorer).
    """

    model: str = "smollm2"
    device: str = "cpu"
    dtype: str = "float32"
    threads: int | None = 1
    output_dir: str = "runs/representations"
    dimensions: tuple[str, ...] = ("age", "religion", "ses")
    per_dimension: int = 400
    strategy: str = "zero_shot"
    positions: tuple[str, ...] = ("last", "mean:context", "span:question", "mean:background")
    probe_positions: tuple[str, ...] = ("last", "mean:context")
    probe_layer_stride: int = 2
    batch_size: int = 8
    n_splits: int = 5
    n_shuffles: int = 1
    n_boot: int = 500
    lens_items: int = 60
    patch_pairs_per_dimension: int = 3  # per pair kind and dimension
    patch_positions: tuple[str, ...] = ("last", "span:question")
    steer_alphas: tuple[float, ...] = (-1.0, -0.5, 0.5)
    steer_layer: Any = "best"
    steer_items: int = 96
    seed: int = 0
    steps: tuple[str, ...] = STEPS

    def __post_init__(self) -> None:
        # YAML gives lists; tuples keep the config hashable and frozen
        for k in ("dimensions", "positions", "probe_positions", "patch_positions", "steer_alphas", "steps"):
            object.__setattr__(self, k, tuple(getattr(self, k)))
        missing = set(self.probe_positions) - set(self.positions)
        if missing:
            raise ValueError(f"probe_positions {sorted(missing)} are not in positions")


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> RepresentationsConfig:
    """Read a YAML config (``None``: the defaults) and apply non-None ``overrides``.

    A missing or malformed file, an unknown key or a bad value is an
    :class:`probe.errors.InputError` naming the file (and the key).
    """
    from probe.config import load_config as load

    return load(path, RepresentationsConfig, overrides)
