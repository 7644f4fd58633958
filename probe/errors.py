"""Errors the user can act on. The CLI prints them without a traceback."""

from __future__ import annotations

from pathlib import Path


class ProbeError(Exception):
    """A problem with the user's input, model or environment, stated plainly."""


class InputError(ProbeError, ValueError):
    """Bad input data: names the file, line (1-based) and field.

    >>> str(InputError("items.jsonl", 3, "options", "must be a list of strings"))
    "items.jsonl, line 3, field 'options': must be a list of strings"
    """

    def __init__(self, path: str | Path, line: int | None, field: str | None, message: str) -> None:
        self.path, self.line, self.field = str(path), line, field
        where = self.path
        if line is not None:
            where += f", line {line}"
        if field is not None:
            where += f", field {field!r}"
        super().__init__(f"{where}: {message}")


class ModelLoadError(ProbeError):
    """The model could not be found or loaded."""
