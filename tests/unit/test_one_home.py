"""Facts with one home (#36): how a head is named and read, what a model kind has, which ids
are not text, where a text ends, the sines-then-cosines sinusoids."""

from __future__ import annotations

import math

import pytest
import torch

import attnviz
from attnviz.app.state import SessionState
from attnviz.core.errors import InputError
from attnviz.core.model_kind import ARCHS, Kind
from attnviz.core.positions import fairseq_positions, half_sinusoids, whisper_positions
from attnviz.core.sites import head_name, parse_head, parse_head_index, parse_layer
from attnviz.core.specials import not_text_ids
from attnviz.decode.decoding import Decoding
from attnviz.interop.hf.registry import REGISTRY
from attnviz.train.options import TrainOptions


@pytest.mark.parametrize("text", ["cross L1 H2", "cross 1 2", "cross:1:2", " cross  l1  h2 "])
def test_every_spelling_of_a_head_reads_back_as_the_one_written(text):
    assert parse_head(text) == ("cross", 1, 2)
    assert head_name(*parse_head(text)) == "cross L1 H2"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "not a head"),
        ("cross 1", "not a head"),
        ("cross one 2", "not a head"),
        ("cross 1 2 3", "not a head"),
        ("cross L1 H-2", "not a head"),
        ("sideways 0 0", "unknown attention kind 'sideways'"),
    ],
)
def test_what_is_not_a_head_is_refused_in_one_line(text, match):
    with pytest.raises(InputError, match=match):
        parse_head(text)


def test_a_layer_or_a_head_alone_reads_with_or_without_its_letter():
    assert [parse_layer(v) for v in ("L3", "3", 3, "l3")] == [3, 3, 3, 3]
    assert [parse_head_index(v) for v in ("H2", "2", 2, "h2")] == [2, 2, 2, 2]
    with pytest.raises(InputError, match="not a layer: 'x'; layers read like 'L1'"):
        parse_layer("x")
    with pytest.raises(InputError, match="not a head: 'H'; heads read like 'H1'"):
        parse_head_index("H")


@pytest.mark.parametrize(
    ("arch", "stacks"),
    [
        ("encoder-decoder", (True, True, True, False, False)),
        ("decoder-only", (False, True, False, True, False)),
        ("encoder-only", (True, False, False, False, True)),
    ],
)
def test_a_kind_is_asked_what_it_has_wherever_it_is_held(arch, stacks):
    """A config, a Hugging Face family and a training run answer alike."""
    cfg = attnviz.ModelConfig(50, 50, arch=arch, n_encoder_layers=1, n_decoder_layers=1)
    family = next(f for f in REGISTRY.values() if f.arch == arch)
    for holder in (cfg, family, Kind(arch), TrainOptions(task="copy", arch=arch).kind):
        got = (holder.has_encoder, holder.has_decoder, holder.has_cross)
        assert (*got, holder.decoder_only, holder.encoder_only) == stacks
    assert not cfg.reads_audio


def test_an_unknown_kind_is_refused_where_it_is_named():
    assert set(ARCHS) == {"encoder-decoder", "decoder-only", "encoder-only"}
    assert TrainOptions(task="copy").kind.has_cross  # unset: the config's default
    with pytest.raises(InputError, match="--arch must be encoder-decoder, decoder-only or enc"):
        assert TrainOptions(task="copy", arch="decoder").kind
    with pytest.raises(ValueError, match="arch must be one of"):
        Kind("both")


def test_the_ids_that_are_not_text_include_a_configs_further_end_ids():
    cfg = attnviz.ModelConfig(
        50, 50, pad_id=0, bos_id=1, eos_id=2, unk_id=3, end_ids=(7, 9), arch="decoder-only"
    )
    assert not_text_ids(cfg) == {0, 1, 2, 7, 9}
    assert not_text_ids(cfg, unk=True, more=[None, 11]) == {0, 1, 2, 3, 7, 9, 11}


def test_a_text_ends_at_any_end_id_of_the_checkpoints_decoding():
    cfg = attnviz.ModelConfig(50, 50, eos_id=2, end_ids=(7,), arch="decoder-only")
    decoding = Decoding.of(cfg, None, None)
    assert decoding.ends(2) and decoding.ends(7) and not decoding.ends(5)
    assert decoding.until_end([5, 6, 7, 8, 2]) == [5, 6, 7]
    assert decoding.until_end([5, 0, 0]) == [5]  # no end: the padding dropped
    state = SessionState(src_ids=[4], tokens=[5, 7], step=2, max_steps=9, end_ids=(7,))
    assert state.done and not state.stopped_at_limit


@pytest.mark.parametrize("d_model", [4, 5, 64, 384])
def test_the_three_sines_then_cosines_tables_are_one_formula(d_model):
    rows = torch.arange(40)
    half = d_model // 2
    rate = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000) / (half - 1)))
    angles = rows.float()[:, None] * rate  # [T, D / 2]
    want = torch.cat([angles.sin(), angles.cos(), torch.zeros(40, d_model % 2)], dim=1)
    assert torch.equal(half_sinusoids(rows, d_model), want)
    assert torch.equal(whisper_positions(40, d_model), want)
    fairseq = fairseq_positions(40, d_model, pad_id=1)
    assert torch.equal(fairseq[2:], want[2:]) and not fairseq[1].any()
