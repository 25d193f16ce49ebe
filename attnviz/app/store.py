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
import hashlib
import json
import re
import shutil
import tempfile
import threading
import zipfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from ..checkpoint import METADATA, WEIGHTS, Checkpoint, load_checkpoint
from ..core import devices
from ..core.errors import AttnvizError, CheckpointError, one_line, shorten
from ..core.tempdirs import clean_stale, make_temp_dir
from ..interop.hf import is_hf_folder
from ..train.evaluate import DEV_PAIRS  # a corpus run's dev pairs: the Expected line
from ..train.snapshots import SNAPSHOTS
from . import workers
from .examples import examples_for as examples_for  # imported from here too
from .examples import examples_of as examples_of
from .filekinds import sniff
from .lru import LRU as LRU  # the app's LRU map (imported from here too)
from .upload_space import check_space, owner_dir, owner_of, visible_to  # per-session uploads
from .workers import WorkerStopped, facade, remote_path

ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = ROOT / "models"
ASSETS_DIR = ROOT / "assets"
#: Preferred order of the shipped models in the picker; others follow alphabetically.
SHIPPED_ORDER = ("reverse", "copy", "sort", "translate")
#: Largest upload (all files together) the app unpacks.
MAX_UPLOAD_BYTES = 200 * 1024 * 1024
_ALLOWED = (WEIGHTS, METADATA, SNAPSHOTS, DEV_PAIRS)
#: The index of a sharded Hugging Face checkpoint.
HF_INDEX = "model.safetensors.index.json"
#: What an uploaded Hugging Face folder may hold (plus the shards its index names).
HF_ALLOWED = (
    "config.json",
    "generation_config.json",
    WEIGHTS,
    HF_INDEX,
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "source.spm",
    "target.spm",
    "spiece.model",
    "sentencepiece.bpe.model",
    "vocab.json",
    "merges.txt",
)
_SHARD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.safetensors")
_PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt")


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
def _check_kind(name: str, open_file, weights: bool = False) -> None:
    """Refuse a file that is not what a checkpoint holds, saying what it is.

    ``weights``: the file is to be read as the weights (a ``.safetensors`` file, or the one
    file of an upload); otherwise only files named like pickles are looked at.
    """
    base = shorten(Path(name).name)
    pickle_name = name.lower().endswith(_PICKLE_SUFFIXES) or Path(name).name == "data.pkl"
    if not (weights or pickle_name):
        return
    kind = sniff(open_file)
    if kind in ("a pickle", "a torch.save file"):
        raise CheckpointError(
            f"{base} is {kind} (torch.save writes pickles); the app never unpickles "
            "uploads. Convert it where you trust it: load it and save the weights with "
            "safetensors (attnviz.save_checkpoint), then upload model.safetensors + config.json"
        )
    if kind == "safetensors" and not pickle_name:
        return
    if kind == "a file of unrecognised bytes" and weights and not pickle_name:
        return  # the loader says what is wrong with it
    hint = f"; rename it {WEIGHTS}" if kind == "safetensors" else ""
    raise CheckpointError(
        f"{base} is {kind}, not a model file the app reads{hint}: upload a checkpoint "
        f"folder's {WEIGHTS} (+ {METADATA}), or one .zip of the folder"
    )


def _is_hf_config(data: bytes) -> bool:
    """A ``config.json`` of a Hugging Face folder (a ``model_type``, no attnviz ``config``)."""
    try:
        cfg = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    return isinstance(cfg, dict) and "model_type" in cfg and "config" not in cfg


def _shards(index: bytes) -> set[str]:
    """The shard file names a ``model.safetensors.index.json`` names (plain names only)."""
    try:
        data = json.loads(index)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise CheckpointError(f"{HF_INDEX} is not readable JSON") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{HF_INDEX} has no weight_map")
    names = {str(v) for v in weight_map.values()}
    bad = sorted(n for n in names if not _SHARD.fullmatch(n) or n == SNAPSHOTS)
    if bad:
        raise CheckpointError(
            f"{HF_INDEX} names a shard that is not a plain file name: {shorten(bad[0])}"
        )
    return names


def _hf_wanted(read, names: list[str]) -> list[str] | None:
    """For a Hugging Face folder's files (``read(name) -> bytes``): the names to keep;
    ``None`` when the files are not a Hugging Face folder."""
    if "config.json" not in names or not _is_hf_config(read("config.json")):
        return None
    allowed = set(HF_ALLOWED)
    if HF_INDEX in names:
        allowed |= _shards(read(HF_INDEX))
        missing = sorted(n for n in allowed - set(HF_ALLOWED) if n not in names)
        if missing:
            raise CheckpointError(
                f"the upload lacks the shard {shorten(missing[0])} its index names"
            )
    elif WEIGHTS not in names:
        raise CheckpointError(
            f"the Hugging Face folder holds no {WEIGHTS} (nor {HF_INDEX} and its shards)"
        )
    return [n for n in names if n in allowed]


