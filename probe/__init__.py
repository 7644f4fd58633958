"""probe: exact, deterministic, logit-level bias evaluation of open-weight language models."""

__version__ = "0.1.0"
