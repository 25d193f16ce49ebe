"""The SentencePiece models CTranslate2 text folders are shipped with, as attnviz tokenizers.

CTranslate2 never tokenizes; the package around the folder does. An Argos Translate package is
``model/`` (the CTranslate2 folder) with ``sentencepiece.model`` beside it, in the parent
folder; OpenNMT ships ``source.spm`` and ``target.spm`` (or names them in its config as
``src_subword_model`` / ``tgt_subword_model``). Those programs encode text to pieces with the
model, hand the pieces to ``translate_batch`` and decode the pieces it returns with the model;
:class:`SpmTokenizer` does the same, so ``ckpt.predict(text) ==
sp.decode(translator.translate_batch([sp.encode(text, out_type=str)])[0].hypotheses[0])``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ...core.errors import shorten
from ...data.tokenizer import content_ids
from .vocabulary import VocabTokenizer

#: File names of a side's SentencePiece model, in the order they are looked for (in the folder,
#: then in its parent: Argos Translate keeps ``sentencepiece.model`` beside ``model/``).
NAMES = {
    "source": ("source.spm", "sentencepiece.model"),
    "target": ("target.spm", "sentencepiece.model"),
}
#: OpenNMT-py's options naming the subword models (a file name in the folder or its parent).
CONFIG_KEYS = {"source": "src_subword_model", "target": "tgt_subword_model"}
#: Largest SentencePiece model read (a 64k-piece model is about 1 MB).
MAX_MODEL_BYTES = 64 << 20


@dataclass(frozen=True)
class SpmModels:
    """The folder's SentencePiece models: ``source`` and ``target`` processors (one object when
    one model serves both), the files they came from, or ``why`` none is used."""

    source: object | None = None
    target: object | None = None
    paths: tuple[Path, ...] = ()
    why: str | None = None


def _candidates(folder: Path, config: dict, side: str) -> list[Path]:
    named = config.get(CONFIG_KEYS[side])
    names = list(NAMES[side])
    if isinstance(named, str) and named:
        names.insert(0, Path(named).name)  # a file name only: nothing outside these folders
    return [base / name for name in names for base in (folder, folder.parent)]


def find_models(folder: Path, config: dict) -> SpmModels:
    """The SentencePiece models of ``folder`` (a CTranslate2 folder): ``source.spm`` /
    ``target.spm`` / the config's names, or ``sentencepiece.model``, in the folder or its
    parent. A side without its own model uses the other side's.

    Returns:
        :class:`SpmModels`; empty (``why`` None) where the folder has none, with ``why``
        where a file is there but does not load.
    """
    found = {}
    for side in ("source", "target"):
        found[side] = next((p for p in _candidates(folder, config, side) if p.is_file()), None)
    if found["source"] is None and found["target"] is None:
        return SpmModels()
    found["source"] = found["source"] or found["target"]  # one model for both sides
    found["target"] = found["target"] or found["source"]
    try:
        import sentencepiece
    except ImportError:
        return SpmModels(why="reading text with sentencepiece models needs: pip install "
                         "sentencepiece")  # fmt: skip
    loaded: dict[Path, object] = {}
    for path in dict.fromkeys(found.values()):
        size = path.stat().st_size
        if size > MAX_MODEL_BYTES:
            return SpmModels(why=f"{shorten(path, 300)} has {size:,} bytes, more than a "
                             "sentencepiece model")  # fmt: skip
        try:
            loaded[path] = sentencepiece.SentencePieceProcessor(model_file=str(path))
        except Exception as exc:  # sentencepiece raises OSError / RuntimeError for bad files
            return SpmModels(why=f"{shorten(path, 300)} did not load ({type(exc).__name__})")
    return SpmModels(
        loaded[found["source"]], loaded[found["target"]], tuple(dict.fromkeys(found.values()))
    )


class SpmTokenizer(VocabTokenizer):
    """Text <-> the folder's vocabulary ids through a SentencePiece model: text is encoded to
    pieces, each piece looked up in the vocabulary (a piece it lacks is the unknown id, and
    is listed); output pieces are decoded by the model, as Argos Translate and OpenNMT do.

    Args:
        tokens, specials, prefix, suffix, side, hidden: as :class:`VocabTokenizer`.
        model: a ``sentencepiece.SentencePieceProcessor``.
        path: the file it came from.
    """

    kind = "ct2-sentencepiece"

    def __init__(
        self,
        tokens: list[str],
        specials: dict[str, int],
        model,
        path: Path,
        prefix: tuple[int, ...] = (),
        suffix: tuple[int, ...] = (),
        side: str = "source",
        hidden: tuple[int, ...] = (),
    ):
        super().__init__(tokens, specials, prefix, suffix, "", side, hidden)
        self.model, self.path = model, Path(path)

    def __repr__(self) -> str:
        return f"SpmTokenizer(size={len(self)}, side={self.side!r}, path={str(self.path)!r})"

    def split(self, text: str) -> list[str]:
        """The model's pieces of ``text`` (what is handed to ``translate_batch``)."""
        super().split(text)  # type check
        return list(self.model.encode(text, out_type=str))

    def _id(self, piece: str) -> int | None:
        return self._index.get(piece)

    def _too_many_unknown(self, unknown: list[str], n: int) -> str:
        return (
            f"{len(unknown)} of {n} pieces of {shorten(self.path.name)} are not in the "
            f"vocabulary ({shorten(', '.join(dict.fromkeys(unknown)), 80)}): is it the "
            "sentencepiece model this model was trained with?"
        )

    def decode(self, ids: Iterable[int], *, stop_at_eos: bool = True) -> str:
        """Ids -> text: their pieces decoded by the SentencePiece model, up to the end id,
        without ``hidden`` ids."""
        kept = content_ids(ids, self.eos_id, stop_at_eos, self.hidden)
        return self.model.decode_pieces([self.token(i) for i in kept])

    def to_dict(self) -> dict:
        return super().to_dict() | {"path": str(self.path)}
