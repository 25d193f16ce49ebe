"""Tiny random Hugging Face encoder-decoders, one per family, for the import tests.

Every parameter and buffer is random (zero biases and unit norms would hide mapping bugs),
sizes are odd (D = 40, Dh = 10 or T5's own 8, unequal depths). Needs ``transformers``.
"""

from __future__ import annotations

from pathlib import Path

import torch

V = 61  # vocabulary of the tiny models

#: The tiny sizes, under the names most transformers configs use (Llama, Mistral, Qwen2,
#: Gemma 3, BERT, RoBERTa); every family's kwargs below start from it or from :data:`_COMMON`.
_SIZES = dict(
    vocab_size=V,
    hidden_size=40,
    intermediate_size=56,
    num_attention_heads=4,
    max_position_embeddings=64,
)

#: The same sizes as the BART-like encoder-decoders name them.
_COMMON = dict(
    d_model=40,
    encoder_layers=2,
    decoder_layers=3,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=56,
    decoder_ffn_dim=56,
    max_position_embeddings=64,
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
)
_ONE_VOCAB = dict(_COMMON, vocab_size=V)  # FSMT names a vocabulary per side instead

#: T5's own names for the sizes (its heads are 8 wide, not 40 / 3)
_T5 = dict(
    vocab_size=V,
    d_model=40,
    d_kv=8,
    num_heads=3,
    d_ff=56,
    num_layers=2,
    num_decoder_layers=3,
    feed_forward_proj="relu",
    relative_attention_num_buckets=8,
    relative_attention_max_distance=20,
    dropout_rate=0.0,
    decoder_start_token_id=0,
)

#: family -> (config class name, model class name, config kwargs)
FAMILIES = {
    "marian": (
        "MarianConfig",
        "MarianMTModel",
        dict(
            _ONE_VOCAB,
            pad_token_id=V - 1,
            decoder_start_token_id=V - 1,
            eos_token_id=0,
            forced_eos_token_id=0,
            activation_function="swish",
            scale_embedding=True,
        ),
    ),
    "bart": (
        "BartConfig",
        "BartForConditionalGeneration",
        dict(_ONE_VOCAB, activation_function="gelu", scale_embedding=False),
    ),
    "mbart": (
        "MBartConfig",
        "MBartForConditionalGeneration",
        dict(
            _ONE_VOCAB, activation_function="gelu", scale_embedding=True, decoder_start_token_id=2
        ),
    ),
    "pegasus": (
        "PegasusConfig",
        "PegasusForConditionalGeneration",
        dict(
            _ONE_VOCAB,
            pad_token_id=0,
            eos_token_id=1,
            decoder_start_token_id=0,
            activation_function="relu",
            scale_embedding=True,
        ),
    ),
    "fsmt": (
        "FSMTConfig",
        "FSMTForConditionalGeneration",
        dict(
            _COMMON,
            langs=["en", "de"],
            src_vocab_size=V,
            tgt_vocab_size=V - 8,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            decoder_start_token_id=2,
            activation_function="relu",
            scale_embedding=True,
            tie_word_embeddings=False,
        ),
    ),
    "t5": ("T5Config", "T5ForConditionalGeneration", dict(_T5)),
    "t5-v1.1": (
        "T5Config",
        "T5ForConditionalGeneration",
        dict(_T5, feed_forward_proj="gated-gelu", tie_word_embeddings=False),
    ),
}


def model_type(family: str) -> str:
    """The config.json ``model_type`` of a :data:`FAMILIES` entry ("t5-v1.1" is a T5)."""
    return family.split("-")[0]


