"""app.recall on a tiny random audio model: the encoder trace that keeps each layer's input
gives the weights and masks a trace recorded in full gives, bit for bit, holds a fraction of
its bytes, and the decode it serves is the same (#39)."""

from __future__ import annotations

import pytest
import torch

import attnviz
from attnviz.app.decoders import APP_CAPTURE, held_bytes
from attnviz.app.recall import RecalledEncoder, encode_keeping_inputs
from attnviz.core.errors import TraceLookupError
from attnviz.decode.greedy import GreedyStepper


@pytest.fixture(scope="module")
def model():
    cfg = attnviz.ModelConfig(
        src_vocab_size=50, tgt_vocab_size=50, d_model=24, n_heads=3, d_ff=40,
        n_encoder_layers=2, n_decoder_layers=2, source="audio", n_mels=8, positions="learned",
        encoder_positions="whisper", max_len=20, max_source_len=60, norm_first=True,
        final_norm=True, activation="gelu", dropout=0.0, pad_id=0, eos_id=0, bos_id=1,
    )  # fmt: skip
    torch.manual_seed(0)
    return attnviz.Transformer(cfg).eval()


def test_recomputed_equals_recorded_and_costs_less(model):
    features = torch.randn(8, 120)  # [n_mels, 2 * Ts]: 60 encoder frames
    full = GreedyStepper(model, features, 1, 0, max_len=6, capture=APP_CAPTURE)
    kept = encode_keeping_inputs(
        lambda capture: GreedyStepper(model, features, 1, 0, max_len=6, capture=capture),
        model,
        APP_CAPTURE,
    )
    assert kept.run() == full.run()  # the same decode
    enc = kept.encoder_trace
    assert isinstance(enc, RecalledEncoder) and kept.capture == APP_CAPTURE
    assert enc.keys() == full.encoder_trace.keys() == [("encoder_self", 0), ("encoder_self", 1)]
    for layer in (0, 1):
        for what in ("weights", "mask"):
            assert torch.equal(
                getattr(enc.get("encoder_self", layer), what),
                getattr(full.encoder_trace.get("encoder_self", layer), what),
            )
    with torch.no_grad(), attnviz.record(model, capture=("weights",)):
        memory = model.encode(features[None])  # [1, Ts, D] on the recording path
    assert torch.equal(enc.memory, memory)
    assert torch.equal(kept.trace().weights("cross", 1), full.trace().weights("cross", 1))
    assert torch.equal(
        kept.trace().weights("encoder_self", 1), full.trace().weights("encoder_self", 1)
    )  # the assembled trace reads the recomputed layers
    enc.release()
    assert held_bytes(kept) < held_bytes(full)
    with pytest.raises(TraceLookupError, match="holds no 'cross' layer 0"):
        enc.get("cross", 0)


def test_a_layer_is_recomputed_once_per_request(model):
    features = torch.randn(8, 120)
    kept = encode_keeping_inputs(
        lambda capture: GreedyStepper(model, features, 1, 0, max_len=3, capture=capture),
        model,
        APP_CAPTURE,
    )
    enc = kept.encoder_trace
    enc.numpy("encoder_self", 1)
    enc.numpy("encoder_self", 1, "mask")
    assert enc.recomputed == 1
    enc.release()
    enc.numpy("encoder_self", 1)
    assert enc.recomputed == 2
