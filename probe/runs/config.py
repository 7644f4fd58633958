"""The YAML config file of ``probe run CONFIG.yaml``: read, checked, returned as plain values.

A config's keys: ``task``; ``model`` (or ``models: [a, b]``); ``output``
(:data:`RUN_LEVEL_KEYS`); run options (:data:`probe.runs.runner.RUN_KEYS`); every
other key is a field of the task's config. Keys that would run code shipped with a
model folder (:data:`COMMAND_LINE_ONLY`) are refused: a file is data. The CLI
(:mod:`probe.commands.run`) and the studies in ``experiments/`` read configs here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from probe.errors import ProbeError

# Imports inside functions below are on purpose: `import probe` and `probe --help` load this module, so
# what needs torch, pandas or the engine loads when a function first runs, not at import.

__all__ = ["COMMAND_LINE_ONLY", "RUN_LEVEL_KEYS", "read_config", "refuse_command_line_only"]

#: config keys that are neither run options nor task fields
RUN_LEVEL_KEYS = ("task", "model", "models", "output")

#: keys only the command line (or the Python call) may set: a config file or --set is data, and data
#: must not decide to run code shipped with a model folder
COMMAND_LINE_ONLY = ("trust_remote_code", "allow_pickle_weights")


def refuse_command_line_only(values: dict[str, Any], where: str) -> None:
    """A :class:`ProbeError` when ``values`` (a config or ``--set``) holds a key only the command line may set."""
    for key in COMMAND_LINE_ONLY:
        if key in values:
            flag = "--" + key.replace("_", "-")
            raise ProbeError(f"{where}: {key} cannot be set here (running code shipped with a model folder must be "
                             f"asked for on the command line); remove it and pass {flag} to `probe run` if you trust "
                             "that code")


def read_config(path: Path) -> dict[str, Any]:
    """The YAML config of ``probe run CONFIG.yaml`` as a dict: a mapping that names a ``task`` and sets no
    command-line-only key (:class:`ProbeError` otherwise, one line naming the file)."""
    import yaml

    if not path.is_file():
        raise ProbeError(f"config not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8-sig")) or {}
    except yaml.YAMLError as exc:
        raise ProbeError(f"{path}: not valid YAML ({exc})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProbeError(f"{path}: cannot read the config ({exc})") from None
    if not isinstance(data, dict):
        raise ProbeError(f"{path}: a config is a mapping of keys to values, got {type(data).__name__}")
    refuse_command_line_only(data, str(path))
    if "task" not in data:
        raise ProbeError(f"{path}: the config names no task; add `task: NAME` (tasks: `probe tasks`)")
    return data