def build(family: str, seed: int = 0, **overrides):
    """A random transformers model of ``family`` in eval mode with eager attention."""
    import transformers

    config_cls, model_cls, kwargs = FAMILIES[family]
    config = getattr(transformers, config_cls)(**{**kwargs, **overrides})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name and family not in ("bart", "mbart"):
                continue  # a fixed sinusoidal table, not a weight
            base = 1.0 if "norm" in name and name.endswith("weight") else 0.0
            p.copy_(base + 0.3 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if "final_logits_bias" in name:
                b.copy_(0.3 * torch.randn_like(b))
    return model


def save(model, folder: Path, **generation) -> Path:
    """``save_pretrained`` with safetensors, with ``generation`` settings in its config."""
    for key, value in generation.items():
        setattr(model.generation_config, key, value)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


CORPUS = [
    "the cat sat on the mat",
    "a dog ran in the park",
    "the bird sang a song",
    "we read a book at home",
    "the sun is warm today",
    "she sat by the river",
    "they walked to the shop",
    "it rained on the town",
] * 4


#: a second language for target-side tokenizers (Marian's target.spm)
TARGET_CORPUS = [
    "die Katze sass auf der Matte",
    "ein Hund lief im Park",
    "der Vogel sang ein Lied",
    "wir lasen ein Buch zu Hause",
    "die Sonne ist heute warm",
    "sie sass am Fluss",
    "sie gingen zum Laden",
    "es regnete auf die Stadt",
] * 4


def _train_sentencepiece(
    folder: Path, name: str, vocab_size: int, corpus: list[str] | None = None, **kwargs
) -> Path:
    import sentencepiece as spm

    prefix = folder / name
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus or CORPUS),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=1,
        **kwargs,
    )
    return prefix.with_suffix(".model")


def marian_tokenizer(folder: Path, target: bool = False):
    """A MarianTokenizer on a sentencepiece model trained here: </s> 0, <unk> 1, <pad> last.

    ``target``: a second sentencepiece model, trained on :data:`TARGET_CORPUS`, is the
    target side's (``target.spm``; one shared vocab.json), as opus-mt folders have it.
    """
    import json

    import sentencepiece as spm
    from transformers import MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    specials = dict(unk_id=1, bos_id=-1, eos_id=0, pad_id=-1)
    model = _train_sentencepiece(folder, "spm", 48, **specials)
    models = [model]
    if target:
        models.append(_train_sentencepiece(folder, "tgt", 48, TARGET_CORPUS, **specials))
    vocab: dict[str, int] = {}
    for m in models:
        sp = spm.SentencePieceProcessor(model_file=str(m))
        for i in range(sp.get_piece_size()):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    return MarianTokenizer(
        source_spm=str(model), target_spm=str(models[-1]), vocab=str(folder / "vocab.json")
    )


def t5_tokenizer(folder: Path):
    """A T5Tokenizer on a sentencepiece model trained here: <pad> 0, </s> 1, <unk> 2."""
    from transformers import T5Tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    import sentencepiece as spm

    model = _train_sentencepiece(folder, "spiece", 48, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    sp = spm.SentencePieceProcessor(model_file=str(model))
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    return T5Tokenizer(vocab=vocab, extra_ids=0)


def bart_tokenizer(folder: Path):
    """A byte-level BPE BartTokenizer trained here: <s> 0, <pad> 1, </s> 2, <unk> 3."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import BartTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    bpe.train_from_iterator(CORPUS, vocab_size=300, min_frequency=1, special_tokens=specials)
    bpe.save_model(str(folder))
    return BartTokenizer(vocab=str(folder / "vocab.json"), merges=str(folder / "merges.txt"))


#: the families this module has a tokenizer for
TOKENIZED = ["marian", "t5", "bart"]


def tokenized_folder(root: Path, family: str):
    """A tiny random ``family`` folder with its own tokenizer trained here (Marian: the target
    side's); returns ``(transformers tokenizer, folder)``."""
    if family == "marian":
        tok = marian_tokenizer(root / "tok", target=True)
        sizes = {
            "vocab_size": len(tok),
            "pad_token_id": tok.pad_token_id,
            "decoder_start_token_id": tok.pad_token_id,
            "eos_token_id": tok.eos_token_id,
        }
    else:
        tok = {"t5": t5_tokenizer, "bart": bart_tokenizer}[family](root / "tok")
        sizes = {"vocab_size": len(tok)}
        if family == "bart":
            sizes["pad_token_id"] = tok.pad_token_id
    hf_model = build(family, **sizes)
    hf_model.generation_config.max_new_tokens = 6
    hf_model.save_pretrained(root / "model", safe_serialization=True)
    tok.save_pretrained(root / "model")
    return tok, root / "model"


_DECODER = dict(
    _SIZES,
    num_hidden_layers=3,
    num_key_value_heads=2,
    bos_token_id=1,
    eos_token_id=2,
    attention_dropout=0.0,
)

#: decoder-only families: family -> (config class name, model class name, config kwargs)
DECODER_ONLY = {
    "gpt2": (
        "GPT2Config",
        "GPT2LMHeadModel",
        dict(
            vocab_size=V,
            n_embd=40,
            n_layer=3,
            n_head=4,
            n_positions=64,
            n_inner=56,
            bos_token_id=V - 1,
            eos_token_id=V - 1,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        ),  # fmt: skip
    ),
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(_DECODER)),
    "llama-rope3": (  # Llama 3.1's rotary scaling, one key/value head (multi-query)
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(
            _DECODER,
            num_key_value_heads=1,
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=10000.0,
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=64,
            ),
        ),  # fmt: skip
    ),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(_DECODER, sliding_window=24)),
    "qwen2": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        dict(_DECODER, tie_word_embeddings=True, rope_parameters=dict(rope_theta=500.0)),
    ),
    "gemma3_text": (  # local and global layers, Dh 12 != 40 / 4, one key/value head
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        dict(
            _DECODER,
            num_key_value_heads=1,
            head_dim=12,
            query_pre_attn_scalar=20,
            sliding_window=4,
            pad_token_id=0,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        ),  # fmt: skip
    ),
}

