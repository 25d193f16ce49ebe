"""Text and data in: tokenizers (char, word, subword), corpora, built-in tasks and batches.

May import core only. The names below are this package's public API
(``attnviz.data.batch.read_pairs``, ``attnviz.data.batch.Batch``, ...).
"""

from . import subword  # noqa: F401  (registers the bpe and unigram kinds with tokenizer)
from .batch import Batch, make_batch, pad_batch, source_batch, tensorize, with_eos
from .corpus import (
    Corpus,
    CorpusError,
    EncodedCorpus,
    encode_corpus,
    filter_length,
    read_corpus,
    read_pairs,
    split_dev,
    split_indices,
)

__all__ = [
    "Batch",
    "Corpus",
    "CorpusError",
    "EncodedCorpus",
    "encode_corpus",
    "filter_length",
    "make_batch",
    "pad_batch",
    "read_corpus",
    "read_pairs",
    "source_batch",
    "split_dev",
    "split_indices",
    "tensorize",
    "with_eos",
]
