"""The tokenizer of a GGUF file, built from its metadata as transformers builds it.

A GGUF file has no ``tokenizer.json``: it stores the vocabulary, scores, token types, merges
and special ids under llama.cpp's ``tokenizer.ggml.*`` keys. :func:`gguf_tokenizer` checks
them (counts, sizes, types, ranges) and writes the ``tokenizers`` JSON that transformers'
GGUF path (``integrations/gguf/gguf_tokenizer_mapping.py``) ends up with — sentencepiece-style
BPE with byte fallback for ``llama`` (Gemma's own spelling for ``gemma*`` architectures),
byte-level BPE for ``gpt2`` with the word splitter ``tokenizer.ggml.pre`` names — so the ids
are transformers' ids. No regex comes from the file: only the named splitters below run.

Deriving a sentencepiece vocabulary's merges takes a few seconds for 262,144 tokens (Gemma 3),
so the JSON is cached under ``$XDG_CACHE_HOME/attnviz/gguf-tokenizers/`` and the second open
reads it back.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ...core.errors import InputError, InteropError, one_line, shorten
from ...data.tokenizer_checks import (
    GPT4O_SPLIT,
    QWEN35_SPLIT,
    TEKKEN_SPLIT,
    check_folder,
    rust_panics,
)
from ..hf_tokenizer import HFTokenizer
from .tokenizer_meta import CONTROL, GEMMA_ARCHS, USER_DEFINED, read_spec, safe_key, spec_hash

log = logging.getLogger(__name__)

#: Bumped whenever the JSON written here changes, so older cache entries are not read.
BUILD_VERSION = 1
#: Vocabularies at least this long print a line while they are built.
ANNOUNCE_TOKENS = 10_000

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: ``tokenizer.ggml.pre`` -> the word splitter of a byte-level vocabulary (llama.cpp's names;
#: any other name splits as GPT-2 does).
SPLITS = {
    **dict.fromkeys(
        ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "dbrx",
         "smaug-bpe", "lfm2", "midm-2.0", "jina-v5-nano"),
        _LLAMA3_SPLIT,
    ),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez", "kormo", "f2llmv2"), _QWEN2_SPLIT),
    "qwen35": QWEN35_SPLIT,
    "tekken": TEKKEN_SPLIT,
    **dict.fromkeys(("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), GPT4O_SPLIT),
}  # fmt: skip


def gguf_tokenizer(
    metadata: dict,
    vocab_rows: int,
    source: str,
    cache_key: str | None = None,
    cache_dir: Path | None = None,
) -> GGUFTokenizer:
    """The tokenizer a GGUF file's metadata describes, giving transformers' ids.

    Args:
        metadata: the file's metadata (``read_gguf(path).metadata``): key -> value, string
            arrays as ``list[str]``, numeric arrays as lists or numpy arrays.
        vocab_rows: the model's embedding rows; a longer vocabulary is refused.
        source: the file, as messages name it.
        cache_key: names the cache entry (e.g. a hash of the file); default: a hash of the
            tokenizer metadata itself.
        cache_dir: where built tokenizers are kept (default :func:`default_cache_dir`).

    Returns:
        a :class:`GGUFTokenizer` (the :class:`~attnviz.interop.hf_tokenizer.HFTokenizer` API).

    Raises:
        InteropError: one line naming the first key that is malformed or out of bounds.
    """
    spec = read_spec(metadata, vocab_rows, source)
    key = safe_key(cache_key) if cache_key is not None else spec_hash(spec)
    path = Path(cache_dir or default_cache_dir()) / f"{key}-v{BUILD_VERSION}.json"
    tok = _cached(path, spec)
    if tok is None:
        if len(spec["tokens"]) >= ANNOUNCE_TOKENS:
            print(f"attnviz: building the tokenizer of {shorten(source)} "
                  f"({len(spec['tokens']):,} tokens), once; cached in {path.parent}",
                  file=sys.stderr, flush=True)  # fmt: skip
        text = build_json(spec)
        tok = _load(text, spec, source)
        _store(path, text)
    return GGUFTokenizer(_Backend(tok, spec), spec["specials"], Path(source), vocab_rows)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/attnviz/gguf-tokenizers`` (``~/.cache`` when unset)."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "attnviz" / "gguf-tokenizers"


class GGUFTokenizer(HFTokenizer):
    """A GGUF file's tokenizer: :class:`HFTokenizer` over the ``tokenizers`` library alone
    (transformers is not needed)."""

    kind = "gguf"

    def for_target(self) -> GGUFTokenizer:
        """The same tokenizer (a decoder-only model reads and writes one vocabulary)."""
        return GGUFTokenizer(self._tok, self.specials, self.path, self._vocab_size, "target")

    def __repr__(self) -> str:
        return f"GGUFTokenizer(size={len(self)}, path={str(self.path)!r})"


class _Backend:
    """A ``tokenizers.Tokenizer`` with the few transformers tokenizer methods
    :class:`HFTokenizer` calls (``tok(text)``, ``tokenize``, ``decode``, ...)."""

    mask_token = mask_token_id = sep_token = sep_token_id = None

    def __init__(self, tok, spec: dict):
        self.backend_tokenizer = tok
        self._pieces: list[str | None] | None = None
        self._size = len(spec["tokens"])  # ids 0..n-1 (a repeated token leaves its first id bare)
        self.eos_token_id = spec["ids"].get("eos")
        self.all_special_ids = sorted(
            {i for i, t in tok.get_added_tokens_decoder().items() if t.special}
        )

    def __call__(
        self,
        text: str | None = None,
        *,
        text_target: str | None = None,
        add_special_tokens: bool = True,
        return_offsets_mapping: bool = False,
    ) -> dict:
        enc = self.backend_tokenizer.encode(
            text if text is not None else text_target, add_special_tokens=add_special_tokens
        )
        out = {"input_ids": list(enc.ids)}
        if return_offsets_mapping:
            out["offset_mapping"] = list(enc.offsets)
        return out

    def __len__(self) -> int:
        return self._size

    def tokenize(self, text: str) -> list[str]:
        """The pieces of ``text``, no special tokens added."""
        return list(self.backend_tokenizer.encode(text, add_special_tokens=False).tokens)

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: bool = False) -> str:  # fmt: skip
        """Ids -> text (transformers' GGUF tokenizers never clean up spaces)."""
        return self.backend_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str | None]:
        """The piece of each id (None for an id no piece has)."""
        if self._pieces is None:  # one table: 262,144 id_to_token calls take half a second
            self._pieces = [None] * len(self)
            for piece, i in self.get_vocab().items():
                if 0 <= i < len(self._pieces):
                    self._pieces[i] = piece
        n = len(self._pieces)
        return [self._pieces[i] if 0 <= i < n else None for i in map(int, ids)]

    def get_vocab(self) -> dict[str, int]:
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)