_BERT = dict(
    _SIZES,
    num_hidden_layers=2,
    type_vocab_size=2,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    pad_token_id=0,
)

#: encoder-only families with a masked-LM head
ENCODER_ONLY = {
    "bert": ("BertConfig", "BertForMaskedLM", dict(_BERT)),
    "roberta": (  # positions start after the pad id: two more rows
        "RobertaConfig",
        "RobertaForMaskedLM",
        dict(
            _BERT,
            max_position_embeddings=66,
            type_vocab_size=1,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
        ),  # fmt: skip
    ),
    "distilbert": (
        "DistilBertConfig",
        "DistilBertForMaskedLM",
        dict(
            vocab_size=V,
            dim=40,
            hidden_dim=56,
            n_layers=2,
            n_heads=4,
            max_position_embeddings=64,
            dropout=0.0,
            attention_dropout=0.0,
            pad_token_id=0,
        ),  # fmt: skip
    ),
}


def build_one_stack(family: str, seed: int = 0):
    """A random decoder-only or encoder-only transformers model, eval mode, eager attention;
    every parameter random (norm weights around 1)."""
    import transformers

    config_cls, model_cls, kwargs = {**DECODER_ONLY, **ENCODER_ONLY}[family]
    config = getattr(transformers, config_cls)(**kwargs)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm = any(s in name.lower() for s in ("norm", "ln_")) and name.endswith("weight")
            p.copy_((1.0 if norm else 0.0) + 0.3 * torch.randn_like(p))
    return model


def gpt2_text_folder(folder: Path, **overrides):
    """A random GPT-2 folder with a byte-level BPE tokenizer trained here (<|endoftext|> = 0);
    returns ``(transformers model, tokenizer)``. ``overrides`` go to ``GPT2Config``."""
    import transformers
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        CORPUS, vocab_size=300, min_frequency=1, special_tokens=["<|endoftext|>"]
    )
    tok = transformers.GPT2TokenizerFast(tokenizer_object=bpe._tokenizer)
    tok.save_pretrained(folder)
    config = transformers.GPT2Config(**{
        **dict(vocab_size=len(tok), n_embd=40, n_layer=2, n_head=4, n_positions=64,
               bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
        **overrides,
    })  # fmt: skip
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm = "ln_" in name and name.endswith("weight")
            p.copy_((1.0 if norm else 0.0) + 0.3 * torch.randn_like(p))
    model.save_pretrained(folder, safe_serialization=True)
    return model, tok
