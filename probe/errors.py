"""Errors the user can act on. The CLI prints them without a traceback."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Iterable


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


def did_you_mean(name: str, choices: "Iterable[str]", n: int = 3) -> str:
    """`` (did you mean 'bbq'?)`` for a near miss among ``choices``, else ``""``; appended to error messages.

    >>> did_you_mean("bqq", ["bbq", "hbb", "demo"])
    " (did you mean 'bbq'?)"
    >>> did_you_mean("xyz", ["bbq"])
    ''
    """

    choices = [str(c) for c in choices]
    lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(str(name).lower(), list(lower), n=n, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(lower[c]) for c in close) + "?)"
