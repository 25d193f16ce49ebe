"""Uploads belong to the session that sent them and are temporary.

Each upload is unpacked under its session's own folder (``<uploads>/<session id>/…``), counted
against a disk budget (:data:`DISK_BUDGET`, ``attnviz app --upload-disk``), and deleted when the
session ends (its state expires or the tab closes: :func:`end_session`) or when the session
uploads another model (:func:`adopt`). Deleting one ends its worker and drops its menu name.
"""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path

from . import store, workers
from .upload_space import owner_dir
from .upload_space import set_disk_budget as set_disk_budget  # `attnviz app --upload-disk`

_SID = re.compile(r"[0-9a-f]{8,64}")
_OWNED: dict[str, set[Path]] = {}  # session id -> its upload folders
_LOCK = threading.Lock()


def adopt(sid: str, folder: str | Path) -> None:
    """``folder`` is now session ``sid``'s model: its earlier uploads are deleted."""
    folder = Path(folder).resolve()
    with _LOCK:
        old = _OWNED.get(sid, set()) - {folder}
        _OWNED[sid] = {folder}
    for f in old:
        remove(f)


def end_session(sid: str) -> list[Path]:
    """Delete every upload of session ``sid`` (its state expired or its tab closed); the
    folders removed."""
    with _LOCK:
        gone = sorted(_OWNED.pop(sid, set()))
    for f in gone:
        remove(f)
    root = store.private_dir("uploads").resolve() if sid else None
    if root is not None and _SID.fullmatch(sid):
        shutil.rmtree(owner_dir(root, sid), ignore_errors=True)  # refused ones' leftovers too
    return gone


def remove(folder: Path) -> None:
    """Delete one upload: its worker ended, its menu name and facade dropped, its files gone."""
    pool = workers.pool()
    if pool is not None:
        pool.end(folder)
    store.forget_model(folder)
    shutil.rmtree(folder.parent, ignore_errors=True)  # <session>/<digest>/<name>: the digest


def owned(sid: str) -> set[Path]:
    """The upload folders session ``sid`` holds now."""
    with _LOCK:
        return set(_OWNED.get(sid, set()))
