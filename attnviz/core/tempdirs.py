"""Temporary folders with a recognisable name, and the clean-up of those a killed process left.

Every temporary folder attnviz makes is named ``attnviz-<kind>-<pid>-<random>`` (``mkdtemp``:
mode 0700, unpredictable), so the next process can tell which are stale: those whose process
is gone, or, for short-lived ones (an export being written), older than an hour.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path

#: Age after which a short-lived folder (an export being written) is stale even if a process
#: of its pid runs (the pid may have been reused).
STALE_AFTER_S = 3600.0


def make_temp_dir(kind: str, parent: str | Path | None = None, stem: str = "") -> Path:
    """A new private folder ``{stem}attnviz-{kind}-{pid}-<random>`` in ``parent`` (default:
    the system's temporary folder)."""
    prefix = f"{stem}attnviz-{kind}-{os.getpid()}-"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=None if parent is None else str(parent)))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's process, or a number no process can have: keep it
    return True


def clean_stale(
    kind: str, parent: str | Path | None = None, max_age: float | None = None
) -> list[Path]:
    """Remove the folders of ``kind`` (see :func:`make_temp_dir`) in ``parent`` that a process
    now gone left behind, or (with ``max_age``) older than ``max_age`` seconds; never this
    process's, never another user's, never a link.

    Returns:
        the folders removed.
    """
    root = Path(tempfile.gettempdir() if parent is None else parent)
    pattern = re.compile(rf"attnviz-{re.escape(kind)}-(\d+)-")
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        match = pattern.search(entry.name)
        if match is None:
            continue
        pid = int(match.group(1))
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or pid == os.getpid():
            continue
        old = max_age is not None and now - info.st_mtime > max_age
        if old or not _alive(pid):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed
