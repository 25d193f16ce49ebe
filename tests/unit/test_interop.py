"""Import of torch.nn.Transformer-based checkpoints: exact parity and clear refusals."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import attnviz
from attnviz.interop import from_torch_state_dict

PAD_IDX = 1  # as in PyTorch's translation tutorial

pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning:torch"
)  # the tutorial model's own warnings


# -- PyTorch's "Language Translation with nn.Transformer" tutorial model, as published --------
class PositionalEncoding(nn.Module):
    def __init__(self, emb_size: int, dropout: float, maxlen: int = 5000):
        super().__init__()
        den = torch.exp(-torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        pos_embedding = pos_embedding.unsqueeze(-2)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", pos_embedding)

    def forward(self, token_embedding):
        return self.dropout(token_embedding + self.pos_embedding[: token_embedding.size(0), :])


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, emb_size: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


class Seq2SeqTransformer(nn.Module):
    def __init__(
        self,
        num_encoder_layers,
        num_decoder_layers,
        emb_size,
        nhead,
        src_vocab_size,
        tgt_vocab_size,
        dim_feedforward=512,
        dropout=0.1,
        **kw,
    ):
        super().__init__()
        self.transformer = nn.Transformer(
            d_model=emb_size,
            nhead=nhead,
            num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers,
            dim_feedforward=dim_feedforward,
            dropout=dropout,
            **kw,
        )
        self.generator = nn.Linear(emb_size, tgt_vocab_size)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)

    def forward(
        self,
        src,
        trg,
        src_mask,
        tgt_mask,
        src_padding_mask,
        tgt_padding_mask,
        memory_key_padding_mask,
    ):
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
        outs = self.transformer(
            src_emb,
            tgt_emb,
            src_mask,
            tgt_mask,
            None,
            src_padding_mask,
            tgt_padding_mask,
            memory_key_padding_mask,
        )
        return self.generator(outs)


def reference_logits(ref, src, tgt):
    """The tutorial's forward (sequence-first) on batch-first ids -> [B, Tt, V]."""
    tt = tgt.shape[1]
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(tt)
    src_mask = torch.zeros(src.shape[1], src.shape[1], dtype=torch.bool)
    out = ref(src.T, tgt.T, src_mask, tgt_mask, src == PAD_IDX, tgt == PAD_IDX, src == PAD_IDX)
    return out.transpose(0, 1)


PARITY = [
    dict(norm_first=False, activation="relu", enc=2, dec=2, d=32, h=4),
    dict(norm_first=True, activation="gelu", enc=2, dec=2, d=32, h=4),
    dict(norm_first=False, activation="gelu", enc=3, dec=1, d=36, h=6),
    dict(norm_first=True, activation="relu", enc=1, dec=3, d=30, h=5),
]


@pytest.mark.parametrize("c", PARITY, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
@pytest.mark.parametrize("padded", [False, True])
def test_logits_match_the_original_module(c, padded):
    torch.manual_seed(0)
    ref = Seq2SeqTransformer(
        c["enc"],
        c["dec"],
        c["d"],
        c["h"],
        37,
        41,
        dim_feedforward=48,
        norm_first=c["norm_first"],
        activation=c["activation"],
    ).eval()
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, 37, (4, 9), generator=g)
    tgt = torch.randint(3, 41, (4, 7), generator=g)
    if padded:
        src[1, 6:] = PAD_IDX
        src[3, 2:] = PAD_IDX
        tgt[2, 5:] = PAD_IDX
    model = from_torch_state_dict(
        ref.state_dict(),
        n_heads=c["h"],
        norm_first=c["norm_first"],
        activation=c["activation"],
        pad_id=PAD_IDX,
    )
    cfg = model.config
    assert (cfg.d_model, cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.d_ff) == (
        c["d"],
        c["enc"],
        c["dec"],
        48,
    )
    assert (
        cfg.final_norm
        and cfg.max_len == 5000
        and (cfg.src_vocab_size, cfg.tgt_vocab_size) == (37, 41)
    )
    with torch.no_grad():
        expected = reference_logits(ref, src, tgt)
        ours = model(src, tgt, src == PAD_IDX, tgt == PAD_IDX)
        with attnviz.record(model):
            recorded = model(src, tgt, src == PAD_IDX, tgt == PAD_IDX)
    assert (ours - expected).abs().max() <= 1e-5
    assert (recorded - expected).abs().max() <= 1e-5
    # decoding helpers build the padding mask from the imported PAD index
    assert cfg.pad_id == PAD_IDX
    auto = attnviz.greedy_decode(model, src, 2, 3, max_len=6)
    assert torch.equal(
        auto, attnviz.greedy_decode(model, src, 2, 3, max_len=6, src_pad_mask=src == PAD_IDX)
    )


@pytest.fixture(scope="module")
def tutorial_state():
    torch.manual_seed(0)
    return Seq2SeqTransformer(1, 1, 16, 2, 11, 13, dim_feedforward=20).state_dict()


