"""The uploads' disk budget and where each session's uploads go: a leaf both the store (which
unpacks an upload) and :mod:`attnviz.app.uploads` (which deletes them) read."""

from __future__ import annotations

import re
from pathlib import Path

from ..core.errors import CheckpointError

GB = 1 << 30
#: Bytes all uploads together may take on disk (``attnviz app --upload-disk``).
DISK_BUDGET = 2 * GB
_SID = re.compile(r"[0-9a-f]{8,64}")


def set_disk_budget(nbytes: int) -> None:
    """Set :data:`DISK_BUDGET` (bytes)."""
    global DISK_BUDGET
    DISK_BUDGET = int(nbytes)


def owner_dir(root: Path, owner: str) -> Path:
    """The folder of session ``owner``'s uploads under ``root`` (``shared`` for none: the
    library's own :func:`attnviz.app.store.import_upload` calls)."""
    return root / (owner if _SID.fullmatch(owner or "") else "shared")


def owner_of(root: Path, folder: str | Path) -> str | None:
    """The session id whose upload ``folder`` is (``"shared"`` for the library's own
    uploads), or None when ``folder`` is not under the uploads' ``root``."""
    try:
        rel = Path(folder).resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):
        return None
    return rel.parts[0] if len(rel.parts) > 1 else None


def visible_to(root: Path, folder: str | Path, owner: str | None) -> bool:
    """Whether session ``owner`` may see (and pick) ``folder``: every model but another
    session's upload under ``root`` (an upload is its session's own)."""
    whose = owner_of(root, folder)
    return whose is None or whose in ("shared", owner)


def used_bytes(root: Path) -> int:
    """Bytes of every file under ``root``."""
    total = 0
    for p in root.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            continue
    return total


def check_space(root: Path, incoming: int) -> None:
    """Refuse an upload of ``incoming`` bytes that would take the uploads past the budget.

    Raises:
        CheckpointError: one line saying the budget (uploads unpack to at most their size
            plus what the zip declares, itself capped: :data:`attnviz.app.unpack.MAX_UPLOAD_BYTES`).
    """
    if used_bytes(root) + incoming > DISK_BUDGET:
        raise CheckpointError(
            f"the server's space for uploads ({DISK_BUDGET / GB:.1f} GB) is full: try again "
            "when other uploads have ended, or run the model with attnviz app --model"
        )
