"""Checkpoints for the app: loaded once per process, shared read-only, uploads checked.

Loaded checkpoints live in a module-level dict keyed by ``(path, device)`` and guarded by a
lock, so every session (and thread) shares one read-only model per file. A checkpoint that is
rewritten on disk (training still running) is loaded again on its next use. Uploads are
unpacked into a private temporary folder; only ``model.safetensors``, ``config.json`` and
``snapshots.safetensors`` are ever written there (a Hugging Face folder: its config, weights or
shards and tokenizer files, under their own flat names), and nothing is unpickled.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from ..checkpoint import WEIGHTS, Checkpoint, load_checkpoint
from ..core import devices
from ..core.errors import AttnvizError, CheckpointError, one_line, shorten
from ..core.tempdirs import clean_stale, make_temp_dir
from ..interop.hf import is_hf_folder
from . import workers
from .examples import examples_for as examples_for  # imported from here too
from .examples import examples_of as examples_of
from .lru import LRU as LRU  # the app's LRU map (imported from here too)
from .unpack import HF_INDEX as HF_INDEX  # the index of a sharded Hugging Face folder
from .unpack import check_size, digest, unpack, upload_name
from .upload_space import check_space, owner_dir, owner_of, visible_to  # per-session uploads
from .workers import WorkerStopped, facade, remote_path

ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = ROOT / "models"
ASSETS_DIR = ROOT / "assets"
#: Preferred order of the shipped models in the picker; others follow alphabetically.
SHIPPED_ORDER = ("reverse", "copy", "sort", "translate")


#: Loaded checkpoints by (path, device): (file version, checkpoint). Shipped ones reload on
#: demand if pushed out by uploads.
_CACHE = LRU(8)
_LOADING: dict[tuple[str, str], threading.Lock] = {}
_LOCK = threading.Lock()
_FACADES = LRU(64)  # (path, device) -> (version, Facade): models that run in workers
_SHIPPED_EXTRA: set[str] = set()  # shipped models outside models/ (the shipped Whisper)
#: what makes a registered model's file before its first load (a packaged model assembled)
_PREPARE: dict[str, Callable[[], object]] = {}
_PRIVATE: dict[str, Path] = {}
_DIR_LOCK = threading.Lock()


#: The kinds of :func:`private_dir` folders the app makes.
PRIVATE_KINDS = ("uploads", "exports")


def clean_stale_dirs() -> list[Path]:
    """Remove the private folders that app processes now gone left behind (killed before
    they could clean up); ``attnviz app`` calls it as it starts."""
    return [p for kind in PRIVATE_KINDS for p in clean_stale(kind)]


def private_dir(name: str) -> Path:
    """A folder of this process only (``mkdtemp``: mode 0700, unpredictable name), made once.

    Uploads and exports go there, so another local user cannot plant files for us to load.
    Named ``attnviz-{name}-{pid}-…``: the first one made removes those of processes that are
    gone (an app killed before it could clean up).
    """
    with _DIR_LOCK:
        if name not in _PRIVATE:
            clean_stale(name)
            _PRIVATE[name] = make_temp_dir(name)
        return _PRIVATE[name]


# -- devices and the shared cache ----------------------------------------------------------------
def resolve_device(device: str = "auto") -> str:
    """``"auto"`` -> ``"cuda"`` when available, else ``"cpu"``; other names are checked."""
    return str(devices.resolve_device(device))


def _version(path: Path) -> int:
    """Modification time of the weights file (0 if it is missing: loading will say so)."""
    weights = path / WEIGHTS if path.is_dir() else path
    if path.is_dir() and not weights.is_file() and (path / HF_INDEX).is_file():
        weights = path / HF_INDEX  # a sharded Hugging Face folder
    try:
        return weights.stat().st_mtime_ns
    except OSError:
        return 0


def get_checkpoint(path: str | Path, device: str = "cpu") -> Checkpoint:
    """The checkpoint at ``path`` on ``device``, loaded once and shared (read-only).

    Raises:
        AttnvizError: the files are missing, a pickle, truncated or do not match; anything
            else that goes wrong while loading (out of memory, say) as a CheckpointError.
    """
    path = Path(path).resolve()
    key = (str(path), device)
    if remote_path(path):  # a chosen model: opened in its worker, never here
        version = _version(path)
        hit = _FACADES.get(key)
        if hit is None or hit[0] != version:
            hit = (version, facade(path, device))
            _FACADES.put(key, hit)
        return hit[1]
    with _LOCK:
        loading = _LOADING.setdefault(key, threading.Lock())
    # one lock per file: two sessions never load the same file twice, and a big upload
    # being loaded does not hold up sessions using other models
    with loading:
        prepare = _PREPARE.get(str(path))
        if prepare is not None and not path.exists():
            try:
                prepare()
            except Exception as exc:  # noqa: BLE001 (a message in the page, never a traceback)
                raise CheckpointError(
                    f"{path.name} could not be made: {one_line(exc, 200)}"
                ) from exc
        version = _version(path)
        hit = _CACHE.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        try:
            ckpt = load_checkpoint(path, device=device)
        except AttnvizError:
            raise
        except Exception as exc:  # noqa: BLE001 (a message in the page, never a traceback)
            raise CheckpointError(f"{path} could not be loaded: {one_line(exc, 300)}") from exc
        _CACHE.put(key, (version, ckpt))
        return ckpt


def is_shipped(path: str | Path) -> bool:
    """A model the app ships (``models/*``, the shipped Whisper): it runs in the server's
    process; every other model runs in a worker (:mod:`attnviz.app.workers`)."""
    path = str(Path(path).resolve())
    return path in _SHIPPED_EXTRA or path in {
        str(Path(p).resolve()) for p in shipped_models().values()
    }


def forget_model(path: str | Path) -> None:
    """Drop a model that is gone (a deleted upload): its menu name and the server's facade."""
    path = str(Path(path).resolve())
    with _NAMED_LOCK:
        for name in [n for n, folder in _NAMED.items() if folder == path]:
            del _NAMED[name]
    for key in [(path, d) for d in ("cpu", "cuda")]:
        _FACADES.pop(key)
        _CACHE.pop(key)


def load(path: str | Path, device: str = "cpu") -> tuple[Checkpoint, int]:
    """:func:`get_checkpoint` and the version of the file it was loaded from (or found
    current), read once: a request hands this version on (the decoder cache, the panel
    stamps) instead of reading the file again."""
    ckpt = get_checkpoint(path, device)
    key = (str(Path(path).resolve()), device)
    hit = (_FACADES if remote_path(path) else _CACHE).get(key)
    if hit is not None and hit[1] is ckpt:
        return ckpt, hit[0]
    return ckpt, version_of(path)  # loaded elsewhere meanwhile: read it


def version_of(path: str | Path) -> int:
    """What :func:`get_checkpoint` compares to know a cached model is still current."""
    return _version(Path(path).resolve())


# -- names in the model menu ----------------------------------------------------------------------
_NAMED: dict[str, str] = {}  # menu name -> folder, for models that are not shipped
_NAMED_LOCK = threading.Lock()


def model_name(path: str | Path) -> str:
    """The menu name of a checkpoint folder: its shipped name, or the name it was registered
    under (an upload's file name, a ``--model`` folder's name)."""
    path = str(Path(path).resolve()) if path else ""
    for name, folder in shipped_models().items():
        if str(Path(folder).resolve()) == path:
            return name
    with _NAMED_LOCK:
        for name, folder in _NAMED.items():
            if folder == path:
                return name
    return register(path)


def register(path: str | Path, name: str | None = None, shipped: bool = False, prepare=None) -> str:
    """Give a folder a menu name (its folder name unless ``name``), unique among the menu's;
    ``shipped``: a model the app ships, run in the server's process; ``prepare``: called
    before the first load while ``path`` does not exist (a packaged model assembled then)."""
    path = str(Path(path).resolve())
    if shipped:
        _SHIPPED_EXTRA.add(path)
    if prepare is not None:
        _PREPARE[path] = prepare
    base = name or Path(path).name or "model"
    with _NAMED_LOCK:
        for n, folder in _NAMED.items():
            if folder == path:
                return n
        taken = set(shipped_models()) | set(_NAMED)
        n, i = base, 2
        while n in taken:
            n, i = f"{base} ({i})", i + 1
        _NAMED[n] = path
        return n


def register_package(module: str, name: str) -> list[str]:
    """Put the model a package ships (``module.get_model_path()``: a folder) into the menu
    under ``name`` when the package is installed: ``[name]``, else ``[]`` (a broken install
    too: the menu goes without it). It runs in the server's process, as the shipped models do."""
    try:
        path = Path(importlib.import_module(module).get_model_path())
    except Exception:  # noqa: BLE001 (not installed or broken: nothing to offer)
        return []
    return [register(path, name, shipped=True)] if path.is_dir() else []


def menu(current: str | Path | None = None, owner: str | None = None) -> list[str]:
    """Names the model menu offers a session: the shipped models, then every registered one
    but other sessions' uploads.

    Args:
        current: the session's model (named in the menu if it was not yet).
        owner: the session's id; default the owner of ``current`` when that is an upload
            (a session on a shipped model sees no upload unless its id is given).
    """
    if current:
        model_name(current)
    root = private_dir("uploads")
    owner = owner_of(root, current) if owner is None and current else owner
    with _NAMED_LOCK:
        named = dict(_NAMED)
    return [*shipped_models(), *(n for n, f in named.items() if visible_to(root, f, owner))]


def resolve_model(name: str, owner: str | None = None) -> str:
    """A menu name (or a folder path) -> the folder.

    Args:
        owner: the asking session's id: another session's upload is then not found (the
            name itself comes back, as for any unknown name); None: no check.
    """
    with _NAMED_LOCK:
        folder = _NAMED.get(name)
    if folder is not None and (owner is None or visible_to(private_dir("uploads"), folder, owner)):
        return folder
    return shipped_models().get(name, name)


def visible(folder: str | Path, owner: str) -> bool:
    """Whether session ``owner`` may open ``folder`` (a path, or a name that resolved to
    nothing): every folder but another session's upload."""
    return visible_to(private_dir("uploads"), folder, owner)


# -- what the pickers offer ----------------------------------------------------------------------
def shipped_models(root: Path = MODELS_DIR) -> dict[str, str]:
    """``{name: folder}`` of the checkpoints under ``models/`` that have finished writing:
    attnviz folders and Hugging Face ones (``config.json`` + weights or a shard index)."""
    if not root.is_dir():
        return {}
    found = {p.name: str(p) for p in root.iterdir() if _is_model_dir(p)}
    order = [n for n in SHIPPED_ORDER if n in found] + sorted(set(found) - set(SHIPPED_ORDER))
    return {n: found[n] for n in order}


def _is_model_dir(p: Path) -> bool:
    if (p / WEIGHTS).is_file():
        return True
    return (p / HF_INDEX).is_file() and is_hf_folder(p)


# -- uploads ------------------------------------------------------------------------------------
def import_upload(
    paths: Sequence[str | Path], device: str = "cpu", owner: str = ""
) -> tuple[str, Checkpoint]:
    """Check an uploaded checkpoint (a folder's files, or one zip) and load it (in its
    worker, when workers are on: the server holds a :class:`~attnviz.app.workers.Facade`).

    Args:
        paths: uploaded file paths: ``model.safetensors`` (+ ``config.json``,
            ``snapshots.safetensors``), or one ``.zip`` holding them; or a Hugging Face
            folder's files (``config.json``, weights or index + shards, tokenizer files).
    Returns:
        ``(folder, checkpoint)``; the folder is what sessions refer to, under the folder of
        ``owner`` (a session id: :mod:`attnviz.app.uploads` deletes it with the session).
    Raises:
        CheckpointError: a pickle, a zip without weights, garbage, mismatched tensors, ...
    """
    files = [Path(p) for p in paths if p]
    if not files:
        raise CheckpointError("choose the files of a checkpoint folder, or one .zip of it")
    missing = [shorten(f.name, 40) for f in files if not f.is_file()]
    if missing:
        raise CheckpointError(f"uploaded files not found: {', '.join(missing[:4])}")
    check_size(files)
    root = private_dir("uploads").resolve()  # the loader names resolved paths
    check_space(root, sum(f.stat().st_size for f in files))
    dest = owner_dir(root, owner) / digest(files) / upload_name(files)
    tmp = Path(tempfile.mkdtemp(prefix="incoming-", dir=root))
    try:
        unpack(files, tmp)
        dest.parent.mkdir(parents=True, exist_ok=True)
        created = not dest.exists()
        if created:
            tmp.rename(dest)
    except CheckpointError as exc:
        raise CheckpointError(_public(one_line(exc, 1000), root)) from None
    except Exception as exc:  # noqa: BLE001
        # OSError, BadZipFile, RuntimeError (an encrypted member), NotImplementedError (an
        # unknown compression), MemoryError, ...: the upload's fault or not, a message
        raise CheckpointError(
            f"could not unpack the upload ({_public(one_line(exc), root)})"
        ) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone once renamed; else never kept
        if not dest.exists():
            _remove_empty(dest.parent)  # no empty folder left behind
    try:
        ckpt = get_checkpoint(dest, device)
        register(dest)
        return str(dest), ckpt
    except Exception as exc:  # noqa: BLE001 (every refusal: a message, nothing left on disk)
        if created:
            _discard(dest)
        line = _public(one_line(exc, 1000), root, dest)
        if isinstance(exc, WorkerStopped):  # named after what the user sent
            line = f"{shorten(files[0].name, 60)}: {line}"
        raise CheckpointError(line) from None


def _discard(folder: Path) -> None:
    """Remove an upload's folder and its parent when that is left empty."""
    shutil.rmtree(folder, ignore_errors=True)
    _remove_empty(folder.parent)


def _remove_empty(digest: Path) -> None:
    """An upload's ``<session>/<digest>`` folders, where nothing else is in them (another
    upload of the same files, or another of the session's, is)."""
    for folder in (digest, digest.parent):
        with contextlib.suppress(OSError):
            folder.rmdir()


def _public(message: str, root: Path, dest: Path | None = None) -> str:
    """``message`` without the server's private paths: the user knows the files they sent."""
    if dest is not None:
        message = message.replace(f"{dest}/", "the upload's ").replace(str(dest), "the upload")
    return re.sub(re.escape(str(root)) + r"[^\s'\":,]*", "the upload", message)


workers.register_store(is_shipped, get_checkpoint, model_name)  # what workers ask of the store
