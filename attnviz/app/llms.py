"""The packaged LLMs the model menu offers: the real Gemma 3 270M (GGUF, Q4_K_M) when its
package is installed, its file assembled into the user's cache on first use."""

from __future__ import annotations

from ..interop.gguf.packaged import GEMMA3_NAME, assemble_gemma3, gemma3_path
from . import store


def register_models() -> list[str]:
    """Put the packaged LLMs this environment has into the model menu; their menu names.
    They run in the server's process, as the shipped models do."""
    path = gemma3_path()
    if path is None:
        return []
    return [store.register(path, GEMMA3_NAME, shipped=True, prepare=assemble_gemma3)]