def _needed(name: str) -> bool:
    """A file name an upload's model may be read from (weights, configs, tokenizer files)."""
    return name in _ALLOWED or name in HF_ALLOWED or name.endswith((".safetensors", ".json"))


def _from_zip(zpath: Path, dest: Path) -> None:
    with zipfile.ZipFile(zpath) as z:
        members = [m for m in z.infolist() if not m.is_dir()]
        if sum(m.file_size for m in members) > MAX_UPLOAD_BYTES:
            raise CheckpointError(f"the zip unpacks to more than {MAX_UPLOAD_BYTES >> 20} MB")
        for m in members:
            _check_kind(m.filename, lambda m=m: z.open(m))
        by_name: dict[str, zipfile.ZipInfo] = {}
        for m in members:  # flattened: a name the model needs must be there once
            name = Path(m.filename).name
            if name in by_name and _needed(name):
                raise CheckpointError(
                    f"the zip holds two files named {shorten(name)} "
                    f"({shorten(by_name[name].filename, 40)} and {shorten(m.filename, 40)}): "
                    "zip one model's folder"
                )
            by_name.setdefault(name, m)
        hf = _hf_wanted(lambda n: z.read(by_name[n]), list(by_name))
        if hf is not None:
            for name in hf:  # flat names checked above: no path from the zip is used
                with z.open(by_name[name]) as src, open(dest / name, "wb") as out:
                    shutil.copyfileobj(src, out)
            return
        wanted = {n: m for n, m in by_name.items() if n in _ALLOWED}
        if WEIGHTS not in wanted:
            names = ", ".join(shorten(n, 40) for n in sorted(by_name)[:6]) or "nothing"
            raise CheckpointError(f"the zip holds no {WEIGHTS} (it holds {names})")
        _check_kind(WEIGHTS, lambda: z.open(wanted[WEIGHTS]), weights=True)
        for name, m in wanted.items():  # flat, fixed names: no path from the zip is used
            with z.open(m) as src, open(dest / name, "wb") as out:
                shutil.copyfileobj(src, out)


def _place(files: list[Path], dest: Path) -> None:
    """Loose files -> ``dest`` under their canonical names (a Hugging Face folder's: their own)."""
    for f in files:
        _check_kind(f.name, partial(Path.open, f, "rb"))
    by_name = {f.name: f for f in files}
    hf = _hf_wanted(lambda n: by_name[n].read_bytes(), list(by_name))
    if hf is not None:
        for name in hf:
            shutil.copyfile(by_name[name], dest / name)
        return
    weights = [f for f in files if f.suffix == ".safetensors" and f.name != SNAPSHOTS]
    json_files = [f for f in files if f.suffix == ".json" and f.name != DEV_PAIRS]
    others = [
        f for f in files if f not in weights and f not in json_files and f.name not in _ALLOWED
    ]
    if len(weights) > 1:
        raise CheckpointError("upload one model's files: more than one weights .safetensors file")
    if not weights:
        if not others:
            raise CheckpointError(f"no {WEIGHTS} among the uploaded files")
        weights = others[:1]  # safetensors under another name loads; anything else is named
    _check_kind(weights[0].name, partial(Path.open, weights[0], "rb"), weights=True)
    shutil.copyfile(weights[0], dest / WEIGHTS)
    if json_files:
        shutil.copyfile(json_files[0], dest / METADATA)
    for f in files:
        if f.name in (SNAPSHOTS, DEV_PAIRS):
            shutil.copyfile(f, dest / f.name)


def _digest(files: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f.name.encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def _upload_name(files: Sequence[Path]) -> str:
    """What the menu calls an upload: the zip's name, else the weights file's (not "model")."""
    pick = [f for f in files if f.suffix.lower() == ".zip"] or [
        f for f in files if f.suffix == ".safetensors" and f.name != SNAPSHOTS
    ]
    stem = pick[0].stem if pick else "upload"
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in stem).strip("._")
    return stem if stem and stem != "model" else "upload"


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
    if sum(f.stat().st_size for f in files) > MAX_UPLOAD_BYTES:
        raise CheckpointError(f"the upload is larger than {MAX_UPLOAD_BYTES >> 20} MB")
    root = private_dir("uploads").resolve()  # the loader names resolved paths
    check_space(root, sum(f.stat().st_size for f in files))
    dest = owner_dir(root, owner) / _digest(files) / _upload_name(files)
    tmp = Path(tempfile.mkdtemp(prefix="incoming-", dir=root))
    try:
        zips = [f for f in files if f.suffix.lower() == ".zip"]
        if len(files) == 1 and zips:
            if not zipfile.is_zipfile(files[0]):
                what = sniff(partial(Path.open, files[0], "rb"))
                raise CheckpointError(
                    f"{shorten(files[0].name)} is {what}, not a readable zip file"
                )
            _from_zip(files[0], tmp)
        elif zips:
            raise CheckpointError("upload either one .zip or the loose files, not both")
        else:
            _place(files, tmp)
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