# --- building ----------------------------------------------------------------------------


def build_json(spec: dict) -> str:
    """The ``tokenizers`` JSON transformers' GGUF path builds for ``spec`` (see the module)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    tokens, kind = spec["tokens"], spec["kind"]
    skeleton = Tokenizer(models.BPE())
    if kind == "gpt2":
        spelled = _byte_alphabet()
        alphabet = set(spelled)
        keys = [t if set(t) <= alphabet else _spell(t, spelled) for t in tokens]
        model = {"unk_token": None, "continuing_subword_prefix": "", "end_of_word_suffix": "",
                 "fuse_unk": False, "byte_fallback": False}  # fmt: skip
        split = SPLITS.get(spec["pre"])
        if split is None:
            skeleton.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        else:
            skeleton.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(_regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ])  # fmt: skip
        skeleton.decoder = decoders.ByteLevel()
        defaults = ("<|endoftext|>",)
    elif spec["arch"] in GEMMA_ARCHS:
        # Runs of spaces are stored as spaces but looked up as "▁▁"; merges follow file order.
        keys = ["\u2581" * len(t) if " " in t and not t.strip() else t for t in tokens]
        model = {"unk_token": "<unk>", "continuing_subword_prefix": None,
                 "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True}  # fmt: skip
        skeleton.normalizer = normalizers.Replace(" ", "\u2581")
        skeleton.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
        skeleton.decoder = decoders.Sequence(
            [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
        )
        defaults = ("<unk>", "<bos>", "<eos>", "<pad>", "<mask>")
    else:
        keys = tokens
        model = {"unk_token": None, "continuing_subword_prefix": None,
                 "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True}  # fmt: skip
        if spec["arch"] == "phi3":  # the prefix space comes from a normalizer (as transformers)
            skeleton.normalizer = normalizers.Sequence(
                [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]
            )
        else:
            skeleton.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=False)
        skeleton.decoder = decoders.Sequence([
            decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ])  # fmt: skip
        defaults = ("<unk>", "<s>", "</s>")
    vocab = {t: i for i, t in enumerate(keys)}  # a repeated token keeps its last id
    merges = spec["merges"]
    if merges is None:
        if spec["arch"] in GEMMA_ARCHS:
            order = {t: -i for i, t in enumerate(keys)}
        else:
            order = dict(zip(keys, spec["scores"], strict=True))
        merges = derive_merges(vocab, order)
    added = _added_tokens(spec, vocab, defaults)
    skeleton.post_processor = _template(spec, tokens)
    doc = json.loads(skeleton.to_str())
    doc["model"] = {"type": "BPE", "dropout": None, **model, "ignore_merges": False,
                    "vocab": vocab, "merges": [list(m) for m in merges]}  # fmt: skip
    doc["added_tokens"] = added
    return json.dumps(doc, ensure_ascii=False)


def derive_merges(vocab: dict[str, int], scores: dict[str, float]) -> list[tuple[str, str]]:
    """The merges a sentencepiece vocabulary implies: every token cut into two tokens, best
    score first (transformers' ``generate_merges`` with scores, in the same order)."""
    merges = []
    for token, score in scores.items():
        local = [
            (vocab[token[:k]], vocab[token[k:]], token[:k], token[k:], score)
            for k in range(1, len(token))
            if token[:k] in vocab and token[k:] in vocab
        ]
        local.sort(key=lambda m: (m[0], m[1]))
        merges.extend(local)
    merges.sort(key=lambda m: (m[4], len(m[2]), len(m[3])), reverse=True)
    return [(m[2], m[3]) for m in merges]


def _added_tokens(spec: dict, vocab: dict[str, int], defaults: tuple[str, ...]) -> list[dict]:
    """Tokens read whole from text: control tokens (special), user-defined ones (not
    special), then the tokenizer class's default and the file's named specials."""
    tokens, types = spec["tokens"], spec["types"] or ()
    out: dict[str, dict] = {}

    def add(token: str, special: bool) -> None:
        if token not in out and token in vocab:
            out[token] = {"id": vocab[token], "content": token, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False,
                          "special": special}  # fmt: skip

    alphabet = set(_byte_alphabet()) if spec["kind"] == "gpt2" else None
    for token, kind in zip(tokens, types, strict=False):
        if kind == CONTROL and (alphabet is None or set(token) <= alphabet):
            add(token, True)
    for token, kind in zip(tokens, types, strict=False):
        if kind == USER_DEFINED:
            add(token, False)
    for token in defaults:
        add(token, True)
    for role in ("bos", "eos", "unk", "pad"):
        if role in spec["ids"]:
            add(tokens[spec["ids"][role]], True)
    return sorted(out.values(), key=lambda t: t["id"])


def _template(spec: dict, tokens: list[str]):
    """BOS / EOS around the text as the file's ``add_bos_token`` / ``add_eos_token`` say."""
    from tokenizers import processors

    single, pair, specials = "$A:0", "$B:1", []
    bos, eos = spec["ids"].get("bos"), spec["ids"].get("eos")
    if spec["add_bos_token"] and bos is not None:
        single, pair = f"{tokens[bos]}:0 {single}", f"{tokens[bos]}:1 {pair}"
        specials.append((tokens[bos], bos))
    if spec["add_eos_token"] and eos is not None:
        single, pair = f"{single} {tokens[eos]}:0", f"{pair} {tokens[eos]}:1"
        specials.append((tokens[eos], eos))
    return processors.TemplateProcessing(single=single, pair=f"{single} {pair}",
                                         special_tokens=specials)  # fmt: skip


def _regex(pattern: str):
    from tokenizers import Regex

    return Regex(pattern)


def _byte_alphabet() -> list[str]:
    """GPT-2's byte -> printable character table (``bytes_to_unicode``), indexed by byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]  # fmt: skip
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def _spell(token: str, spelled: list[str]) -> str:
    """A token in GPT-2's byte alphabet (a file that stored it as plain text)."""
    return "".join(spelled[b] for b in token.encode("utf-8", "surrogatepass"))


# --- the cache ---------------------------------------------------------------------------


def _cached(path: Path, spec: dict):
    """The tokenizer cached at ``path``, or None (absent, unreadable or not ours: rebuilt)."""
    try:
        text = path.read_text(encoding="utf-8")
        return _load(text, spec, str(path))
    except (OSError, UnicodeError, InteropError, InputError, ValueError) as exc:
        if path.exists():
            log.warning("rebuilding the cached tokenizer %s: %s", path, one_line(exc, 200))
        return None


def _load(text: str, spec: dict, where: str):
    """``tokenizers`` JSON -> a Tokenizer, checked to be one this module writes for ``spec``
    (its components by :func:`check_folder`, its size by the file's) before it reads text."""
    from tokenizers import Tokenizer

    with rust_panics(f"reading the tokenizer of {shorten(spec['source'])}"):
        try:
            tok = Tokenizer.from_str(text)
        except Exception as exc:  # the Rust library's errors are plain Exceptions
            raise InteropError(f"{shorten(where)}: the tokenizer does not build "
                               f"({one_line(exc, 200)}); its vocabulary and merges disagree") from None  # fmt: skip
    tok.no_padding()
    tok.no_truncation()
    parts = ("normalizer", "pre_tokenizer", "post_processor", "decoder")
    doc = {part: getattr(tok, part) for part in parts}
    doc = {part: json.loads(c.__getstate__()) for part, c in doc.items() if c is not None}
    check_folder({**doc, "model": {"type": type(tok.model).__name__}})
    size = tok.get_vocab_size(with_added_tokens=True)
    if type(tok.model).__name__ != "BPE" or not 0 < size <= len(spec["tokens"]):
        raise InteropError(f"{shorten(where)} does not hold this file's vocabulary")
    return tok


def _store(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temp file + rename); a failure only logs."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError as exc:
        log.warning("could not cache the tokenizer in %s: %s", path, one_line(exc, 200))
