"""An upload's files checked and unpacked into a folder, before anything loads them.

Nothing is unpickled: a file named like a pickle, or the weights file, is read by its first
bytes and refused with what it is. A zip's member names are flattened (no path from the zip is
used), and its declared sizes are capped before unpacking. A Hugging Face folder keeps only the
files its loader reads (configs, weights or the shards its index names, tokenizer files); an
attnviz folder's files get their canonical names. :func:`attnviz.app.store.import_upload`
loads what this leaves.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import zipfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from ..checkpoint import METADATA, WEIGHTS
from ..core.errors import CheckpointError, shorten
from ..train.evaluate import DEV_PAIRS  # a corpus run's dev pairs: the Expected line
from ..train.snapshots import SNAPSHOTS
from .filekinds import sniff

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


def digest(files: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f.name.encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def upload_name(files: Sequence[Path]) -> str:
    """What the menu calls an upload: the zip's name, else the weights file's (not "model")."""
    pick = [f for f in files if f.suffix.lower() == ".zip"] or [
        f for f in files if f.suffix == ".safetensors" and f.name != SNAPSHOTS
    ]
    stem = pick[0].stem if pick else "upload"
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in stem).strip("._")
    return stem if stem and stem != "model" else "upload"


def check_size(files: Sequence[Path]) -> None:
    """Refuse an upload whose files together are over :data:`MAX_UPLOAD_BYTES`."""
    if sum(f.stat().st_size for f in files) > MAX_UPLOAD_BYTES:
        raise CheckpointError(f"the upload is larger than {MAX_UPLOAD_BYTES >> 20} MB")


def unpack(files: Sequence[Path], dest: Path) -> None:
    """Check an upload's ``files`` (one ``.zip``, or loose files) and write what its model is
    read from into the empty folder ``dest``.

    Raises:
        CheckpointError: a pickle, a zip without weights or with two files of one needed name,
            more than :data:`MAX_UPLOAD_BYTES` unpacked, a zip beside loose files, garbage.
    """
    zips = [f for f in files if f.suffix.lower() == ".zip"]
    if len(files) == 1 and zips:
        if not zipfile.is_zipfile(files[0]):
            what = sniff(partial(Path.open, files[0], "rb"))
            raise CheckpointError(f"{shorten(files[0].name)} is {what}, not a readable zip file")
        _from_zip(files[0], dest)
    elif zips:
        raise CheckpointError("upload either one .zip or the loose files, not both")
    else:
        _place(list(files), dest)