def test_unknown_keys_are_listed(tutorial_state):
    bad = dict(
        tutorial_state,
        **{"extra.weight": torch.zeros(2), "transformer.encoder.layers.0.foo": torch.zeros(1)},
    )
    with pytest.raises(
        attnviz.InteropError,
        match="unknown keys in state dict: extra.weight, transformer.encoder.layers.0.foo",
    ):
        from_torch_state_dict(bad, n_heads=2)


def test_missing_keys_are_listed(tutorial_state):
    bad = {
        k: v for k, v in tutorial_state.items() if k != "transformer.decoder.layers.0.norm3.weight"
    }
    with pytest.raises(attnviz.InteropError, match="missing keys.*decoder.layers.0.norm3.weight"):
        from_torch_state_dict(bad, n_heads=2)
    bad = {k: v for k, v in tutorial_state.items() if k != "generator.bias"}
    with pytest.raises(attnviz.InteropError, match="missing keys in state dict: generator.bias"):
        from_torch_state_dict(bad, n_heads=2)


def test_other_refusals(tutorial_state):
    with pytest.raises(attnviz.InteropError, match="not the state dict of a torch.nn.Transformer"):
        from_torch_state_dict({"fc.weight": torch.zeros(2, 2)}, n_heads=2)
    with pytest.raises(attnviz.InteropError, match="n_heads=3 must divide d_model=16"):
        from_torch_state_dict(tutorial_state, n_heads=3)
    learned = dict(
        tutorial_state, **{"positional_encoding.pos_embedding": torch.randn(5000, 1, 16)}
    )
    with pytest.raises(
        attnviz.InteropError, match="learned positional embeddings are not supported"
    ):
        from_torch_state_dict(learned, n_heads=2)
    wrong = dict(tutorial_state, **{"generator.weight": torch.zeros(13, 8)})
    with pytest.raises(attnviz.InteropError, match="generator.weight"):
        from_torch_state_dict(wrong, n_heads=2)


def test_imported_model_carries_the_tutorial_special_ids(tutorial_state):
    """UNK 0, PAD 1, BOS 2, EOS 3 by default; decoding reads them from the config."""
    model = from_torch_state_dict(tutorial_state, n_heads=2)
    cfg = model.config
    assert (cfg.unk_id, cfg.pad_id, cfg.bos_id, cfg.eos_id) == (0, 1, 2, 3)
    src = torch.tensor([[5, 6, 7, 1, 1], [5, 6, 7, 8, 9]])  # row 0 padded with the pad id 1
    out = attnviz.greedy_decode(model, src, cfg.bos_id, cfg.eos_id, max_len=6)
    alone = attnviz.greedy_decode(model, src[:1, :3], cfg.bos_id, cfg.eos_id, max_len=6)
    n = alone.shape[1]
    assert out[0, :n].tolist() == alone[0].tolist()  # padding 1 is masked, not read
    other = from_torch_state_dict(tutorial_state, n_heads=2, pad_id=0, unk_id=1)
    assert (other.config.pad_id, other.config.unk_id) == (0, 1)


def test_half_precision_state_dict_imports(tutorial_state):
    half = {k: v.to(torch.bfloat16) for k, v in tutorial_state.items()}
    model = from_torch_state_dict(half, n_heads=2)
    assert next(model.parameters()).dtype == torch.float32
    assert torch.equal(model.src_embed.weight, half["src_tok_emb.embedding.weight"].float())


def test_one_final_norm_only_is_refused(tutorial_state):
    bad = {k: v for k, v in tutorial_state.items() if not k.startswith("transformer.encoder.norm.")}
    with pytest.raises(attnviz.InteropError, match="only one of encoder.norm and decoder.norm"):
        from_torch_state_dict(bad, n_heads=2)


def test_nan_weights_are_refused(tutorial_state):
    """The same weight-loading path as checkpoints: NaN or inf is named, not loaded."""
    key = "transformer.encoder.layers.0.linear1.weight"
    bad = dict(tutorial_state)
    bad[key] = bad[key].clone()
    bad[key][0, 0] = float("nan")
    with pytest.raises(attnviz.InteropError, match=r"NaN or inf in encoder\.layers\.0\.ff"):
        from_torch_state_dict(bad, n_heads=2)


def test_an_owned_source_lets_go_of_what_it_gives_and_a_shared_one_keeps_it():
    """A load's own tensors leave the dict as they are taken (a copied one is freed at once);
    a caller's dict is left as it was; a table two sides name is the same tensor both times."""
    from attnviz.interop.hf.common import Source

    given = {"a": torch.ones(3), "b": torch.zeros(2)}
    kept = Source(given, "here")
    assert kept.take("a") is given["a"] and given["a"].device.type == "cpu"
    owned = Source(dict(given), "here", owned=True)
    a = owned.take("a")
    assert a is given["a"] and owned.tensors["a"].device.type == "meta"
    assert owned.take("a") is a and owned.has("a") and owned.leftovers() == ["b"]
    copied = torch.cat([owned.take("b"), torch.ones(1)])  # "b" is held by nothing else now
    del given["b"]
    with pytest.raises(attnviz.InteropError, match="read twice and was copied"):
        owned.take("b")
    assert copied.shape == (3,)
