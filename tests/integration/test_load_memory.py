"""Loading without waste: a Hugging Face folder's weights exist about once at the peak.

The folder's safetensors are read into tensors of their own, not mapped; the model's
parameters take the tensors the loader made instead of copies; a tensor the conversion copies
(q/k/v joined) is let go as its copy is made; the NaN/inf check makes no float64 copy.
Measured in a fresh process (its VmHWM over what the imports hold), on a Llama folder of
~280 MB (#36 asks for <= 1.2x on 300 MB).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import attnviz
from attnviz.core.weights import build_model, finite, unique_state_dict

transformers = pytest.importorskip("transformers")

_PEAK = """
import json, sys
import attnviz, torch
from attnviz.interop.hf.load import load_hf_model

def status(key):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key + ":"))

with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")  # the high-water mark starts again here
base = status("VmRSS")
model = load_hf_model(sys.argv[1])
total = sum(t.numel() * t.element_size() for t in model.state_dict().values())
print(json.dumps({"peak": status("VmHWM") - base, "weights": total}))
"""


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama-280mb")
    cfg = transformers.LlamaConfig(
        vocab_size=16000, hidden_size=512, intermediate_size=1408, num_hidden_layers=18,
        num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=256,
        tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(folder)
    return folder


def test_peak_memory_of_loading_is_about_the_weights_once(llama_folder):
    out = subprocess.run([sys.executable, "-c", _PEAK, str(llama_folder)], check=True,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    got = json.loads(out.stdout.strip().splitlines()[-1])
    ratio = got["peak"] / got["weights"]
    print(f"weights {got['weights'] / 2**20:.0f} MB, peak {got['peak'] / 2**20:.0f} MB, "
          f"{ratio:.2f}x")  # fmt: skip
    assert got["weights"] > 250 * 2**20
    # 1.03x measured (1.22x while the joined q/k/v kept the three they were joined from: the
    # attention's weights twice); a second copy of the embedding alone would be ~1.12x more
    assert ratio <= 1.2, ratio


def test_tensors_are_shared_only_when_owned():
    """build_model copies a caller's tensors (a user's state dict stays theirs) and takes
    the memory of tensors a loader read for it (owned=True); tied tables stay one."""
    cfg = attnviz.ModelConfig(11, 11, d_model=16, n_heads=2, n_encoder_layers=1,
                              n_decoder_layers=1, d_ff=32, dropout=0.0, tie_output=True)  # fmt: skip
    torch.manual_seed(0)
    tensors = unique_state_dict(attnviz.Transformer(cfg))
    given = {t.data_ptr() for t in tensors.values()}
    copied = build_model(cfg, tensors, "test")
    assert not {t.data_ptr() for t in unique_state_dict(copied).values()} & given
    kept = build_model(cfg, tensors, "test", owned=True)
    assert {t.data_ptr() for t in unique_state_dict(kept).values()} == given
    assert kept.generator.weight is kept.tgt_embed.weight
    for a, b in zip(copied.state_dict().values(), kept.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_finite_sees_nan_inf_and_an_overflowing_sum_of_finite_numbers():
    assert finite(torch.ones(10)) and finite(torch.empty(0))
    assert not finite(torch.tensor([1.0, float("nan")]))
    assert not finite(torch.tensor([1.0, float("-inf")]))
    big = torch.full((4,), 3e38)  # the float32 sum overflows; every number is finite
    assert not bool(torch.isfinite(big.sum())) and finite(big)
    big[2] = float("inf")
    assert not finite(big)
