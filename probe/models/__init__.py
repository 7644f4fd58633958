"""Model loading: built-in names, GGUF files (converted once and cached), local directories, hub ids."""

from probe.models.builtins import BUILTINS, DEFAULT_MODEL
from probe.models.loader import LoadedModel, load_model, sha256_file

__all__ = ["BUILTINS", "DEFAULT_MODEL", "LoadedModel", "load_model", "sha256_file"]
